"""Opening a run directory: its task with its tokenizers (:func:`open_task`), its best
trained model (:func:`load_run`), the model a started run trains (:func:`run_model`), and
the pretrained model that ``train.init_from`` names (:func:`pretrained`: a run of ours or
a Hugging Face checkpoint).

This module stands above what opening a run needs (tasks, models, quantization, LoRA,
Hugging Face checkpoints); the files it reads are named by
:mod:`scratchformer.training.rundir`, which the training loop writes through without
importing any of that.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from .config import Recipe
from .data.tokenizer import Tokenizer
from .inference import quantize
from .interop.hf import chat_template, from_pretrained
from .io import load_model, load_weights
from .models import build_model
from .tasks import Task, build_task
from .training.initialisation import checkpoint_dir, copy_pretrained, new_model
from .training.lora import apply_lora, is_adapted, merge_lora
from .training.rundir import (
    CONFIG_FILE,
    MODEL_FILE,
    check_format,
    is_run,
    read_chat_template,
    read_tokenizers,
    saved_quantization,
    trained_model,
)

PADDED_ARCHS = ("encoder", "seq2seq")
"""The architectures whose tasks pad their batches with the tokenizer's pad token."""
LABELLED_HEADS = ("classification", "token_classification")
"""The heads whose outputs are the classes ``data.labels`` names."""


def open_task(run_dir: Path, overrides: list[str] | None = None) -> tuple[Task, Recipe]:
    """The task of a started run, with its tokenizers, and its recipe (plus overrides)."""
    check_format(run_dir)
    recipe = Recipe.load(run_dir / CONFIG_FILE, overrides or [])
    task = build_task(recipe)
    task.tokenizers = read_tokenizers(run_dir)
    task.chat_template = read_chat_template(run_dir)
    if recipe.model.arch in PADDED_ARCHS:
        for name, tokenizer in task.tokenizers.items():
            if tokenizer.pad_id is None:
                raise ValueError(
                    f"{run_dir / name}.json has no pad token among its special tokens, which "
                    f"a {recipe.model.arch} model's batches are padded with"
                )
    return task, recipe


def load_run(
    run_dir: Path, need_head: bool = True, quantization: str | None = None
) -> tuple[Task, nn.Module]:
    """The task and the best trained model (in eval mode) of a run directory: a LoRA run's
    base (``train.init_from``, or the initial weights of ``train.seed``) with its adapters;
    a quantized run's (:func:`~scratchformer.run.quantize_run`) quantized. ``quantization``
    (one of ``QUANTIZATIONS``) quantizes the model once loaded, a LoRA run's with its
    adapters merged first. With ``need_head``, a model without the task's head (an
    imported encoder) is an error."""
    trained_model(run_dir)
    task, recipe = open_task(run_dir)
    if need_head and recipe.model.head != task.head:
        raise ValueError(
            f"{run_dir} holds a model without the {task.head} head of a {task.name} run "
            "(an imported checkpoint?); fine-tune it first"
        )
    labelled = recipe.model.head in LABELLED_HEADS
    if labelled and len(recipe.data.labels or []) != recipe.model.num_labels:
        raise ValueError(
            f"{run_dir / CONFIG_FILE}: data.labels={recipe.data.labels!r} does not name the "
            f"model's {recipe.model.num_labels} classes (model.num_labels)"
        )
    saved = saved_quantization(run_dir)

    def build() -> nn.Module:
        model = build_model(recipe.model)
        return model if saved is None else quantize(model, saved)

    if recipe.train.lora_rank is None:
        model = load_model(build, run_dir / MODEL_FILE)
    else:
        model = run_model(recipe, pretrained_weights=True)
        load_weights(run_dir / MODEL_FILE, model)
    if quantization is not None:
        if is_adapted(model):
            merge_lora(model)  # the adapters' update is part of the weights to quantize
        quantize(model, quantization)
    return task, model.eval()


def pretrained(name: str) -> tuple[nn.Module, Tokenizer | None]:
    """The model and tokenizer that ``train.init_from = name`` starts from: the best model
    of a run directory of ours (a pretraining run, say; a LoRA run's with its adapters
    merged, so that a fine-tune of a fine-tune needs no ``merge`` between), or a Hugging
    Face checkpoint (a directory or an installed model package)."""
    path = checkpoint_dir(name)
    if is_run(path):
        task, model = load_run(path, need_head=False)
        return (merge_lora(model) if is_adapted(model) else model), task.tokenizer()
    return from_pretrained(path)


def pretrained_chat_template(name: str) -> str | None:
    """The chat template of what ``train.init_from = name`` starts from, if it has one: a
    run's of ours, or a Hugging Face checkpoint's."""
    path = checkpoint_dir(name)
    return read_chat_template(path) if is_run(path) else chat_template(path)


def run_model(recipe: Recipe, pretrained_weights: bool) -> nn.Module:
    """The model of a started run: initialised from ``train.seed``, with the weights of
    ``train.init_from`` when ``pretrained_weights`` -- or when LoRA adapts it, since its
    frozen base is in none of the run's files -- adapted as ``train.lora_*`` say."""
    model = new_model(recipe)
    init_from = recipe.train.init_from
    if init_from is not None and (pretrained_weights or recipe.train.lora_rank is not None):
        copy_pretrained(model, pretrained(init_from)[0], init_from, recipe.train.init_only)
    return apply_lora(model, recipe.train)
