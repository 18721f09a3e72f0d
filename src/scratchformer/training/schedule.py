"""Learning-rate schedules: multipliers of the optimizer's base lr, run by ``LambdaLR``.

``LambdaLR`` keeps only counters in its ``state_dict`` (the multiplier is rebuilt from the
config), so a saved scheduler restores exactly. Every multiplier here is a function of
``step``, the number of the optimizer update the lr is used for, counted from 1: the
scheduler has been stepped ``step - 1`` times when that update happens. Every schedule
peaks at the base lr (``train.lr``), where warm-up ends: at ``step == warmup_steps``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Protocol

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from ..registry import Registry

Multiplier = Callable[[int], float]
"""The multiplier of the base lr for the update of a step (counted from 1)."""


class Schedule(Protocol):
    """A registered schedule: its multiplier for the training settings, or a ``ValueError``
    naming a setting it cannot work with."""

    def __call__(self, *, warmup_steps: int, max_steps: int, min_lr_ratio: float) -> Multiplier:
        """``warmup_steps >= 0`` and ``max_steps >= 1`` are checked before the call."""
        ...


SCHEDULES: Registry[Schedule] = Registry("schedule")


def noam(step: int, *, warmup_steps: int) -> float:
    """The schedule of "Attention Is All You Need" (sec. 5.3), normalised to peak at 1:
    linear warm-up from 0 to 1 over ``warmup_steps``, then ``sqrt(warmup_steps / step)``.

    The paper's ``lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`` is this
    times its peak, ``(d_model * warmup_steps)^-0.5``: a base lr of that value (6.99e-4 for
    d_model 512 and 4000 warm-up steps) gives the paper's curve, any other base lr the same
    shape peaking at that lr. fairseq calls the same schedule ``inverse_sqrt``.
    """
    return min(step / warmup_steps, math.sqrt(warmup_steps / step))


def cosine(step: int, *, warmup_steps: int, max_steps: int, min_lr_ratio: float) -> float:
    """Linear warm-up from 0 to 1 over ``warmup_steps``, then half a cosine down to
    ``min_lr_ratio`` at ``max_steps``, flat after."""
    if step < warmup_steps:
        return step / warmup_steps
    if step >= max_steps:
        return min_lr_ratio
    progress = (step - warmup_steps) / (max_steps - warmup_steps)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def constant(step: int, *, warmup_steps: int) -> float:
    """Linear warm-up from 0 to 1 over ``warmup_steps`` (none when 0), then 1."""
    return min(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0


def _noam_schedule(*, warmup_steps: int, max_steps: int, min_lr_ratio: float) -> Multiplier:
    """:func:`noam`, which divides by ``warmup_steps``."""
    _check_int("warmup_steps", warmup_steps, 1)
    return partial(noam, warmup_steps=warmup_steps)


def _cosine_schedule(*, warmup_steps: int, max_steps: int, min_lr_ratio: float) -> Multiplier:
    """:func:`cosine`, whose decay starts after warm-up and ends at ``max_steps``."""
    if max_steps < warmup_steps:
        raise ValueError(f"max_steps={max_steps} must be >= warmup_steps={warmup_steps}")
    return partial(
        cosine, warmup_steps=warmup_steps, max_steps=max_steps, min_lr_ratio=min_lr_ratio
    )


def _constant_schedule(*, warmup_steps: int, max_steps: int, min_lr_ratio: float) -> Multiplier:
    """:func:`constant`."""
    return partial(constant, warmup_steps=warmup_steps)


SCHEDULES.add("noam", _noam_schedule)
SCHEDULES.add("cosine", _cosine_schedule)
SCHEDULES.add("constant", _constant_schedule)
SCHEDULES.add("inverse_sqrt", _noam_schedule)  # fairseq's name of the same schedule


def _check_int(name: str, value: object, minimum: int) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        raise ValueError(f"{name}={value!r} must be >= {minimum}")


def build_schedule(
    name: str,
    optimizer: Optimizer,
    *,
    warmup_steps: int,
    max_steps: int,
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """The schedule ``name`` (one of ``SCHEDULES``) over ``optimizer``'s base lr, which
    every schedule reaches at ``warmup_steps``: the peak lr. ``noam`` and ``inverse_sqrt``
    name one schedule (:func:`noam`).

    ``max_steps`` and ``min_lr_ratio`` matter to ``cosine`` only; call ``scheduler.step()``
    after every ``optimizer.step()``.
    """
    schedule = SCHEDULES[name]
    _check_int("warmup_steps", warmup_steps, 0)
    _check_int("max_steps", max_steps, 1)
    try:
        multiplier = schedule(
            warmup_steps=warmup_steps, max_steps=max_steps, min_lr_ratio=min_lr_ratio
        )
    except ValueError as error:
        raise ValueError(f"{error} for schedule={name!r}") from None
    if not (isinstance(min_lr_ratio, (int, float)) and 0.0 <= min_lr_ratio <= 1.0):
        raise ValueError(f"min_lr_ratio={min_lr_ratio!r} must be in [0, 1]")
    # LambdaLR counts completed scheduler steps from 0; the update about to happen is one more.
    return LambdaLR(optimizer, lambda index: multiplier(index + 1))
