"""Decoding kernels: attention and linear maps in the forms that decoding runs faster.

The building blocks compute the readable way: ``Attention.attend`` (the core of every
attention that has no ``attend`` of its own) writes attention out or calls PyTorch's fused
kernel, ``Linear`` is ``torch.nn.Linear``. Decoding installs kernels on a model's modules
while it runs (:func:`installed`): each an instance attribute that shadows a method
(``attend``, ``forward``), so that removing it gives the method back, and a model outside a
decoding loop computes as it was written.

- :class:`DecodingAttention` (every decoding loop, on every attention whose ``attend`` is
  the core): query rows that share keys (beam search: the beams of a sentence share its
  encoder output) attend as the queries of one row (:func:`fold_rows`), so the keys and
  values are read once; and, installed by a ``CompiledModel`` or an ``ExportedLM`` on the
  CPU, up to :data:`FEW_QUERIES` queries a row attend by :func:`few_query_attention`: the
  project's C++ kernel on x86 CPUs with AVX2, elsewhere sums that Inductor fuses.
- :class:`TransposedLinear` (every decoding loop on the CPU): the loop's number of rows a
  step multiplied as ``(weight @ x.T).T``, if this CPU runs that orientation faster for the
  model's weights, as :func:`transposed_is_faster` measures.

The kernels compute the same formulas as the core; only the order of additions may differ.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..kernels import kernels_available
from ..models import LMHead
from ..nn import Attention, causal_mask, combine_masks
from ..nn.attention import masked_softmax

FEW_QUERIES = 8
"""Up to this many queries a row (a decoding step: one token, or the beams of a sentence in
cross-attention), a compiled model's attention on the CPU is :func:`few_query_attention`:
PyTorch's CPU flash kernel splits its work by blocks of queries, and one query a row is its
worst case (docs/lab-notes.md, "Beam search")."""

Kernel = tuple[nn.Module, str, Callable[..., object]]
"""``(module, name, kernel)``: ``kernel`` installed as the module's attribute ``name``."""


def few_query_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    kernel: bool = False,
) -> Tensor:
    """:func:`~scratchformer.nn.scaled_dot_product_attention`'s output for a few queries a
    row. With ``kernel`` (the caller's :func:`~scratchformer.kernels.kernels_available`,
    asked before tracing), in float32, the project's kernel
    (``torch.ops.scratchformer.few_query_attention``): every row and head a task, the keys
    and values read once per query. Otherwise :func:`attention_sums`, which
    ``torch.compile`` fuses.

    ``q`` ``(batch, heads, q_len, d)``; ``k`` and ``v`` may have fewer heads, each shared by
    a group of consecutive query heads (grouped-query attention)."""
    if not (kernel and _kernel_attends(q, k, v, mask)):
        return attention_sums(q, k, v, mask, scale)
    shape = (*q.shape[:-1], k.shape[-2])
    allowed = q.new_ones((), dtype=torch.bool) if mask is None else mask
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return torch.ops.scratchformer.few_query_attention(q, k, v, allowed.expand(shape), scale)


def _kernel_attends(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> bool:
    """Whether the kernel takes these operands: float32 on the CPU, four dimensions each,
    the features contiguous, a boolean mask or none, none to differentiate (the kernel has
    no backward)."""
    tensors = (q, k, v)
    return (
        all(t.device.type == "cpu" and t.dtype == torch.float32 and t.dim() == 4 for t in tensors)
        and all(t.stride(-1) == 1 for t in tensors)
        and (mask is None or mask.dtype == torch.bool)
        and not any(t.requires_grad for t in tensors)
    )


def attention_sums(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, scale: float | None = None
) -> Tensor:
    """:func:`~scratchformer.nn.scaled_dot_product_attention`'s output, from sums of
    elementwise products in place of matrix products: for a few queries a row,
    ``torch.compile`` fuses each sum into one kernel that reads the keys (or values) once.
    Grouped query heads attend as one more dimension rather than through copies of the
    keys."""
    groups = q.shape[-3] // k.shape[-3]
    q = q.unflatten(-3, (k.shape[-3], groups))
    k, v = k.unsqueeze(-3), v.unsqueeze(-3)
    if mask is not None and mask.dim() >= 3:
        mask = mask.unsqueeze(-3) if mask.shape[-3] == 1 else mask.unflatten(-3, (-1, groups))
    scores = (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(dim=-1)
    scores = scores / math.sqrt(q.shape[-1]) if scale is None else scores * scale
    weights = masked_softmax(scores, mask)
    return (weights.unsqueeze(-1) * v.unsqueeze(-3)).sum(dim=-2).flatten(-4, -3)


def fold_rows(x: Tensor, rows: int) -> Tensor:
    """``(batch * rows, heads, len, d)`` -> ``(batch, heads, rows * len, d)``: the queries
    of ``rows`` consecutive rows side by side, as the queries of one row."""
    batch, heads, length, d = x.shape
    x = x.view(batch // rows, rows, heads, length, d).transpose(1, 2)
    return x.reshape(batch // rows, heads, rows * length, d)


def unfold_rows(x: Tensor, rows: int) -> Tensor:
    """The inverse of :func:`fold_rows`: ``(batch, heads, rows * len, d)`` ->
    ``(batch * rows, heads, len, d)``."""
    batch, heads, length, d = x.shape
    x = x.view(batch, heads, rows, length // rows, d).transpose(1, 2)
    return x.reshape(batch * rows, heads, length // rows, d)


class DecodingAttention:
    """An ``attend`` for an :class:`~scratchformer.nn.Attention` while decoding: the same
    arguments and results as the class's own method, which it calls for what it does not
    do itself.

    With fewer rows of keys than of queries, each row of keys serves as many consecutive
    rows of queries, which attend as the queries of one row (:func:`fold_rows`). Up to
    ``few_queries`` queries a row, without weights, gradients or a score bias, attend by
    :func:`few_query_attention`, in the project's kernel where it runs."""

    def __init__(self, attention: Attention, few_queries: int = 0) -> None:
        self.attention = attention
        self.few_queries = few_queries
        self.kernel = few_queries > 0 and kernels_available()
        """(Asked here, before any tracing: the first time, it builds the kernels.)"""

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        rows = q.shape[0] // k.shape[0]
        if rows * k.shape[0] != q.shape[0]:
            raise ValueError(f"{q.shape[0]} rows of queries do not share {k.shape[0]} of keys")
        if rows > 1:
            if is_causal or (mask is not None and mask.dim() == 4 and mask.shape[-2] > 1):
                raise ValueError("rows that share keys take a key mask (batch, 1, 1, k_len)")
            if bias is not None:
                raise ValueError("rows that share keys take no score bias")
            out, weights = self(fold_rows(q, rows), k, v, mask, False, need_weights)
            return unfold_rows(out, rows), None if weights is None else unfold_rows(weights, rows)
        q_len = q.shape[-2]
        core = need_weights or bias is not None or torch.is_grad_enabled()
        if core or q_len > self.few_queries:
            attend = type(self.attention).attend
            return attend(self.attention, q, k, v, mask, is_causal, need_weights, bias)
        if is_causal:
            mask = combine_masks(mask, causal_mask(q_len, k.shape[-2], device=q.device))
        scale = self.attention.scale
        return few_query_attention(q, k, v, mask, scale, self.kernel), None


def transposed_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``torch.nn.functional.linear`` taken as ``(weight @ x.T).T``, contiguous."""
    rows = x.shape[:-1].numel()
    columns = x.reshape(rows, x.shape[-1]).T
    out = weight @ columns if bias is None else torch.addmm(bias[:, None], weight, columns)
    return out.T.contiguous().view(*x.shape[:-1], weight.shape[0])


class TransposedLinear:
    """A ``forward`` for a linear map (``torch.nn.Linear`` or an ``LMHead``) that
    multiplies ``rows`` rows by :func:`transposed_linear`, any other number by
    ``torch.nn.functional.linear``."""

    def __init__(self, linear: nn.Module, rows: int) -> None:
        self.linear = linear
        self.rows = rows

    def __call__(self, x: Tensor) -> Tensor:
        weight, bias = self.linear.weight, getattr(self.linear, "bias", None)
        if x.shape[:-1].numel() == self.rows:
            return transposed_linear(x, weight, bias)
        return F.linear(x, weight, bias)


Shape = tuple[int, int, bool]
"""``(out_features, in_features, has bias)`` of a linear map."""
TIMED_PASSES = 3
"""Passes through the weights each way that :func:`transposed_is_faster` times."""


def transposed_is_faster(linears: Sequence[nn.Module], rows: int) -> bool:
    """Whether this CPU multiplies ``rows`` rows by all of ``linears`` faster as
    ``(weight @ x.T).T`` than by ``torch.nn.functional.linear``, timed on one weight of each
    of their shapes, in their dtype, at the current number of threads and autocast setting
    (the layers of a model repeat a few shapes, so this is a few matrices): which is
    faster depends on the instruction set and the shapes (``python benchmarks/linear.py``
    shows the whole range of rows). Measured once a process for each such setting."""
    shapes = sorted(
        {
            (m.weight.shape[0], m.weight.shape[1], getattr(m, "bias", None) is not None)
            for m in linears
        }
    )
    autocast = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
    dtype = linears[0].weight.dtype
    return _transposed_is_faster(tuple(shapes), dtype, rows, torch.get_num_threads(), autocast)


@cache
def _transposed_is_faster(
    shapes: tuple[Shape, ...],
    dtype: torch.dtype,
    rows: int,
    threads: int,
    autocast: torch.dtype | None,
) -> bool:
    """:func:`transposed_is_faster` of random weights of ``shapes`` (drawn from a generator
    of their own: the global random state stays as it was): the median time of
    :data:`TIMED_PASSES` passes through all of them each way, the two ways taken in turn
    after one pass each. It runs under the caller's ``threads`` and ``autocast``, which key
    the cache."""
    generator = torch.Generator().manual_seed(0)

    def draw(*size: int) -> Tensor:
        return torch.randn(*size, dtype=dtype, generator=generator)

    weights = [draw(out, in_) for out, in_, _ in shapes]
    biases = [draw(out) if bias else None for out, _, bias in shapes]
    inputs = [draw(rows, in_) for _, in_, _ in shapes]

    def seconds(product: Callable[[Tensor, Tensor, Tensor | None], Tensor]) -> float:
        start = time.perf_counter()
        for x, weight, bias in zip(inputs, weights, biases, strict=True):
            product(x, weight, bias)
        return time.perf_counter() - start

    with torch.no_grad():
        times = [(seconds(F.linear), seconds(transposed_linear)) for _ in range(TIMED_PASSES + 1)]
    plain, transposed = zip(*times[1:], strict=True)
    return statistics.median(transposed) < statistics.median(plain)


def kept(kind: Callable[..., Any], module: nn.Module, *args: object) -> Any:
    """The kernel ``kind(module, *args)``, built once and kept on the module: installed
    again, it is the same object. Compiled code holds the kernels it traced, and Dynamo
    drops it once one of them is freed: a kernel built afresh for every decoding loop made
    every loop of a ``CompiledModel`` compile again."""
    built = vars(module).setdefault("_decoding_kernels", {})
    key = (kind, *args)
    if key not in built:
        built[key] = kind(module, *args)
    return built[key]


def attention_kernels(model: nn.Module, few_queries: int = 0) -> list[Kernel]:
    """A :class:`DecodingAttention` for every attention of ``model`` that they fit: whose
    ``attend`` is the core, ``Attention.attend``, or one its class declares to compute the
    same (``attend_is_core``). A variant's own formula is never replaced by the core's."""
    return [
        (module, "attend", kept(DecodingAttention, module, few_queries))
        for module in model.modules()
        if isinstance(module, Attention)
        and (type(module).attend is Attention.attend or type(module).attend_is_core)
    ]


def linear_kernels(model: nn.Module, rows: int) -> list[Kernel]:
    """A :class:`TransposedLinear` of ``rows`` for every plain linear map of ``model``
    (``torch.nn.Linear``, ``LMHead``: not a subclass that adds to the product), if the
    model is on the CPU and :func:`transposed_is_faster` for them; else none."""
    if getattr(model, "is_compiled", False):  # Inductor picks its own products, and a
        return []  # per-process timing must not change the graph it caches
    linears = [module for module in model.modules() if type(module) in (nn.Linear, LMHead)]
    if not linears or linears[0].weight.device.type != "cpu":
        return []
    if not transposed_is_faster(linears, rows):
        return []
    return [(module, "forward", kept(TransposedLinear, module, rows)) for module in linears]


@contextmanager
def installed(kernels: Sequence[Kernel]) -> Iterator[None]:
    """Each ``(module, name, kernel)`` set as the module's instance attribute ``name`` for
    the duration, shadowing the method of that name; then the attributes as they were (an
    outer installation's kernel, or none, which gives the method back). The attributes are
    written to the instance's ``__dict__`` directly: a method's name is never a parameter,
    buffer or submodule, which ``nn.Module.__setattr__`` would check for at every call of a
    ``CompiledModel``."""
    before = [vars(module).get(name) for module, name, _ in kernels]
    for module, name, kernel in kernels:
        vars(module)[name] = kernel
    try:
        yield
    finally:
        for (module, name, _), kernel in zip(kernels, before, strict=True):
            if kernel is None:
                del vars(module)[name]
            else:
                vars(module)[name] = kernel


def decoding_kernels(model: nn.Module, rows: int) -> AbstractContextManager[None]:
    """The kernels of a decoding loop that multiplies ``rows`` rows a step, installed on
    ``model`` for the duration: :func:`attention_kernels` and :func:`linear_kernels`."""
    return installed(attention_kernels(model) + linear_kernels(model, rows))
