"""Training: learning-rate schedules, moving averages of the weights and run-directory
checkpoints."""

from .averaging import exponential_average
from .checkpoint import (
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    capture_rng,
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    restore_rng,
    save_checkpoint,
    save_weights,
)
from .schedule import SCHEDULES, build_schedule

__all__ = [
    "SCHEDULES",
    "atomic_write",
    "atomic_write_json",
    "atomic_write_text",
    "build_schedule",
    "capture_rng",
    "exponential_average",
    "latest_checkpoint",
    "load_checkpoint",
    "load_weights",
    "restore_rng",
    "save_checkpoint",
    "save_weights",
]
