"""One module per task: data, model configuration, loss and metrics. Each module registers
its task class in :data:`TASKS` where it defines it; importing every module of the package
here fills it, so that a new task is its module (and its name in ``registry.py``). The
classes imported by name are the package's public API."""

from __future__ import annotations

import importlib
import pkgutil

from ..config import Recipe
from .base import TASKS, Batch, ExampleTask, Task
from .classification import ClassificationTask, RegressionTask
from .contrastive import ContrastiveTask
from .denoising import DenoisingTask
from .lm import LanguageModelTask
from .mlm import MaskedLMTask
from .qa import QuestionAnsweringTask
from .rtd import ReplacedTokenTask
from .sft import ChatTuningTask
from .similarity import SimilarityTask
from .span_corruption import SpanCorruptionTask
from .synthetic import SyntheticTask
from .tagging import TaggingTask
from .translation import TranslationTask

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f".{_module.name}", __name__)


def build_task(recipe: Recipe) -> Task:
    """The task that ``recipe.task`` names."""
    return TASKS[recipe.task](recipe)


__all__ = [
    "TASKS",
    "Batch",
    "ChatTuningTask",
    "ClassificationTask",
    "ContrastiveTask",
    "DenoisingTask",
    "ExampleTask",
    "LanguageModelTask",
    "MaskedLMTask",
    "QuestionAnsweringTask",
    "RegressionTask",
    "ReplacedTokenTask",
    "SimilarityTask",
    "SpanCorruptionTask",
    "SyntheticTask",
    "TaggingTask",
    "Task",
    "TranslationTask",
    "build_task",
]
