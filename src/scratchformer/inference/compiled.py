"""A language model compiled for decoding: ``torch.compile`` with frozen, autotuned weights.

Decoding a few sequences multiplies every weight matrix by a handful of rows a step, so a
step costs a pass over all the weights plus the Python of every layer. Eager PyTorch runs
such products on one thread, below the memory speed of the CPU (see docs/performance.md).
Compiled with the weights frozen in as constants (``torch._inductor.config.freezing``) and
GEMM kernels chosen by benchmarking (``max-autotune``), the products run on every core at
memory speed, and the Python of every layer gives way to one call of generated code:
``python benchmarks/generate.py`` measures both.

Before every call Dynamo checks its guards, the conditions under which the compiled code
holds. Most of them watch the model's modules: their hooks, attributes and parameters.
Since the model is read once anyway (its weights are frozen in), those are dropped
(``torch.compiler.skip_guard_on_all_nn_modules_unsafe``), which makes a batch-1 decoding
step on the CPU noticeably shorter (see docs/performance.md); the guards on the inputs
(shapes, the cache) and on the global state stay. Each ``CompiledLM`` keeps its compiled
code to itself (``isolate_recompiles``), so that another model of the same class never
runs it.

Freezing is read while Dynamo traces, which happens lazily at a call, so every call runs
inside the setting rather than the setting being changed for the whole process.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch._inductor import config as inductor_config
from torch._inductor import list_mode_options
from torch._inductor.cpp_builder import get_cpp_compiler

from ..models.base import ModelOutput
from .generate import decoding_device

MODE = "max-autotune-no-cudagraphs"
"""Autotuned kernels; CUDA graphs left out, since a decode step's KV cache changes size."""
QUIET_FROZEN = {
    "freezing": True,
    "autotune_num_choices_displayed": 0,
    "max_autotune_report_choices_stats": False,
}
"""Inductor settings of every call: weights frozen in; the kernel timings not printed."""
SKIP_MODULE_GUARDS = torch.compiler.skip_guard_on_all_nn_modules_unsafe
"""Guards on the model's modules are not checked: the model is read once, when compiling."""


class CompiledLM(nn.Module):
    """``model`` (a decoder-only LM in eval mode) with its forward compiled for decoding:
    pass it to :func:`~.generate.generate` or :func:`~.generate.stream` in place of the
    model. The first calls compile (tens of seconds: once for the prompt, again for the
    steps after it; a new batch size or prompt length may add one).

    For inference only: calls with gradients enabled, or with the model put back in
    training mode, are refused. The model is read once, when compiling: changing its weights
    or its modules (hooks, attributes) afterwards needs a new ``CompiledLM``.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if decoding_device(model).type == "cpu":  # (which refuses a model in training mode)
            try:  # now, rather than deep inside the first call
                get_cpp_compiler()
            except RuntimeError as error:
                raise ValueError(f"compiling for the CPU needs a C++ compiler: {error}") from None
        self.model = model
        self.compiled_forward = torch.compile(
            model.forward,
            options={**list_mode_options(MODE), "guard_filter_fn": SKIP_MODULE_GUARDS},
            isolate_recompiles=True,
        )
        self.train(False)

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def decoder(self) -> nn.Module:
        return self.model.decoder

    def forward(self, *args: Any, **kwargs: Any) -> ModelOutput:
        """The model's forward, compiled; the same arguments and output."""
        if torch.is_grad_enabled():
            raise RuntimeError("a CompiledLM is for inference: call it under torch.no_grad()")
        if self.model.training:  # (no guard watches the mode)
            raise RuntimeError("the model was put in training mode after compiling")
        with inductor_config.patch(QUIET_FROZEN):
            return self.compiled_forward(*args, **kwargs)
