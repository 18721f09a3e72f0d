"""The pieces the workloads share: candidates, training steps and their figures, seeds."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from scratchformer import count_parameters
from scratchformer.config import TrainConfig
from scratchformer.training.trainer import build_optimizer
from timing import Step, Timing, interleaved, timed
from workloads.flops import per_second
from workloads.report import (
    BF16,
    COMPILED,
    GPT2,
    MARIAN,
    TRAINER_ADAMW,
    Figure,
    Settings,
    precision_of,
)

LR = 1e-4


def torch_adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=LR)


def trainer_adamw(model: nn.Module) -> torch.optim.Optimizer:
    return build_optimizer(model, TrainConfig(lr=LR))


@dataclass(frozen=True)
class Candidate:
    """A model, how to get its mean cross-entropy from the inputs and the targets of the
    case (``loss(*inputs, targets)``), and its optimiser."""

    name: str
    model: nn.Module
    loss: Callable[..., Tensor]
    optimizer: Callable[[nn.Module], torch.optim.Optimizer] = torch_adamw


def cross_entropy_of(logits: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """The loss of a model that gives logits: their cross-entropy against the targets."""

    def loss(*inputs_and_targets: Tensor) -> Tensor:
        *inputs, targets = inputs_and_targets
        out = logits(*inputs)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1))

    return loss


def our_candidate(
    name: str, model: nn.Module, loss_of: Callable[[nn.Module], Callable[..., Tensor]]
) -> Candidate:
    """Our ``model`` as candidate ``name``: eager, compiled (``COMPILED``), stepped by the
    trainer's optimizer (``TRAINER_ADAMW``), or that in bfloat16 autocast (``BF16``, as
    ``train.precision = "bf16"`` runs); ``loss_of(run)`` gets the loss from inputs and
    targets, as training does: the targets are the model's ``labels``."""
    run = torch.compile(model) if name == COMPILED else model
    optimizer = trainer_adamw if name in (TRAINER_ADAMW, BF16) else torch_adamw
    loss = loss_of(run)
    if name == BF16:
        return Candidate(name, model, in_bf16(loss), optimizer)
    return Candidate(name, model, loss, optimizer)


def in_bf16(loss: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``loss`` computed under bfloat16 autocast on the CPU."""

    def bf16_loss(*inputs_and_targets: Tensor) -> Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return loss(*inputs_and_targets)

    return bf16_loss


def training_step(candidate: Candidate, inputs: tuple[Tensor, ...], targets: Tensor) -> Step:
    """One step: clear gradients, the loss against ``targets``, backward, AdamW. The step
    returns the loss."""
    optimizer = candidate.optimizer(candidate.model)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = candidate.loss(*inputs, targets)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def checked_loss(candidate: Candidate, timing: Timing) -> float:
    """The loss of the last timed step; raise unless it is finite."""
    if not math.isfinite(timing.last):
        raise RuntimeError(f"{candidate.name}: loss {timing.last} is not finite")
    return timing.last


def parameters(model: nn.Module) -> str:
    return f"{count_parameters(model, trainable_only=True) / 1e6:.2f}M parameters"


def training_figures(
    candidates: list[Candidate],
    batch: tuple[tuple[Tensor, ...], Tensor],
    flops: float,
    settings: Settings,
) -> list[Figure]:
    """Time the training steps of ``candidates`` on the same ``batch`` (inputs, targets),
    each step counting ``flops``; tokens/s counts the targets."""
    inputs, labels = batch
    steps = [training_step(c, inputs, labels) for c in candidates]
    first = [timed(step)[0] for step in steps]  # compiling, for the compiled candidate
    timings = interleaved(steps, settings.repeats_or(10, quick=2), settings.warmup)
    tokens = labels.numel()
    return [
        Figure(
            c.name,
            tokens / t.median_s,
            "tokens/s",
            t,
            per_second(flops, t),
            note=f"loss {checked_loss(c, t):.3f}, {parameters(c.model)}, first step {s:.1f} s",
            precision=precision_of(c.name, native_bf16=False),
        )
        for c, t, s in zip(candidates, timings, first, strict=True)
    ]


def our_variants(settings: Settings) -> tuple[str, ...]:
    """The other ways of running ours that the training workloads time: bfloat16 only on
    a CPU that computes it natively (elsewhere autocast emulates it, many times slower)."""
    compiled = (COMPILED,) if settings.compile else ()
    bf16 = (BF16,) if settings.machine is not None and settings.machine.bf16_peak_gflops else ()
    return (TRAINER_ADAMW, *compiled, *bf16)


def hf_attention(candidates: list[Candidate]) -> str:
    """The attention implementation of the Hugging Face candidate (eager, sdpa...)."""
    return next(c.model for c in candidates if c.name in (GPT2, MARIAN)).config._attn_implementation


def seeded() -> torch.Generator:
    """The same random inputs for every workload and every run of this script."""
    return torch.Generator().manual_seed(0)
