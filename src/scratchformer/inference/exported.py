"""A language model's decoding step compiled ahead of time: no Python between its kernels.

A :class:`~.compiled.CompiledModel` step still passes through Dynamo (its guards, its
wrappers) and the Python that calls each generated kernel, a large share of a small
model's int8 step (docs/lab-notes.md, "Against the targets and llama.cpp").
:class:`ExportedLM` exports the one-token step with
``torch.export`` (the cache's buffers, the mask and the positions as inputs; the number
of positions already cached dynamic) and compiles it with AOTInductor, whose C++ calls the
kernels one after another; the buffers are updated in place, as the eager step updates
them. The weights are frozen in and the GEMMs autotuned, as ``CompiledModel``'s.

Compiling takes tens of seconds, so the compiled package is kept on disk, beside
Inductor's code (:func:`~scratchformer.caches.compiled_code_dir`, one directory per
processor), under a hash of what it was compiled from: the exported graph, its weights, the
settings and torch's version. The next process that exports the same step (a few seconds)
loads it instead of compiling; a package that cannot be loaded is compiled again.

Its cache has a fixed capacity (``context`` positions a row), a constant of the step:
the decoding engine (:class:`~.engine.Engine`) makes its cache that size
(:attr:`ExportedLM.cache_capacity`) and calls the step directly (:meth:`ExportedLM.run_step`).
The number of rows is fixed too, or dynamic between ``fewest_rows`` and ``rows`` (a
server's decoding engine, whose live rows come and go). Every other call, the prompt
among them, runs the model eagerly.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch._inductor import config as inductor_config
from torch.export import Dim, ExportedProgram, export

from ..caches import compiled_code_dir
from ..device import bf16_autocast, decoding_device
from ..io import atomic_write_bytes
from ..models.base import ModelOutput
from ..nn.quantized import product_dtype
from .cache import SPARE, DecoderCache
from .compile_choice import Compilation
from .compiled import QUIET_FROZEN, Compiled
from .dynamic_rows import LEAST_ROWS
from .kernels import FEW_QUERIES, attention_kernels, installed

AUTOTUNED = {**QUIET_FROZEN, "max_autotune": True}
"""Inductor's settings for the step: weights frozen in, GEMMs chosen by timing among
Inductor's backends (``$TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS``; on the CPU, its C++
templates and ATen's)."""
LEAST_CACHED = 2
"""The step is exported for at least this many cached positions (Dynamo treats sizes 0 and
1 as special cases); a step after fewer runs eagerly."""
PACKAGES = "exported"
"""The directory of the kept packages, inside the compiled code's."""


class CachedStep(nn.Module):
    """One decoding step over a cache whose buffers and length are inputs: the model's
    logits and last hidden states, and each row's greedy next token (``(rows, 1)``, the
    argmax of its last logits, the first of equal ones, as :class:`~.sampling.Sampling`
    takes it). A greedy request reads its token there: the argmax runs inside the step,
    and the tokens are ready to be fed to the next one."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        positions: Tensor,
        cached: Tensor,
        keys: list[Tensor],
        values: list[Tensor],
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``cached``: any tensor of as many elements as positions already cached (a shape
        is what ``torch.export`` can keep dynamic; an int would be a constant)."""
        cache = DecoderCache.of(keys, values, cached.shape[0])
        output = self.model(input_ids, attention_mask, cache=cache, positions=positions)
        greedy = output.logits[:, -1].argmax(dim=-1, keepdim=True)
        return output.logits, output.last_hidden_state, greedy


class ExportedLM(Compiled):
    """``model`` (a decoder-only LM in eval mode) with its decoding step of ``rows`` rows
    (or of any number from ``fewest_rows``, at least 2, to ``rows``) compiled ahead of
    time, for caches of ``context`` positions a row; under bfloat16 autocast if ``bf16``.
    Pass it to :func:`~.generate.generate` or :func:`~.generate.stream` in place of the
    model, with as many prompts as ``rows``: the same tokens as the model's (fp32), faster
    steps. The model is read once, here."""

    def __init__(
        self,
        model: nn.Module,
        rows: int,
        context: int,
        bf16: bool = False,
        fewest_rows: int | None = None,
    ) -> None:
        super().__init__()
        if getattr(model, "decoder", None) is None or hasattr(model, "encoder"):
            raise ValueError("ExportedLM takes a decoder-only language model")
        if not LEAST_CACHED + 1 + SPARE <= context <= model.config.max_len + SPARE:
            raise ValueError(
                f"context={context} must be in {LEAST_CACHED + 1 + SPARE}.."
                f"{model.config.max_len + SPARE} (the model's max_len, and a spare position)"
            )
        device = decoding_device(model)  # (which refuses a model in training mode)
        self.model = model
        if fewest_rows is not None and not LEAST_ROWS <= fewest_rows <= rows:
            raise ValueError(f"fewest_rows={fewest_rows} must be in {LEAST_ROWS}..{rows}")
        self.rows, self.cache_capacity, self.bf16 = rows, context, bf16
        self.fewest_rows = rows if fewest_rows is None else fewest_rows
        self.kernels = attention_kernels(model.decoder, FEW_QUERIES)
        with bf16_autocast(device, bf16):  # (the dtype of a cache made in this setting)
            self.cache_dtype = product_dtype(next(model.decoder.parameters()))
        self.compilation: Compilation | None = None
        """What exporting and compiling (or loading) the step took; None if it was not."""
        self.step = None if torch._dynamo.config.disable else self.compiled_step(device)
        """(None: every call eager, as ``torch.compile`` is when ``TORCH_COMPILE_DISABLE``
        is set.)"""
        self.train(False)

    def compiled_step(self, device: torch.device) -> Callable[[list[Tensor]], list[Tensor]]:
        """The step on ``device``, exported, then loaded from its kept package or compiled
        (and kept): the package's runner, which takes :class:`CachedStep`'s inputs flattened
        (the keys and values listed after the rest) and gives its logits, hidden states and
        greedy tokens.
        (The package's own call flattens them with pytree and parses its call spec on every
        call, a share of a small model's step.) What it took is :attr:`compilation`."""
        start = time.perf_counter()
        program = self.exported(device)
        path = packages_dir() / f"{package_key(program, self.settings)}.pt2"
        step = kept_package(path)
        kept = step is not None
        if not kept:
            package = io.BytesIO()
            with inductor_config.patch(AUTOTUNED):
                torch._inductor.aoti_compile_and_package(program, package_path=package)
            step = keep_package(path, package.getvalue())
        self.compilation = Compilation(time.perf_counter() - start, graphs=1, cached=int(kept))
        return step.loader.run

    @property
    def settings(self) -> dict[str, Any]:
        """What shaped the step's example inputs, besides the model."""
        return {
            "rows": self.rows,
            "fewest_rows": self.fewest_rows,
            "context": self.cache_capacity,
            "bf16": self.bf16,
        }

    def exported(self, device: torch.device) -> ExportedProgram:
        """The step on ``device``, exported for this model's rows and cache capacity."""
        rows = self.rows
        cached = Dim("cached", min=LEAST_CACHED, max=self.cache_capacity - 1 - SPARE)
        fixed = self.fewest_rows == rows
        batch = Dim.STATIC if fixed else Dim("rows", min=self.fewest_rows, max=rows)
        with torch.no_grad(), bf16_autocast(device, self.bf16), installed(self.kernels):
            cache = DecoderCache(self.decoder, rows, self.cache_capacity)
            keys = [layer.keys for layer in cache.self_attn]
            values = [layer.values for layer in cache.self_attn]
            example = (
                torch.zeros(rows, 1, dtype=torch.long, device=device),
                torch.ones(rows, LEAST_CACHED + 1, dtype=torch.bool, device=device),
                torch.full((rows, 1), LEAST_CACHED, device=device),
                torch.empty(LEAST_CACHED, device=device),
                keys,
                values,
            )
            layers = [{0: batch}] * len(keys)
            shapes = (
                {0: batch},
                {0: batch, 1: cached + 1},
                {0: batch},
                {0: cached},
                layers,
                layers,
            )
            return export(CachedStep(self.model), example, dynamic_shapes=shapes, strict=False)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
        positions: Tensor | None = None,
        **options: Any,
    ) -> ModelOutput:
        """The model's forward: through the compiled step for one new token of each row on
        a cache of this model's shape, else eagerly."""
        if self.model.training:
            raise RuntimeError("the model was put in training mode after compiling")
        if cache is not None:
            self.check_cache(cache.self_attn[0].keys.dtype)
        stepping = (
            cache is not None
            and not options
            and attention_mask is not None
            and positions is not None
            and input_ids.shape[1] == 1
            and cache.self_attn[0].keys.shape[2] == self.cache_capacity
            and self.takes(input_ids.shape[0], cache.length)
        )
        if not stepping:
            with bf16_autocast(input_ids.device, self.bf16):
                return self.model(
                    input_ids, attention_mask, cache=cache, positions=positions, **options
                )
        keys = [layer.keys for layer in cache.self_attn]
        values = [layer.values for layer in cache.self_attn]
        logits, hidden, _ = self.run_step(
            input_ids, attention_mask, positions, cache.length, [*keys, *values]
        )
        for layer in cache.self_attn:  # (the step wrote the new position's keys and values)
            layer.length += 1
        return ModelOutput(logits=logits, last_hidden_state=hidden)

    def check_cache(self, dtype: torch.dtype) -> None:
        """ValueError unless a cache of ``dtype`` is what the compiled step reads (a cache
        made under the autocast setting it was compiled for)."""
        if self.step is not None and dtype != self.cache_dtype:
            raise ValueError(
                f"the cache holds {dtype}, the step was compiled for {self.cache_dtype}: "
                "decode under bfloat16 autocast exactly when bf16=True"
            )

    def takes(self, rows: int, length: int) -> bool:
        """Whether the compiled step runs a step of ``rows`` rows on caches of ``length``
        positions filled (of this step's capacity); other steps run the model eagerly."""
        return (
            self.step is not None
            and self.fewest_rows <= rows <= self.rows
            and (length >= LEAST_CACHED)
        )

    def run_step(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        positions: Tensor,
        length: int,
        buffers: list[Tensor],
    ) -> list[Tensor]:
        """The logits, last hidden states and greedy tokens (:class:`CachedStep`) of a step
        that :meth:`takes`, through the compiled step alone: ``buffers`` are every layer's
        keys, then every layer's values (of ``length`` positions filled), into which it
        writes the new position's. This is what the decoding engine calls for every token:
        no Dynamo, no Python of the model."""
        cached = torch.empty(length, device=input_ids.device)
        return self.step([input_ids, attention_mask, positions, cached, *buffers])


def packages_dir() -> Path:
    """Where compiled steps are kept: beside Inductor's code, one directory per processor."""
    return compiled_code_dir() / PACKAGES


def package_key(program: ExportedProgram, settings: dict[str, Any]) -> str:
    """A hash of what a compiled step is made of: the exported graph and its signature and
    dynamic ranges, its weights and constants, ``settings`` (what else shaped the example
    inputs), Inductor's settings and torch's version."""
    digest = hashlib.sha256()
    described = {
        "graph": program.graph_module.code,
        "signature": str(program.graph_signature),
        "ranges": str(program.range_constraints),
        "settings": settings,
        "inductor": {**AUTOTUNED, "backends": inductor_config.max_autotune_gemm_backends},
        "torch": torch.__version__,
    }
    digest.update(json.dumps(described, sort_keys=True, default=str).encode())
    tensors = {**program.state_dict, **program.constants}
    for name, tensor in sorted(tensors.items()):
        if isinstance(tensor, Tensor):
            digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
            flat = tensor.detach().cpu().contiguous().reshape(-1)
            digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


def kept_package(path: Path) -> Any:
    """The compiled step kept at ``path``; None if there is none or it cannot be loaded (it
    is then compiled again)."""
    if not path.is_file():
        return None
    try:
        return torch._inductor.aoti_load_package(str(path))
    except (RuntimeError, OSError):
        return None


def keep_package(path: Path, package: bytes) -> Any:
    """The compiled step in ``package``, kept at ``path`` for the next process (unless the
    directory cannot be written: it is then loaded from memory)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, package)
    except OSError:
        return torch._inductor.aoti_load_package(io.BytesIO(package))
    return torch._inductor.aoti_load_package(str(path))
