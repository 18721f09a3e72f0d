"""What is done with run directories: training one from a recipe (:func:`train`, the one
entry point of the command line, the demo and Python programs), starting one from a Hugging
Face checkpoint, merging or quantizing one into another, and exporting one. The directory
itself -- its files, its writer -- is :mod:`scratchformer.training.rundir`'s; opening one
(:func:`load_run`) is :mod:`scratchformer.opening`'s."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .config import DataConfig, Recipe, TrainConfig
from .data.tokenizer import recognise_roles
from .errors import Interrupted, require_extra
from .interop.hf import TOKENIZER_FILE, chat_template, from_pretrained, save_pretrained
from .interop.onnx import check_destination
from .interop.onnx import export_onnx as write_onnx
from .interop.peft import save_adapter
from .io import atomic_write_dir
from .opening import load_run, open_task, pretrained, pretrained_chat_template, run_model
from .tasks import Task, build_task
from .training.checkpoint import latest_checkpoint
from .training.distributed import setup
from .training.initialisation import copy_pretrained, new_model
from .training.interrupt import StopSignals
from .training.lora import apply_lora, is_adapted, merge_lora
from .training.rundir import (
    QUANTIZATION_KEY,
    STEP_DIR,
    check_empty,
    check_free,
    check_target,
    claim,
    is_run,
    is_run_file,
    saved_quantization,
    write_run,
    write_run_info,
)
from .training.trainer import Trainer

IMPORTED_TASKS = {
    "encoder": "classification",
    "decoder": "lm",
    "seq2seq": "translation",
    "span": "qa",
    "mlm": "mlm",
}
"""The task of an imported model's run, by its head or else its architecture: a language
model generates right away, an encoder-decoder (T5) translates, a question-answering model
(``span`` head) answers, a masked language model (``mlm`` head) fills masks; a pretrained
encoder waits for a fine-tune (``--set task=...`` picks another task)."""
TOKENIZER_KINDS = {"encoder": "wordpiece", "decoder": "bpe", "seq2seq": "bpe"}
"""The kind of tokenizer an imported run's recipe names, the nearest of ours to the
family's (the run reads the checkpoint's own ``tokenizer.json``; T5's is SentencePiece's
unigram model)."""


def start_run(recipe: Recipe, run_dir: Path) -> tuple[Task, nn.Module]:
    """Learn the task's tokenizers (and labels) from the training data -- or take the
    pretrained model's for a fine-tune, and its chat template -- complete the recipe's
    model section, and write them to ``run_dir``. Returns the task and the model to train:
    initialised from ``train.seed``, with the pretrained weights of ``train.init_from`` when
    there is one, adapted as ``train.lora_*`` say. ``recipe`` itself is left as it was: the
    task holds the completed copy (``task.recipe``)."""
    recipe = copy.deepcopy(recipe)
    task = build_task(recipe)
    start = None
    if recipe.train.init_from is not None:
        start, task.pretrained_tokenizer = pretrained(recipe.train.init_from)
        task.chat_template = pretrained_chat_template(recipe.train.init_from)
        # the fine-tune's decoder starts from the pretrained one's token, which the
        # tokenizer must have
        recipe.model.decoder_start = start.config.decoder_start
    task.prepare()
    recipe.model = task.model_config(None if start is None else start.config)
    write_run(run_dir, recipe, task.tokenizers, chat_template=task.chat_template)
    model = new_model(recipe)
    if start is not None:
        copy_pretrained(model, start, recipe.train.init_from, recipe.train.init_only)
    return task, apply_lora(model, recipe.train)


def train(
    recipe: Recipe | str | Path,
    run_dir: str | Path,
    *,
    overrides: Sequence[str] = (),
    resume: bool = False,
    overwrite: bool = False,
    device: str = "auto",
    quiet: bool = False,
) -> dict[str, Any] | None:
    """Train a model as ``recipe`` (a :class:`Recipe` or a TOML file, with
    ``section.key=value`` ``overrides``) describes, into ``run_dir``; or, with ``resume``,
    continue the run there from its last checkpoint (``overrides`` then change its saved
    recipe). Returns the last evaluation (under ``torchrun``, on rank 0; the other processes
    get ``None``). The command line, the demo and Python programs all train through here;
    under ``torchrun`` every process calls it.

    ``run_dir`` must be new or empty, or hold a run to ``resume``, or a run directory to
    ``overwrite`` (its files are deleted; a directory that holds anything else is refused);
    otherwise ``ValueError``, with nothing touched. Rank 0 holds the directory's lock for the
    whole run (another process training there is an error). SIGTERM and SIGINT stop the run
    after the step in progress with a checkpoint of it and raise :class:`Interrupted`."""
    run_dir = Path(run_dir)
    check_free(run_dir)  # before the process group: a writer at work, then the rest
    check_target(run_dir, resume=resume, overwrite=overwrite)
    dist = setup(device)
    trainer = None
    try:
        with ExitStack() as owned:
            stop = owned.enter_context(StopSignals())
            failure = None
            if dist.is_main:
                try:
                    started = owned.enter_context(
                        claim(run_dir, resume=resume, overwrite=overwrite)
                    )
                    if not resume:
                        task, model = start_run(_recipe_of(recipe, overrides), run_dir)
                    started()  # (a run replaced is deleted only now)
                except Exception as error:  # told to the other ranks, then raised
                    failure = error
            if dist.any(failure is not None):  # also the barrier: rank 0 has written the run
                if failure is not None:
                    raise failure
                raise ValueError("rank 0 could not start the run (its error says why)")
            if resume or not dist.is_main:  # the recipe and tokenizers that rank 0 wrote
                task, saved = open_task(run_dir, list(overrides) if resume else [])
                starting = not resume or task.keeps_starting_model
                model = run_model(saved, pretrained_weights=starting)
            if resume:
                _check_same_task(_recipe_of(recipe, overrides), saved, run_dir)
                if dist.is_main:
                    write_run_info(run_dir)  # this version writes the run from now on
            if task.train_config.threads is not None:
                torch.set_num_threads(task.train_config.threads)
            trainer = Trainer(task, model, run_dir, dist, quiet=quiet, stop=stop)
            result = trainer.fit(resume=resume)
        return result if dist.is_main else None
    except Interrupted as interruption:
        step = trainer.state["step"] if trainer is not None else 0
        raise Interrupted(interruption.signum, _stopped(run_dir, step)) from None
    finally:
        dist.close()


def _stopped(run_dir: Path, step: int) -> str:
    """What an interrupted run leaves: which step it was at (0: before its first, or
    before loading its checkpoint), which checkpoint is kept."""
    at = f" at step {step}" if step else ""
    kept = latest_checkpoint(run_dir)
    if kept is None:
        return f"interrupted{at}, before the first checkpoint; {run_dir} holds no run to resume"
    kept_step = int(STEP_DIR.fullmatch(kept.name)[1])  # type: ignore[index]
    return (
        f"interrupted{at}; checkpoint of step {kept_step} kept in {run_dir}; resume with --resume"
    )


def _check_same_task(given: Recipe, saved: Recipe, run_dir: Path) -> None:
    """A run is resumed with (a recipe of) its own task, not another one by mistake."""
    if given.task != saved.task:
        raise ValueError(
            f"{run_dir} holds a {saved.task!r} run, not one of the recipe's task "
            f"{given.task!r}: resume it with its own recipe, or choose another --out"
        )


def _recipe_of(recipe: Recipe | str | Path, overrides: Sequence[str]) -> Recipe:
    """``recipe`` itself, or read from its file, with ``overrides`` applied."""
    if isinstance(recipe, Recipe):
        return Recipe.from_dict(recipe.to_dict(), overrides) if overrides else recipe
    return Recipe.load(recipe, overrides)


def merge(run_dir: Path, out_dir: Path) -> None:
    """A run directory ``out_dir`` of a LoRA run's model with its adapters folded into its
    weights: the recipe with ``train.lora_rank`` unset, the tokenizers (and chat template),
    and the merged weights in full, for every command that opens a run. ``out_dir`` must be
    new or empty."""
    check_empty(out_dir)
    task, model = load_run(run_dir, need_head=False)
    if not is_adapted(model):
        raise ValueError(f"{run_dir} is not a LoRA run (train.lora_rank is unset): no adapters")
    _save_run(task, merge_lora(model), out_dir)


def quantize_run(run_dir: Path, out_dir: Path, quantization: str = "int8") -> None:
    """A run directory ``out_dir`` of a run's model quantized (:func:`~.inference.quantize`;
    a LoRA run's with its adapters merged first): the recipe (``train.lora_rank`` unset),
    the tokenizers (and chat template), and ``model.safetensors`` with the quantized weights
    (for int8, each ``....weight`` in int8 beside its float32 ``....scales``), its header
    naming the quantization, so that :func:`load_run` and every command open it quantized.
    ``out_dir`` must be new or empty."""
    check_empty(out_dir)
    task, model = load_run(run_dir, need_head=False, quantization=quantization)
    _save_run(task, model, out_dir, {QUANTIZATION_KEY: quantization})


def _save_run(
    task: Task, model: nn.Module, out_dir: Path, metadata: dict[str, str] | None = None
) -> None:
    """Write a run directory ``out_dir`` of ``task`` (its recipe with ``train.lora_rank``
    unset, its tokenizers and chat template), of the whole of ``model``, with ``metadata``
    in the weights' header."""
    recipe = task.recipe
    recipe = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, lora_rank=None))
    write_run(out_dir, recipe, task.tokenizers, model, metadata, task.chat_template)


def import_hf(hf_dir: Path, run_dir: Path, overrides: Sequence[str] = ()) -> Recipe:
    """A run directory from a Hugging Face checkpoint (of a family in
    :data:`~.interop.families.FAMILIES`): the recipe (its model section describes the
    architecture; ``overrides``, ``section.key=value``, set its data and train sections,
    e.g. ``data.translation.source_prefix``), the tokenizer and the weights, so that later commands
    start from it. Returns the recipe."""
    for override in overrides:
        if override.partition(".")[0].strip() not in ("data", "train"):
            raise ValueError(
                f"--set {override!r}: an imported run takes data.* and train.* settings "
                "(its task and model are the checkpoint's)"
            )
    check_empty(run_dir)
    if not (hf_dir / TOKENIZER_FILE).is_file():
        raise FileNotFoundError(f"{hf_dir} has no {TOKENIZER_FILE}, which a run directory needs")
    model, tokenizer = from_pretrained(hf_dir)
    assert tokenizer is not None
    lost = sorted(tokenizer.special_tokens.items() - recognise_roles(tokenizer.backend).items())
    if lost:
        warnings.warn(
            f"special tokens {lost} are declared by the checkpoint but not recognisable by "
            "their strings: the run directory's tokenizer loses these roles",
            stacklevel=2,
        )
    config = model.config
    task = IMPORTED_TASKS[config.head or config.arch]
    data = DataConfig(
        tokenizer=TOKENIZER_KINDS[config.arch],
        vocab_size=tokenizer.vocab_size,
        max_len=min(DataConfig.max_len, config.max_len),
    )
    if task == "lm":  # windows no longer than the checkpoint's positions
        data.lm.block_size = min(data.lm.block_size, config.max_len)
    recipe = Recipe(task, config, data, TrainConfig())
    recipe = Recipe.from_dict(recipe.to_dict(), overrides)
    write_run(run_dir, recipe, {"tokenizer": tokenizer}, model, chat_template=chat_template(hf_dir))
    return recipe


def full_weights(run_dir: Path, refusal: str, need_head: bool = True) -> tuple[Task, nn.Module]:
    """A run's task and model to export: a LoRA run's adapters merged; a run with int8
    weights refused, ``refusal`` saying why."""
    quantization = saved_quantization(run_dir)
    if quantization is not None:
        raise ValueError(
            f"{run_dir} holds {quantization} weights, {refusal}: export the run it was "
            "quantized from"
        )
    task, model = load_run(run_dir, need_head=need_head)
    if is_adapted(model):
        merge_lora(model)
    return task, model


def export_hf(run_dir: Path, hf_dir: Path) -> None:
    """A Hugging Face checkpoint directory of a run's model and tokenizer (for models that
    a family of :data:`~.interop.families.FAMILIES` expresses); a LoRA run's with its
    adapters merged. ``hf_dir`` may not be a run directory (its config.json would be
    replaced by the checkpoint's)."""
    if is_run(hf_dir):
        raise ValueError(f"{hf_dir} is a run directory: write the checkpoint elsewhere")
    task, model = full_weights(run_dir, "which no Hugging Face checkpoint of ours holds", False)
    try:
        save_pretrained(model, hf_dir, task.tokenizers.get("tokenizer"), task.chat_template)  # type: ignore[arg-type]
    except ValueError as error:  # (a model no family expresses: the run is at fault)
        raise ValueError(f"{run_dir}: {error}") from None
    for reads, setting in (
        (
            "shared words as token type 2, which the checkpoint's tokenizer does not give: pass "
            "them as token_type_ids yourself",
            "mark_shared_words",
        ),
        (
            "each pair in both orders and predicts the mean: do the same with the checkpoint",
            "symmetric_pairs",
        ),
    ):
        if getattr(task.data.pairs, setting):
            warnings.warn(f"{run_dir} reads {reads} (data.pairs.{setting})", stacklevel=2)


def export_onnx(run_dir: Path, out_dir: Path) -> None:
    """An ONNX directory of an encoder run's model, tokenizer and labels
    (:func:`~.interop.onnx.export_onnx`); a LoRA run's with its adapters merged."""
    check_destination(out_dir)
    task, model = full_weights(run_dir, "which the ONNX export does not write")
    if model.config.arch != "encoder":
        raise ValueError(
            f"{run_dir} is a {task.name!r} run ({model.config.arch}): export-onnx exports "
            "encoder runs (export-gguf: language models)"
        )
    about = {"task": task.name, "labels": task.data.labels}
    tokenizer = task.tokenizer().to_json()
    atomic_write_dir(out_dir, lambda directory: write_onnx(model, directory, tokenizer, about))


def export_peft(run_dir: Path, out_dir: Path) -> None:
    """A PEFT adapter directory of a LoRA run's adapters (:func:`~.interop.peft.save_adapter`),
    for ``peft`` to load onto the Hugging Face checkpoint the run started from
    (``train.init_from``); other runs are refused."""
    task, model = load_run(run_dir, need_head=False)
    if not is_adapted(model):
        raise ValueError(f"{run_dir} is not a LoRA run (train.lora_rank is unset): no adapters")
    if task.recipe.train.init_from is None:
        raise ValueError(
            f"{run_dir} adapts no Hugging Face checkpoint (train.init_from is unset), so PEFT "
            "has no base to load its adapters onto: export-hf writes the merged model"
        )
    save_adapter(model, out_dir)


def export_gguf(run_dir: Path, out: Path, type: str = "f16") -> str:
    """A GGUF file of a decoder-only run's model and tokenizer, for llama.cpp
    (:func:`~.interop.gguf.save_gguf`), its weight matrices in ``type`` (``f32``, ``f16``
    or ``q8_0``); a LoRA run's with its adapters merged. Returns llama.cpp's architecture
    (``gpt2`` or ``llama``). What llama.cpp cannot run as ours (an encoder, a
    character-level tokenizer, ...) is a ``ValueError`` naming it, before anything is
    written."""
    require_extra("gguf", purpose="export-gguf")
    from .interop.gguf import save_gguf  # (gguf is an extra: imported when it is used)

    if out.is_dir():
        raise ValueError(f"--out {out} is a directory: name the .gguf file to write")
    if is_run(out.parent) and is_run_file(out.name):
        raise ValueError(f"--out {out} is a file of the run directory {out.parent}")
    refusal = "which GGUF's types do not hold as ours (--type q8_0 quantizes for llama.cpp)"
    task, model = full_weights(run_dir, refusal, False)
    try:
        tokenizer = task.tokenizers.get("tokenizer")
        return save_gguf(model, tokenizer, out, type, run_dir.name, task.chat_template)
    except ValueError as error:
        raise ValueError(f"{run_dir}: {error}") from None
