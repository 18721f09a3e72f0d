"""Decoding kernels: equal to the core they stand in for, and installed only while decoding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import (
    LATENT,
    PROMPTS,
    compile_without_inductor,
    compiled_graphs,
    tiny_lm,
    with_cpu_kernels,
)
from scratchformer.inference import DecoderCache, generate
from scratchformer.inference import kernels as kernels_module
from scratchformer.inference.kernels import (
    FEW_QUERIES,
    DecodingAttention,
    TransposedLinear,
    attention_kernels,
    decoding_kernels,
    few_query_attention,
    installed,
    linear_kernels,
    transposed_is_faster,
)
from scratchformer.models import LMHead
from scratchformer.nn import (
    Linear,
    MultiHeadAttention,
    causal_mask,
    combine_masks,
    padding_mask,
    scaled_dot_product_attention,
)
from scratchformer.nn.attention import ATTENTIONS, expand_kv_heads
from torch_reference import lengths_mask


def recorded_graphs() -> tuple[list[torch.fx.GraphModule], object]:
    """A list and a ``torch.compile`` backend that appends each graph to it and runs it."""
    graphs: list[torch.fx.GraphModule] = []

    def recording(graph: torch.fx.GraphModule, _: list) -> torch.fx.GraphModule:
        graphs.append(graph)
        return graph

    return graphs, recording


KERNEL_FORMS = [False, pytest.param(True, marks=with_cpu_kernels)]
"""The sums that Inductor fuses, and the project's kernel where it runs."""


@pytest.mark.parametrize("kernel", KERNEL_FORMS)
@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("q_len", [1, 3])
@pytest.mark.parametrize("masked", ["none", "padding", "padding+causal", "a row with no key"])
def test_few_query_attention_equals_the_reference(
    q_len: int, masked: str, kv_heads: int, kernel: bool
) -> None:
    """Against the reference, with keys and values of as many heads as the queries or of
    fewer (grouped-query attention: the reference is given them repeated)."""
    q, k, v = (
        torch.randn(3, 4, q_len, 8),
        torch.randn(3, kv_heads, 6, 8),
        torch.randn(3, kv_heads, 6, 8),
    )
    mask = {
        "none": None,
        "padding": padding_mask(lengths_mask([6, 4, 1], 6)),
        "padding+causal": combine_masks(
            padding_mask(lengths_mask([6, 4, 1], 6)), causal_mask(q_len, 6)
        ),
        "a row with no key": padding_mask(lengths_mask([6, 0, 2], 6)),
    }[masked]
    reference, _ = scaled_dot_product_attention(q, *expand_kv_heads(k, v, 4), mask)
    out = few_query_attention(q, k, v, mask, kernel=kernel)
    torch.testing.assert_close(out, reference, atol=1e-6, rtol=0)


@with_cpu_kernels
@pytest.mark.parametrize("d", [128, 72, 64, 20, 3])
def test_the_kernel_attends_over_a_slice_of_a_cache(d: int) -> None:
    """Keys and values as a decoding step has them, the first positions of a bigger cache
    (strided), with features of whole vectors, a tail past them, or fewer than one vector,
    and the values' sums held in registers for two blocks of 64 features, for one and a
    tail, or for none; 33 keys, four at a time and one alone; queries not contiguous, as a
    projection's split gives them; a scale of the caller's."""
    cache = torch.randn(2, 3, 5, 40, d)
    k, v = cache[0, :, :, :33], cache[1, :, :, :33]
    q = torch.randn(3, 1, 5, d).transpose(1, 2)
    mask = padding_mask(lengths_mask([33, 30, 7], 33))
    expected, _ = scaled_dot_product_attention(q, k, v, mask, scale=0.3)
    out = few_query_attention(q, k, v, mask, scale=0.3, kernel=True)
    # (64 features, 33 keys: sums of more terms than above, in another order, and the
    # weights normalised after the sum of the values rather than before)
    torch.testing.assert_close(out, expected, atol=2e-6, rtol=0)
    operator = torch.ops.scratchformer.few_query_attention
    assert torch.equal(out, operator(q, k, v, mask.expand(3, 5, 1, 33), 0.3))


@with_cpu_kernels
def test_the_kernel_gives_the_same_on_one_thread_and_two() -> None:
    q, k, v = torch.randn(3, 8, 2, 4, 16).unbind(0)
    mask = torch.ones(8, 2, 4, 4, dtype=torch.bool)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = few_query_attention(q, k, v, mask, kernel=True)
        torch.set_num_threads(2)
        assert torch.equal(few_query_attention(q, k, v, mask, kernel=True), one)
    finally:
        torch.set_num_threads(threads)


@with_cpu_kernels
def test_the_kernel_is_the_operator_that_export_keeps() -> None:
    """Exported (as ``ExportedLM`` exports a step), the kernel stays one operator call."""

    class Attend(nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return few_query_attention(q, k, v, kernel=True)

    q, k, v = torch.randn(3, 2, 4, 1, 8).unbind(0)
    with torch.no_grad():
        graph = torch.export.export(Attend(), (q, k, v)).graph_module.code
    assert "scratchformer.few_query_attention" in graph


def test_a_compiled_decoding_step_attends_by_few_query_attention_not_the_fused_kernel() -> None:
    """With the kernel installed, under ``torch.compile`` without gradients, up to
    FEW_QUERIES queries take the sums of products (which Inductor fuses), more take
    PyTorch's fused kernel, as do all with gradients (training); the outputs are the eager
    ones."""
    attention = MultiHeadAttention(32, 4).eval()
    graphs, recording = recorded_graphs()
    k, v = torch.randn(2, 2, 4, 9, 8).unbind(0)
    with installed(attention_kernels(attention, FEW_QUERIES)):
        for q_len, grad in ((1, False), (FEW_QUERIES, False), (FEW_QUERIES + 1, False), (1, True)):
            q = torch.randn(2, 4, q_len, 8)
            compiled = torch.compile(attention.attend, backend=recording, dynamic=False)
            with torch.set_grad_enabled(grad):
                out, _ = compiled(q, k, v, is_causal=True)
            expected, _ = attention.attend(q, k, v, is_causal=True)
            torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
            fused = "scaled_dot_product_attention" in graphs[-1].code
            assert fused == (q_len > FEW_QUERIES or grad)


def test_without_the_kernels_a_compiled_step_takes_the_core_fused_kernel() -> None:
    """The core ``attend`` is what runs unless a kernel is installed: one query a row,
    compiled, without gradients, goes to PyTorch's fused kernel; and a model that decoded
    carries no kernel afterwards."""
    attention = MultiHeadAttention(32, 4, n_kv_heads=2).eval()
    assert "attend" not in vars(attention)
    graphs, recording = recorded_graphs()
    q, k, v = torch.randn(2, 4, 1, 8), torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)
    with torch.no_grad():
        torch.compile(attention.attend, backend=recording, dynamic=False)(q, k, v)
    assert "scaled_dot_product_attention" in graphs[-1].code
    model = tiny_lm()
    generate(model, PROMPTS, max_new_tokens=2, greedy=True)
    assert not any({"attend", "forward"} & vars(m).keys() for m in model.modules())


def test_installing_and_removing_restores_the_core_path() -> None:
    """Installed, ``attend`` and ``forward`` are the kernels; an inner installation gives
    the outer one back, the outer none gives the methods back."""
    attention = MultiHeadAttention(16, 2, cross=True).eval()
    proj = attention.q_proj
    outer = [
        *attention_kernels(attention, FEW_QUERIES),
        (proj, "forward", TransposedLinear(proj, 3)),
    ]
    with installed(outer):
        assert isinstance(attention.attend, DecodingAttention)
        assert attention.attend.few_queries == FEW_QUERIES and proj.forward is outer[1][2]
        with installed(attention_kernels(attention)):
            assert attention.attend.few_queries == 0
        with decoding_kernels(attention, 3):
            assert attention.attend is not outer[0][2]
        assert attention.attend is outer[0][2]
    assert attention_kernels(attention) == attention_kernels(attention)  # kept: the same
    assert attention.attend.__func__ is MultiHeadAttention.attend
    assert proj.forward.__func__ is nn.Linear.forward
    assert not {"attend", "forward"} & (vars(attention).keys() | vars(proj).keys())


class DoubledScores(MultiHeadAttention):
    """A variant with an ``attend`` of its own: scores twice the core's."""

    def attend(self, q, k, v, mask=None, is_causal=False, need_weights=False, bias=None):
        return super().attend(2 * q, k, v, mask, is_causal, need_weights, bias)


class CountedAttend(MultiHeadAttention):
    """The core's formula in an ``attend`` of its own that counts its calls, declared to
    compute the core's (so the kernels may stand in for it)."""

    attend_is_core = True
    calls = 0

    def attend(self, *args, **kwargs):
        self.calls += 1
        return super().attend(*args, **kwargs)


def stepped_logits(model: nn.Module, ids: torch.Tensor, few_queries: int) -> torch.Tensor:
    """The logits of ``ids`` fed as a decoding loop feeds them: the first half at once,
    then a token a step, into a cache, with the loop's kernels installed, and the attention
    kernels for ``few_queries`` as a compiled model installs them."""
    rows, length = ids.shape
    cache = DecoderCache(model.decoder, rows, length + 1)
    few_query_kernels = installed(attention_kernels(model, few_queries))
    with torch.no_grad(), decoding_kernels(model, rows), few_query_kernels:
        logits = [model(ids[:, : length // 2], cache=cache).logits]
        logits += [model(ids[:, t : t + 1], cache=cache).logits for t in range(length // 2, length)]
    return torch.cat(logits, dim=1)


def test_a_variant_with_an_attend_of_its_own_decodes_by_it(monkeypatch) -> None:
    """Registered as a model's attention, a subclass whose ``attend`` is its own takes no
    decoding kernel, which would compute the core's formula: decoding with a cache, with
    the kernels of every loop and with a compiled model's (where the core takes the
    few-query kernels), gives the logits of the variant's uncached forward, which are not
    the core's."""
    core = tiny_lm("rotary", n_layers=1)
    monkeypatch.setitem(ATTENTIONS._entries, "multi_head", DoubledScores.from_config)
    variant = tiny_lm("rotary", n_layers=1)
    variant.load_state_dict(core.state_dict())
    assert type(variant.decoder.layers[0].self_attn) is DoubledScores
    assert attention_kernels(variant, FEW_QUERIES) == [] and attention_kernels(core, FEW_QUERIES)
    ids = torch.tensor([[5, 9, 2, 7, 3, 1], [7, 3, 8, 8, 4, 1]])
    with torch.no_grad():
        whole = variant(ids).logits
        assert not torch.allclose(whole, core(ids).logits, atol=1e-3)
    for few_queries in (0, FEW_QUERIES):
        stepped = stepped_logits(variant, ids, few_queries)
        torch.testing.assert_close(stepped, whole, atol=1e-5, rtol=1e-5)


def test_latent_attention_decodes_by_the_few_query_kernels() -> None:
    """Multi-head latent attention's ``attend`` is the core: the kernels stand in for it,
    and decoding steps with its values narrower than its keys, with a compiled model's
    kernels too (a few queries a row: ``few_query_attention``, in the project's kernel where
    it runs), give its uncached forward's logits."""
    model = tiny_lm("rotary", n_layers=1, **LATENT)
    assert len(attention_kernels(model, FEW_QUERIES)) == 1
    ids = torch.tensor([[5, 9, 2, 7, 3, 1], [7, 3, 8, 8, 4, 1]])
    with torch.no_grad():
        whole = model(ids).logits
    for few_queries in (0, FEW_QUERIES):
        stepped = stepped_logits(model, ids, few_queries)
        torch.testing.assert_close(stepped, whole, atol=1e-5, rtol=1e-5)


def test_a_declared_attend_takes_the_kernels_which_fall_back_to_it() -> None:
    """The kernel stands in for a declared ``attend`` and falls back to the class's own
    (not the core's by name) for what it does not do itself (weights, many queries)."""
    attention = CountedAttend(16, 2).eval()
    x = torch.randn(2, 3, 16)
    with torch.no_grad(), installed(attention_kernels(attention, FEW_QUERIES)):
        assert isinstance(attention.attend, DecodingAttention)
        attention(x, need_weights=True)
        assert attention.calls == 1
        attention(x[:, :1])  # one query a row: the few-query kernel's
        assert attention.calls == 1


@pytest.mark.parametrize("q_len", [1, 2])
def test_query_rows_that_share_a_source_equal_rows_with_a_copy_each(q_len: int) -> None:
    """Beam search's cross-attention: 3 consecutive rows of queries (the beams of a
    sentence) share each of 2 sources; as if each row had its own copy, with the weights."""
    attention = MultiHeadAttention(32, 4, cross=True).eval()
    x, source = torch.randn(6, q_len, 32), torch.randn(2, 5, 32)
    mask = padding_mask(lengths_mask([5, 3], 5))
    with installed(attention_kernels(attention)):
        shared = attention(x, source, mask=mask, need_weights=True)
        copied = attention(
            x, source.repeat_interleave(3, 0), mask=mask.repeat_interleave(3, 0), need_weights=True
        )
        for ours, expected in zip(shared, copied, strict=True):
            torch.testing.assert_close(ours, expected, atol=1e-6, rtol=0)
        fused, _ = attention(x, source, mask=mask)
        torch.testing.assert_close(fused, copied[0], atol=1e-6, rtol=0)
        q, k, v = attention.project(x, source)
        with pytest.raises(ValueError, match="4 rows of queries do not share 3 of keys"):
            attention.attend(q[:4], k.repeat(2, 1, 1, 1)[:3], v.repeat(2, 1, 1, 1)[:3])
        with pytest.raises(ValueError, match=r"rows that share keys take a key mask"):
            attention.attend(q, k, v, is_causal=True)


@pytest.mark.parametrize("shape", [(1, 48), (2, 48), (8, 1, 48), (4, 8, 48), (33, 48), (3, 40, 48)])
@pytest.mark.parametrize("bias", [True, False])
def test_transposed_linear_matches_torch_linear_values_and_gradients(
    shape: tuple[int, ...], bias: bool
) -> None:
    theirs = nn.Linear(48, 80, bias=bias)
    ours = Linear(48, 80, bias=bias)
    ours.load_state_dict(theirs.state_dict())
    ours.forward = TransposedLinear(ours, rows=torch.Size(shape[:-1]).numel())
    x = torch.randn(shape, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    out, expected = ours(x), theirs(x_ref)
    assert out.shape == expected.shape and out.is_contiguous()
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    grad = torch.randn(expected.shape)
    out.backward(grad)
    expected.backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    for mine, reference in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, reference.grad, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("rows", [2, 8, 13])
def test_the_loops_rows_take_the_transposed_product(
    rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel's number of rows goes through ``weight @ x.T`` (addmm with the weight
    first), any other through ``torch.nn.functional.linear``."""
    calls: list[str] = []
    addmm, functional_linear = torch.addmm, F.linear

    def spy_addmm(*args: torch.Tensor) -> torch.Tensor:
        calls.append("addmm")
        return addmm(*args)

    def spy_linear(*args: torch.Tensor | None) -> torch.Tensor:
        calls.append("linear")
        return functional_linear(*args)

    monkeypatch.setattr(torch, "addmm", spy_addmm)
    monkeypatch.setattr(F, "linear", spy_linear)
    kernel = TransposedLinear(Linear(8, 16), rows)
    for fed in (1, 2, 8, 12, 13, 32, 33):
        calls.clear()
        kernel(torch.randn(fed, 8))
        assert calls == ["addmm" if fed == rows else "linear"], fed


@pytest.mark.parametrize("faster", [True, False])
def test_linear_kernels_follow_the_measurement(
    faster: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every plain linear map and the LM head get the kernel when the measurement says the
    transposed product is faster, none otherwise; a subclass (LoRA) never does."""
    measured: list[int] = []

    def measurement(*key: object) -> bool:
        measured.append(key[2])
        return faster

    monkeypatch.setattr(kernels_module, "_transposed_is_faster", measurement)
    model = tiny_lm()
    installed_on = {id(module) for module, name, _ in linear_kernels(model, 5)}
    plain = [m for m in model.modules() if type(m) in (nn.Linear, LMHead)]
    assert measured == [5] and any(isinstance(m, LMHead) for m in plain)
    assert installed_on == ({id(m) for m in plain} if faster else set())


def test_the_measurement_is_taken_once_for_its_setting() -> None:
    """Timed on weights of the model's shapes: the same answer for the same setting, taken
    from the first measurement."""
    model = tiny_lm()
    linears = [m for m in model.modules() if type(m) in (nn.Linear, LMHead)]
    first = transposed_is_faster(linears, 3)
    hits = kernels_module._transposed_is_faster.cache_info().hits
    assert transposed_is_faster(linears, 3) == first
    assert kernels_module._transposed_is_faster.cache_info().hits == hits + 1


def test_the_measurement_leaves_the_global_random_state() -> None:
    state = torch.get_rng_state()
    kernels_module._transposed_is_faster.__wrapped__(((16, 8, True),), torch.float32, 2, 1, None)
    assert torch.equal(torch.get_rng_state(), state)


def test_generation_gives_the_same_tokens_with_the_transposed_product_or_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever the measurement says, generation finds the same tokens."""
    model = tiny_lm()
    tokens = []
    for faster in (False, True):
        monkeypatch.setattr(kernels_module, "_transposed_is_faster", lambda *_, f=faster: f)
        tokens.append(generate(model, PROMPTS, max_new_tokens=6, greedy=True))
    assert tokens[0] == tokens[1]


def test_transposed_linear_traces_with_symbolic_sizes() -> None:
    """``torch.compile`` with dynamic shapes traces the row count as a symbol; the choice
    of route must still trace (dynamo only: the backend does not matter here)."""
    linear = Linear(48, 80)
    compiled = torch.compile(TransposedLinear(linear, 4), dynamic=True, backend="eager")
    for rows in (4, 40):
        x = torch.randn(rows, 48)
        torch.testing.assert_close(compiled(x), F.linear(x, linear.weight, linear.bias))


def test_a_compiled_model_decodes_again_without_compiling_again(monkeypatch) -> None:
    """Each decoding loop installs its kernels; they are the same objects every time, so
    the code compiled in the first loop stays valid for the next (built afresh, the old
    ones freed, every loop compiled again: the transposed linear kernels of a CPU where
    they are faster made every call of ``translate --compile`` a compilation). A compiled
    model takes no transposed linear kernels at all, whatever the timing says: Inductor
    picks its own products, and the graph it caches must not depend on a timing."""
    from scratchformer.inference import CompiledModel

    compile_without_inductor(monkeypatch)
    monkeypatch.setattr(kernels_module, "transposed_is_faster", lambda linears, rows: True)
    compiled = CompiledModel(tiny_lm("rotary", n_layers=1))
    prompts = PROMPTS[:2]
    first = generate(compiled, prompts, max_new_tokens=4, greedy=True)
    before = compiled_graphs()
    for _ in range(2):
        assert generate(compiled, prompts, max_new_tokens=4, greedy=True) == first
    assert compiled_graphs() == before
    assert kernels_module.linear_kernels(compiled, 2) == []
