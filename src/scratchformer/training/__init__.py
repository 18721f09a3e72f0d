"""Training: learning-rate schedules, moving averages of the weights and run-directory
checkpoints."""

from .averaging import exponential_average
from .checkpoint import (
    capture_rng,
    latest_checkpoint,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from .schedule import SCHEDULES, build_schedule

__all__ = [
    "SCHEDULES",
    "build_schedule",
    "capture_rng",
    "exponential_average",
    "latest_checkpoint",
    "load_checkpoint",
    "restore_rng",
    "save_checkpoint",
]
