"""The training loop: AdamW, a learning-rate schedule, gradient accumulation and clipping,
bf16 autocast, a moving average of the weights, periodic evaluation with the task's metric,
the best weights kept, early stopping, checkpoints for exact resume, a clean stop on SIGTERM
or SIGINT, and a progress bar."""

from __future__ import annotations

import contextlib
import math
import re
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from tqdm import tqdm

from ..device import bf16_autocast, uses_bf16
from ..errors import Interrupted, TrainingError
from .averaging import exponential_average
from .checkpoint import load_checkpoint, save_checkpoint
from .distributed import Distributed
from .interrupt import StopSignals
from .rundir import TENSORBOARD_DIR, append_metrics, trim_metrics, write_model
from .schedule import build_schedule

if TYPE_CHECKING:
    from ..tasks.base import Task

FUSED_ADAMW_DEVICES = ("cpu", "cuda")
"""Where torch has a fused AdamW kernel that the trainer uses."""


EMBEDDING = re.compile(r"(?:^|\.)(?:src_|tgt_)?embedding\.")
STACK_LAYER = re.compile(r"(?:^|\.)(encoder|decoder)\.layers\.(\d+)\.")


def layer_depths(names: list[str]) -> dict[str, int | None]:
    """How far from the input each parameter of a model sits, by its name: 0 for the
    embeddings (``embedding``, ``src_embedding``, ``tgt_embedding``), ``i + 1`` for layer
    ``i`` of the encoder, the decoder's layers stacked above the encoder's (or above the
    embeddings in a decoder-only model), None for what comes after the layers (heads,
    final norms). ``names`` are all the model's parameter names."""
    layers = {name: STACK_LAYER.search(name) for name in names}
    encoder_layers = len({m.group(2) for m in layers.values() if m and m.group(1) == "encoder"})
    depths: dict[str, int | None] = {}
    for name, layer in layers.items():
        if EMBEDDING.search(name):
            depths[name] = 0
        elif layer is None:
            depths[name] = None
        else:
            below = encoder_layers if layer.group(1) == "decoder" else 0
            depths[name] = below + int(layer.group(2)) + 1
    return depths


def build_optimizer(model: nn.Module, config: Any) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (weights, embeddings) but not on biases and
    norm gains, as is usual for Transformers. On CPU and CUDA it is torch's fused kernel:
    the same update as the loop over parameters, without its per-tensor overhead.

    With ``config.layer_lr_decay`` below 1, the heads keep ``config.lr`` and each layer
    below gets that factor of the lr of the one above, down to the embeddings: fine-tuning
    then moves the pretrained lower layers least (a tied output layer is the embedding
    and has its lr). The top group comes first, so the lr
    reported for group 0 is ``config.lr``'s schedule."""
    decay = config.layer_lr_decay
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    depths = layer_depths([n for n, _ in model.named_parameters()])
    if decay == 1.0:  # every parameter at depth 0: two groups, matrices and the rest
        depths = dict.fromkeys(depths, 0)
    top = max((d for d in depths.values() if d is not None), default=0) + 1
    groups: dict[tuple[int, bool], list[nn.Parameter]] = {}
    for name, parameter in named:
        depth = top if depths[name] is None else depths[name]
        groups.setdefault((depth, parameter.dim() >= 2), []).append(parameter)
    return torch.optim.AdamW(
        [
            {
                "params": groups[depth, matrix],
                "lr": config.lr * decay ** (top - depth),
                "weight_decay": config.weight_decay if matrix else 0.0,
            }
            for depth, matrix in sorted(groups, key=lambda key: (-key[0], not key[1]))
        ],
        lr=config.lr,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
        fused=all(p.device.type in FUSED_ADAMW_DEVICES for _, p in named),
    )


class Trainer:
    """Trains ``model`` on ``task`` and writes the run directory (rank 0 only).

    ``run_dir`` receives ``model.safetensors`` (the best weights by the task's metric),
    ``metrics.jsonl``, ``trainer_state.json`` and ``checkpoints/`` (the last
    ``train.keep_checkpoints`` full states). With ``train.ema_decay``, what is evaluated
    and kept is the moving average of the weights, updated after every step. Given
    ``stop`` (entered), a SIGTERM or SIGINT during the loop ends it after the step in
    progress, with a checkpoint of that step, by raising :class:`Interrupted`.
    """

    def __init__(
        self,
        task: Task,
        model: nn.Module,
        run_dir: Path,
        dist: Distributed | None = None,
        quiet: bool = False,
        stop: StopSignals | None = None,
    ) -> None:
        self.task = task
        self.stop = stop
        self.config = task.train_config
        self.dist = dist or Distributed()
        self.model = model.to(self.dist.device)
        task.prepare_model(self.model)
        self.run_dir = Path(run_dir)
        self.quiet = quiet or not self.dist.is_main
        self.optimizer = build_optimizer(self.model, self.config)
        self.scheduler = build_schedule(
            self.config.schedule,
            self.optimizer,
            warmup_steps=min(self.config.warmup_steps, self.config.max_steps),  # smoke runs
            max_steps=self.config.max_steps,
            min_lr_ratio=self.config.min_lr_ratio,
        )
        self.average = (
            None
            if self.config.ema_decay is None
            else exponential_average(self.model, self.config.ema_decay)
        )
        self.state: dict[str, Any] = {"step": 0, "best": None, "best_step": None, "bad_evals": 0}
        # when training began, less the seconds a resumed run's checkpoint had trained:
        # what max_minutes counts from, so that a resumed run is given only what is left
        self.started = time.perf_counter()
        self.bf16 = uses_bf16(self.config.precision, self.dist.device, warn=self.dist.is_main)

    @property
    def evaluated_model(self) -> nn.Module:
        """The model that is evaluated and kept: the moving average, if there is one."""
        return self.model if self.average is None else self.average.module

    # -- the loop ----------------------------------------------------------------------

    def fit(self, resume: bool = False) -> dict[str, Any]:
        """Train to ``max_steps`` (or an early stop); returns the last evaluation."""
        config = self.config
        if self.dist.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            self.state = load_checkpoint(
                self.run_dir,
                model=self.model,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                average=self.average,
                check_state=check_state,
            )
            if self.dist.is_main:
                trim_metrics(self.run_dir, self.state["step"])
        else:
            torch.manual_seed(config.seed + self.dist.rank)
        network = self.dist.wrap(self.model)
        if config.compile:
            network = torch.compile(network)  # weights shared: checkpoints see self.model
        bar = tqdm(
            total=config.max_steps,
            initial=self.state["step"],
            disable=self.quiet or not sys.stdout.isatty(),
            dynamic_ncols=True,
            unit="step",
        )
        writer = self._tensorboard()
        deferring = contextlib.nullcontext() if self.stop is None else self.stop.deferring()
        try:
            with deferring:
                last_eval, busy, seen = self._loop(network, bar, writer)
        finally:
            bar.close()
            if writer is not None:
                writer.close()
        return {
            **last_eval,
            "train_seconds": busy,
            "tokens_per_s": seen / max(busy, 1e-9),
            "precision": "bf16" if self.bf16 else "fp32",
            "best_step": self.state["best_step"],
            f"best_{self.task.metric}": self.state["best"],
        }

    def _loop(
        self, network: nn.Module, bar: tqdm, writer: Any
    ) -> tuple[dict[str, Any], float, int]:
        """Steps to ``max_steps``, an early stop, the time budget or a stop signal; returns
        the last evaluation, the seconds spent in steps and the tokens seen."""
        config = self.config
        last_eval: dict[str, Any] = {}
        clock, tokens = time.perf_counter(), 0
        self.started = clock - self.state.get("seconds", 0.0)
        deadline = None if config.max_minutes is None else self.started + 60 * config.max_minutes
        busy, seen = 0.0, 0  # seconds in training steps, tokens through them
        while self.state["step"] < config.max_steps:
            started = time.perf_counter()
            loss, extra, step_tokens = self._train_step(network)
            busy += time.perf_counter() - started
            seen += step_tokens * self.dist.world_size
            tokens += step_tokens * self.dist.world_size
            step = self.state["step"]
            lr = self.scheduler.get_last_lr()[0]
            if step % config.log_every == 0 or step == config.max_steps:
                elapsed = time.perf_counter() - clock
                record = {
                    "step": step,
                    "split": "train",
                    "loss": loss,
                    **extra,
                    "lr": lr,
                    "tokens_per_s": tokens / max(elapsed, 1e-9),
                }
                self._log(record, writer)
                bar.set_postfix(
                    loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{record['tokens_per_s']:.0f}"
                )
                clock, tokens = time.perf_counter(), 0
            bar.update(1)
            out_of_time = deadline is not None and self.dist.any(time.perf_counter() > deadline)
            if step % config.eval_every == 0 or step == config.max_steps or out_of_time:
                last_eval = self._evaluate_and_checkpoint(writer, bar)
                clock, tokens = time.perf_counter(), 0
                if self._should_stop():
                    self._say(
                        f"early stop at step {step}: no better {self.task.metric} in "
                        f"{config.early_stop_patience} evaluations",
                        bar,
                    )
                    break
            if out_of_time:
                self._say(
                    f"stopped at step {step}: train.max_minutes={config.max_minutes} reached", bar
                )
                break
            self._stop_if_signalled()
        return last_eval, busy, seen

    def _stop_if_signalled(self) -> None:
        """On a stop signal (on any rank), checkpoint the step just taken, if it is not yet,
        and raise :class:`Interrupted`. Not evaluating keeps the run as it would have been."""
        if self.stop is None or not self.dist.any(self.stop.received is not None):
            return
        if self.state.get("checkpoint_step") != self.state["step"]:
            self._checkpoint()
        raise Interrupted(self.stop.received or signal.SIGTERM)

    def _train_step(self, network: nn.Module) -> tuple[float, dict[str, float], int]:
        """One optimiser step; the mean loss, the mean of the task's other metrics
        (:meth:`~scratchformer.tasks.base.Task.train_metrics`) and the tokens seen by this
        rank.

        The step's batch is cut into ``world_size * grad_accum`` slices: this rank's
        ``grad_accum`` micro-batches. So any split of the same batch over processes and
        accumulation computes the same update (exactly, when slices hold equal tokens)."""
        config, dist = self.config, self.dist
        autocast = bf16_autocast(dist.device, self.bf16)
        parts = dist.world_size * config.grad_accum
        step_batch = self.task.global_batch(self.state["step"], parts)
        total, tokens, extra = 0.0, 0, dict[str, float]()
        for micro in range(config.grad_accum):
            batch = step_batch.slice(dist.rank * config.grad_accum + micro, parts).to(dist.device)
            last = micro == config.grad_accum - 1
            sync = contextlib.nullcontext() if last or not dist.enabled else network.no_sync()
            with sync:
                with autocast:
                    loss = self.task.loss(network, batch)
                (loss / config.grad_accum).backward()
            total += loss.item() / config.grad_accum
            for name, value in self.task.train_metrics().items():
                extra[name] = extra.get(name, 0.0) + value / config.grad_accum
            tokens += batch.tokens
        if dist.any(not math.isfinite(total)):
            last_good = self.state.get("checkpoint_step")
            kept = (
                f"the last good checkpoint (step {last_good}) is kept"
                if last_good
                else ("no checkpoint had been written yet")
            )
            raise TrainingError(
                f"the loss became {total} at step {self.state['step'] + 1}; training stopped "
                f"and {kept} in {self.run_dir}. Try a lower train.lr or train.grad_clip."
            )
        if config.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.average is not None:
            self.average.update_parameters(self.model)
        self.state["step"] += 1
        return total, extra, tokens

    # -- evaluation, checkpoints, stopping --------------------------------------------

    def _evaluate_and_checkpoint(self, writer: Any, bar: tqdm) -> dict[str, Any]:
        step = self.state["step"]
        metrics = self.task.evaluate(
            self.evaluated_model,
            "val",
            max_batches=self.config.eval_batches,
            device=self.dist.device,
        )
        value = metrics[self.task.metric]
        best = self.state["best"]
        improved = best is None or (value > best if self.task.higher_is_better else value < best)
        if improved:
            self.state.update(best=value, best_step=step, bad_evals=0)
        else:
            self.state["bad_evals"] += 1
        self._log({"step": step, "split": "val", **metrics}, writer)
        self._say(
            f"step {step}: "
            + ", ".join(f"val {k} {v:.4g}" for k, v in metrics.items())
            + (" (best)" if improved else ""),
            bar,
        )
        if improved and self.dist.is_main:
            write_model(self.run_dir, self.evaluated_model)
        self._checkpoint()
        return {"step": step, **metrics}

    def _checkpoint(self) -> None:
        """Save the full state of this step (rank 0), keeping the last few checkpoints."""
        self.state["checkpoint_step"] = self.state["step"]
        self.state["seconds"] = time.perf_counter() - self.started
        if self.dist.is_main:
            save_checkpoint(
                self.run_dir,
                step=self.state["step"],
                model=self.model,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                state=self.state,
                average=self.average,
                keep=self.config.keep_checkpoints,
            )
        self.dist.barrier()

    def _should_stop(self) -> bool:
        patience = self.config.early_stop_patience
        return patience is not None and self.state["bad_evals"] >= patience

    # -- output ------------------------------------------------------------------------

    def _log(self, record: dict[str, Any], writer: Any) -> None:
        """Append to ``metrics.jsonl`` (and TensorBoard), on rank 0."""
        if not self.dist.is_main:
            return
        append_metrics(self.run_dir, record)
        if writer is not None:
            for key, value in record.items():
                if key not in ("step", "split"):
                    writer.add_scalar(f"{record['split']}/{key}", value, record["step"])

    def _say(self, message: str, bar: tqdm) -> None:
        if not self.quiet:
            bar.write(message, file=sys.stderr)

    def _tensorboard(self) -> Any:
        if not (self.config.tensorboard and self.dist.is_main):
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            warnings.warn(
                "train.tensorboard needs the tensorboard package; logging to metrics.jsonl only",
                stacklevel=2,
            )
            return None
        return SummaryWriter(str(self.run_dir / TENSORBOARD_DIR))


def check_state(state: dict[str, Any]) -> None:
    """Refuse a saved trainer state whose values are not the trainer's: counts (``step``,
    ``bad_evals``, ``checkpoint_step``, ``best_step``: whole numbers from 0), the best
    metric (a finite number), either of the last two possibly unset (None), but there, and
    the seconds trained (a checkpoint of an earlier version may have none)."""

    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    for key in ("best", "best_step"):
        if key not in state:
            raise ValueError(f"no {key!r}")
    for key in ("step", "bad_evals"):
        if not count(state.get(key)):
            raise ValueError(f"{key!r} is {state.get(key)!r}, not a count")
    for key in ("checkpoint_step", "best_step"):
        if state.get(key) is not None and not count(state[key]):
            raise ValueError(f"{key!r} is {state[key]!r}, not a count")
    seconds = state.get("seconds", 0.0)
    number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    if not (number and math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"'seconds' is {seconds!r}, not a number of seconds")
    best = state.get("best")
    finite = isinstance(best, (int, float)) and not isinstance(best, bool) and math.isfinite(best)
    if best is not None and not finite:
        raise ValueError(f"'best' is {best!r}, not a finite number")
