"""The process group of ``torchrun``: DistributedDataParallel over gloo on CPUs, NCCL on
GPUs, each process on its device (:mod:`scratchformer.device`).

Without torchrun's environment (``WORLD_SIZE`` unset or 1) the process group is a no-op and
the run is an ordinary single process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..device import CPU, default_device


@dataclass(frozen=True)
class Distributed:
    """Where this process stands: its rank among ``world_size`` and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = CPU

    @property
    def is_main(self) -> bool:
        """Rank 0 logs and writes the run directory."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model as DDP sees it (gradients averaged over ranks), or itself."""
        if not self.enabled:
            return model
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is set on any rank (so that all ranks stop together)."""
        if not self.enabled:
            return flag
        value = torch.tensor([float(flag)], device=self.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def close(self) -> None:
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()


def setup(device: str = "auto") -> Distributed:
    """Join the process group that torchrun describes in the environment, if any, on the
    ``device`` kind (see :func:`default_device`): one GPU per process, or CPU processes."""
    kind = default_device(device)
    world_size = _environment_number("WORLD_SIZE", "1")
    if world_size <= 1:
        return Distributed(device=kind)
    rank = _environment_number("RANK", None)
    local_rank = _environment_number("LOCAL_RANK", "0")
    if not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} must be in 0 .. WORLD_SIZE-1 = {world_size - 1}")
    if kind.type == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return Distributed(rank, world_size, local_rank, device)


def _environment_number(name: str, default: str | None) -> int:
    """An integer that torchrun sets in the environment; missing (with no ``default``) or
    malformed, a clear error rather than a traceback."""
    value = os.environ.get(name, default)
    if value is None:
        raise ValueError(
            f"WORLD_SIZE is set but {name} is not: start several processes with torchrun "
            "(which sets both), or unset WORLD_SIZE for one process"
        )
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"the environment's {name}={value!r} is not an integer") from None
