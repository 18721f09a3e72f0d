"""A model compiled for decoding: ``torch.compile`` with frozen, autotuned weights.

Decoding a few sequences multiplies every weight matrix by a handful of rows a step, so a
step costs a pass over all the weights plus the Python of every layer. Eager PyTorch runs
such products on one thread, below the memory speed of the CPU (see docs/lab-notes.md).
Compiled with the weights frozen in as constants (``torch._inductor.config.freezing``) and
GEMM kernels chosen by benchmarking (``max-autotune``), the products run on every core at
memory speed, and the Python of every layer gives way to one call of generated code:
``python benchmarks/generate.py`` measures both.

A ``CompiledModel`` compiles the methods that decoding calls: a decoder-only model's
``forward`` (for :func:`~.generate.generate`), an encoder-decoder's ``encode`` and
``decode`` (for :func:`~.beam.greedy_decode` and :func:`~.beam.beam_search`). Nothing is
assumed of the model's modules (a quantized model's linear layers compile the same way).
A graph is compiled for the shapes of its first call and reused while they hold. Shapes
that change from call to call are dynamic, so that they reuse it too: the length of the KV
cache (marked in ``inference/cache.py``) and the source length (marked here, on the
encoder's input and on the decoder's memory and source mask). The decoding loops keep the
batch fixed from step to step (and a position to spare in the KV cache, ``cache.SPARE``),
so a search of any length compiles three graphs: the encoder, the decoder's first step
(which fills the cross-attention cache) and its later steps. The batch size is not
dynamic: a batch of another size compiles again (after which Dynamo makes it dynamic,
whose symbolic shapes trace slower, tens of seconds a graph), so callers
decode every batch at one size (:attr:`CompiledModel.is_compiled`).

Frozen weights cost a compilation in every process: Inductor cannot cache a graph whose
weights it has packed for oneDNN. ``cached=True`` compiles so that the next process finds
the code in Inductor's cache (``$TORCHINDUCTOR_CACHE_DIR``, which the command line sets,
:func:`~scratchformer.caches.compiled_code_dir`) and only traces again (seconds): the
weights are then the graph's inputs, not frozen in, and the kernels Inductor's defaults,
not autotuned. Its steps are slower where few rows are multiplied, faster than eager
ones but well behind frozen ones at batch 1 (docs/lab-notes.md, "Compiling a user's
job"); the command line compiles so, since a user's job is short next to a frozen
compilation (minutes), except with int8 weights, whose fused kernels need them frozen, and
except ``generate`` on the CPU, whose decoding step is compiled ahead of time, frozen, and
kept on disk whole (:mod:`~.exported`); the server freezes, since it compiles once for a
long life.

Compiled for the CPU, attention of a few queries a row (every decoding step) takes
:func:`~.kernels.few_query_attention`, which Inductor fuses, in place of PyTorch's flash
kernel (see :data:`~.kernels.FEW_QUERIES`): each call installs the attention kernels on the
model's modules (:func:`~.kernels.attention_kernels`) and removes them on return, so the
model called eagerly computes as before.

Before every call Dynamo checks its guards, the conditions under which the compiled code
holds. Most of them watch the model's modules: their hooks, attributes and parameters.
Since the model is read once anyway (its weights are frozen in), those are dropped
(``torch.compiler.skip_guard_on_all_nn_modules_unsafe``), which makes a batch-1 decoding
step on the CPU noticeably shorter (see docs/lab-notes.md); the guards on the inputs
(shapes, the cache) and on the global state stay. Each ``CompiledModel`` keeps its compiled
code to itself (``isolate_recompiles``), so that another model of the same class never
runs it.

Freezing is read while Dynamo traces, which happens lazily at a call, so every call runs
inside the setting rather than the setting being changed for the whole process.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch._inductor import config as inductor_config
from torch._inductor import list_mode_options
from torch._inductor.constant_folding import add_dont_constant_fold
from torch._inductor.cpp_builder import get_cpp_compiler

from ..device import decoding_device
from ..models.base import ModelOutput
from .kernels import FEW_QUERIES, attention_kernels, installed

MODE = "max-autotune-no-cudagraphs"
"""Autotuned kernels; CUDA graphs left out, since a decode step's KV cache changes size."""
QUIET_FROZEN = {
    "freezing": True,
    "autotune_num_choices_displayed": 0,
    "max_autotune_report_choices_stats": False,
}
"""Inductor settings of every call: weights frozen in; the kernel timings not printed."""
CACHED = {"freezing": False}
"""Inductor settings of every call of a ``cached`` model: the weights are inputs."""
SKIP_MODULE_GUARDS = torch.compiler.skip_guard_on_all_nn_modules_unsafe
"""Guards on the model's modules are not checked: the model is read once, when compiling."""
METHODS = ("forward", "encode", "decode")
"""The methods compiled, those of them that the model has."""
SOURCE_LENGTH = 1
"""The dimension of the source length in ``src_ids``, ``src_mask`` and ``memory``."""

for shift in (torch.ops.aten.__lshift__.Scalar, torch.ops.aten.__rshift__.Scalar):
    add_dont_constant_fold(shift)
# Freezing computes ahead whatever depends on constants alone: the unpacking of int8 weights
# (kernels.packed.packed_product) would become a float32 copy of them. Our models shift nothing
# else.


def mark_source_length_dynamic(*tensors: Tensor | None) -> None:
    """One graph for every source length, rather than one per batch of another length."""
    for tensor in tensors:
        if tensor is not None:
            torch._dynamo.maybe_mark_dynamic(tensor, SOURCE_LENGTH)


class Compiled(nn.Module):
    """A model standing in for ``self.model`` in decoding, some of its work compiled: its
    config and decoder are the model's."""

    model: nn.Module
    is_compiled = True
    """What callers read to treat a model as compiled: every batch of a job should have one
    size, the first batch's, since a short last batch padded up (copies of a row, their
    results dropped) costs a few rows' work and a new size costs compiling every graph
    again (``TranslationTask.translate`` pads); and the eager-only kernels of a decoding
    loop are left out (``kernels.linear_kernels``)."""

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def decoder(self) -> nn.Module:
        return self.model.decoder


class CompiledModel(Compiled):
    """``model`` (in eval mode) with its decoding methods compiled: pass it to
    :func:`~.generate.generate`, :func:`~.generate.stream` (a decoder-only LM),
    :func:`~.beam.greedy_decode`, :func:`~.beam.beam_search` or a translation task's
    ``translate`` (an encoder-decoder) in place of the model: the same tokens, faster
    steps. The first calls compile (tens of seconds for each graph, see the module
    docstring).

    ``cached``: compile so that the code is kept for the next process (weights not frozen
    in, default kernels: slower steps on the CPU, see the module docstring).

    For inference only: calls with gradients enabled, or with the model put back in
    training mode, are refused. The model is read once, when compiling: changing its weights
    or its modules (hooks, attributes) afterwards needs a new ``CompiledModel``.
    """

    def __init__(self, model: nn.Module, cached: bool = False) -> None:
        super().__init__()
        cpu = decoding_device(model).type == "cpu"  # (which refuses a model in training mode)
        if cpu:
            try:  # now, rather than deep inside the first call
                get_cpp_compiler()
            except RuntimeError as error:
                raise ValueError(f"compiling for the CPU needs a C++ compiler: {error}") from None
        self.model = model
        # (a decoder's only: an encoder's queries are a whole source, of any length)
        decoder = getattr(model, "decoder", None)
        self.kernels = (
            attention_kernels(decoder, FEW_QUERIES if cpu else 0) if decoder is not None else []
        )
        self.settings = CACHED if cached else QUIET_FROZEN
        mode = {} if cached else list_mode_options(MODE)
        options = {**mode, "guard_filter_fn": SKIP_MODULE_GUARDS}
        self.compiled = {
            name: torch.compile(getattr(model, name), options=options, isolate_recompiles=True)
            for name in METHODS
            if hasattr(model, name)
        }
        self.train(False)

    def forward(self, *args: Any, **kwargs: Any) -> ModelOutput:
        """The model's forward, compiled; the same arguments and output."""
        return self.call("forward", *args, **kwargs)

    def encode(
        self, src_ids: Tensor, src_mask: Tensor | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """An encoder-decoder's ``encode``, compiled; the same arguments and output."""
        mark_source_length_dynamic(src_ids, src_mask)
        return self.call("encode", src_ids, src_mask, *args, **kwargs)

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """An encoder-decoder's ``decode``, compiled; the same arguments and output."""
        mark_source_length_dynamic(memory, src_mask)
        return self.call("decode", tgt_ids, memory, src_mask, *args, **kwargs)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The compiled ``method`` of the model, called with ``args`` and ``kwargs``."""
        if method not in self.compiled:
            raise AttributeError(f"{type(self.model).__name__} has no method {method!r}")
        if torch.is_grad_enabled():
            raise RuntimeError("a CompiledModel is for inference: call it under torch.no_grad()")
        if self.model.training:  # (no guard watches the mode)
            raise RuntimeError("the model was put in training mode after compiling")
        with inductor_config.patch(self.settings), installed(self.kernels):
            return self.compiled[method](*args, **kwargs)


CompiledLM = CompiledModel
"""The name of a ``CompiledModel`` of a decoder-only LM."""
