"""quantize: every linear map of a model in int8, a model that decodes, searches beams and
compiles as the float one does, close to its float logits."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

from helpers import COMPILED, PROMPTS, peaked, tiny_config, tiny_lm, with_cpu_kernels
from scratchformer import build_model
from scratchformer.config import TrainConfig
from scratchformer.inference import CompiledLM, beam_search, generate, quantize
from scratchformer.inference.exported import ExportedLM
from scratchformer.models import LMHead
from scratchformer.nn import QuantizedLinear
from scratchformer.training.lora import apply_lora

CLOSE = 0.04
"""A quantized tiny model's logits are within this fraction of the largest float logit (up
to 2.7% measured where int8_matmul rounds each input row to 7 bits, 1.8% without it)."""


def logits(model: nn.Module, arch: str) -> torch.Tensor:
    torch.manual_seed(5)
    ids = torch.randint(1, 29, (3, 9))
    mask = torch.arange(9) < torch.tensor([[9], [6], [3]])
    with torch.no_grad():
        if arch == "seq2seq":
            return model(ids, ids[:, :5], src_mask=mask).logits
        return model(ids, attention_mask=mask).logits


@pytest.mark.parametrize(
    "fields",
    [
        {"arch": "decoder"},
        {"arch": "decoder", "tie_output": False, "gated": True, "activation": "silu"},
        {"arch": "seq2seq", "tgt_vocab_size": 29},
        {"arch": "encoder", "head": "classification", "num_labels": 3, "pooler": True},
        {"arch": "encoder", "head": "token_classification", "num_labels": 5},
    ],
    ids=["lm", "gated-untied", "seq2seq", "classification", "tagging"],
)
def test_every_linear_map_becomes_int8_and_the_logits_stay_close(fields) -> None:
    model = build_model(tiny_config(**fields)).eval()
    expected = logits(model, fields["arch"])
    embeddings = {n: p.clone() for n, p in model.named_parameters() if "embedding" in n}
    linear_maps = sum(isinstance(m, (nn.Linear, LMHead)) for m in model.modules())
    assert quantize(model, "int8") is model
    assert not any(isinstance(m, (nn.Linear, LMHead)) for m in model.modules())
    assert sum(isinstance(m, QuantizedLinear) for m in model.modules()) == linear_maps
    for name, table in embeddings.items():  # the embedding keeps its float rows, tied or not
        assert torch.equal(model.get_parameter(name), table)
    got = logits(model, fields["arch"])
    assert (got - expected).abs().max() <= CLOSE * expected.abs().max()
    assert model.config.arch == fields["arch"]


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("batch", [2, 6])
def test_a_quantized_lm_computes_its_loss_from_labels(batch: int, smoothing: float) -> None:
    """The cross-entropy of the logits it predicts, in int8 products or not (14 and 42
    rows: on either side of INT8_ROWS)."""
    model = quantize(tiny_lm())
    ids = torch.randint(0, 29, (batch, 7))
    labels = torch.randint(0, 29, (batch, 7))
    labels[0, :3] = -100
    with torch.no_grad():
        loss = model(ids, labels=labels, label_smoothing=smoothing).loss
        logits = model(ids).logits.flatten(0, 1)
        expected = nn.functional.cross_entropy(logits, labels.flatten(), label_smoothing=smoothing)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


def test_generation_and_beam_search_take_the_quantized_model() -> None:
    """A peaked tiny LM decodes the same greedy tokens in int8 as in float32 (its choices are
    no near-ties), and beam search runs on a quantized encoder-decoder."""
    model = tiny_lm(peaked_by=8.0)
    expected = generate(model, PROMPTS, max_new_tokens=10, greedy=True)
    assert generate(quantize(model), PROMPTS, max_new_tokens=10, greedy=True) == expected
    seq2seq = quantize(peaked(3.0, arch="seq2seq", vocab_size=19, tgt_vocab_size=23))
    hypotheses = beam_search(
        seq2seq, torch.randint(3, 19, (2, 6)), bos_id=1, eos_id=2, beam_size=3, max_len=8
    )
    assert len(hypotheses) == 2 and all(len(h) == 1 for h in hypotheses)


@with_cpu_kernels
def test_compiled_quantized_decoding_calls_the_int8_kernel() -> None:
    """On a CPU with the int8 kernel, the compiled float32 products are its calls, and give
    the eager model's tokens (whose products are the kernel's too)."""
    model = quantize(tiny_lm(**COMPILED))
    expected = generate(model, PROMPTS, max_new_tokens=8, greedy=True)
    compiled = CompiledLM(model)
    tokens, code = run_and_get_code(generate, compiled, PROMPTS, max_new_tokens=8, greedy=True)
    assert tokens == expected
    assert "scratchformer.int8_matmul" in "".join(code)


@with_cpu_kernels
def test_an_exported_quantized_step_calls_the_int8_kernel() -> None:
    """Compiled ahead of time (AOTInductor's C++ calls the operator), the same tokens."""
    model = quantize(tiny_lm(**COMPILED))
    lm = ExportedLM(model, rows=len(PROMPTS), context=16)
    assert "scratchformer.int8_matmul" in str(lm.exported(torch.device("cpu")).graph)
    expected = generate(model, PROMPTS, max_new_tokens=8, greedy=True)
    assert generate(lm, PROMPTS, max_new_tokens=8, greedy=True) == expected


@pytest.mark.usefixtures("written_out")
def test_compiled_quantized_decoding_gives_the_eager_quantized_tokens() -> None:
    """Without the int8 kernel, one row a step: the compiled float32 products unpack the
    int8 words as they run (shifts in the generated code), rather than reading weights
    folded into float32."""
    model = quantize(tiny_lm(**COMPILED))
    prompt = PROMPTS[:1]
    expected = generate(model, prompt, max_new_tokens=8, greedy=True)
    compiled = CompiledLM(model)
    tokens, code = run_and_get_code(generate, compiled, prompt, max_new_tokens=8, greedy=True)
    assert tokens == expected
    assert "<<" in "".join(code)


def test_compiled_under_bfloat16_autocast_the_int8_weights_reach_an_int8_kernel() -> None:
    """In bfloat16 the compiler keeps the int8 weights rather than folding them into float
    constants, and its weight-only int8 product gives the eager model's tokens."""
    model = quantize(tiny_lm(**COMPILED))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = generate(model, PROMPTS, max_new_tokens=8, greedy=True)
        matched = counters["inductor"]["woq_matcher_count"]
        assert generate(CompiledLM(model), PROMPTS, max_new_tokens=8, greedy=True) == expected
    linear_maps = sum(isinstance(m, QuantizedLinear) for m in model.modules())
    assert counters["inductor"]["woq_matcher_count"] - matched >= linear_maps


def test_a_shared_map_stays_shared_and_quantizing_twice_changes_nothing() -> None:
    shared = nn.Linear(8, 8)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    quantize(model)
    assert isinstance(model[0], QuantizedLinear) and model[0] is model[2]
    state = copy.deepcopy(model.state_dict())
    quantize(model)
    assert all(torch.equal(state[name], value) for name, value in model.state_dict().items())
    assert isinstance(quantize(nn.Linear(4, 4)), QuantizedLinear)  # a map alone comes back


def test_a_lora_model_is_refused_untouched_and_an_unknown_quantization_too() -> None:
    model = apply_lora(build_model(tiny_config(arch="decoder")), TrainConfig(lora_rank=2))
    before = [type(m) for m in model.modules()]
    with pytest.raises(ValueError, match="LoRA adapters: merge them"):
        quantize(model)
    assert [type(m) for m in model.modules()] == before
    with pytest.raises(ValueError, match="quantization='int4' must be one of int8"):
        quantize(tiny_lm(), "int4")
