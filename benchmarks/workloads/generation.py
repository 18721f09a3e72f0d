"""The ``generate`` workload: greedy generation with the KV cache against Hugging Face and,
at batch 1, llama.cpp (f32 and q8_0, where ``llama-cpp-python`` is installed); ours compiled
(``CompiledLM``) as variants: fp32, bf16 (on CPUs with native bf16) and int8 weights (in
bf16 on those CPUs); and ours with the decoding step compiled ahead of time (``ExportedLM``),
fp32 and int8."""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

import generate as gen
from scratchformer.inference import quantize
from scratchformer.models import LMHead
from scratchformer.nn import QuantizedLinear
from workloads.flops import decoding_bytes, per_second
from workloads.report import Figure, Row, Settings, Target, precision_of, print_row

GENERATE_TARGETS = {1: 3.0, 8: 1.5}
"""Batch size: the least speed-up of ours with the KV cache over Hugging Face."""
INT8_FORMS = (gen.QUANTIZED, gen.INT8_EXPORTED, gen.INT8_EXPORTED_FP32)
"""Our int8 candidates: compiled (``CompiledLM``) and exported (``ExportedLM``), and on a
CPU with native bf16, exported in fp32 too."""


def int8_targets(batch: int, of: str) -> list[Target]:
    """The least speed-ups of ``of``, ours with int8 weights: over ours compiled in fp32,
    2x where int8 feeds native bf16 products, 1.8x for fp32 products, at batch 1 (1.5x at 8); at
    batch 1, 5x Hugging Face and at least llama.cpp's speed with its int8 weights, q8_0,
    where its binding is installed."""
    if batch != 1:
        return [Target(gen.COMPILED, 1.5, of=of)]
    return [
        Target(gen.COMPILED, 2.0 if gen.BF16 and of != gen.INT8_EXPORTED_FP32 else 1.8, of=of),
        Target(gen.HF, 5.0, of=of),
        *([Target(gen.LLAMA_Q8, 1.0, of=of)] if gen.LLAMA_CPP else []),
    ]


Q8_0_BYTES = 34 / 32
"""Bytes a weight of llama.cpp's q8_0: blocks of 32 int8 values and an fp16 scale."""
COMPILED_VARIANTS = (
    gen.COMPILED,
    gen.BF16_COMPILED,
    gen.QUANTIZED,
    gen.EXPORTED,
    gen.INT8_EXPORTED,
    gen.INT8_EXPORTED_FP32,
)
"""Our compiled candidates, the variants of the row: those of them that ran (the bf16 one
runs on native-bf16 CPUs only)."""


def generation(settings: Settings) -> list[Row]:
    """Greedy generation through ``benchmarks/generate.py``: its models, prompts and
    checked, interleaved runs; ours without the cache is left to that script. The
    compiled variant's note gives its warm-up, which compiles."""
    repeats = settings.repeats_or(3, quick=1)
    cfg = gen.Config(settings.new_tokens, repeats, 0, settings.threads, settings.compile)
    torch.manual_seed(0)
    mine, theirs = gen.our_model(), gen.hf_model()
    description = (
        f"{gen.N_LAYERS} layers, d_model {gen.D_MODEL}, {gen.N_HEADS} heads, d_ff {gen.D_FF}, "
        f"vocab {gen.VOCAB}, GELU tanh, {gen.MAX_LEN} positions; prompt {cfg.prompt_len}, "
        f"{cfg.new_tokens} new tokens a row, greedy, never stopped early"
    )
    fp32_bytes = matmul_weight_bytes(mine)
    int8_bytes = matmul_weight_bytes(quantize(copy.deepcopy(mine)))
    weight_bytes = {
        gen.BF16_COMPILED: fp32_bytes // 2,
        gen.QUANTIZED: int8_bytes,
        gen.INT8_EXPORTED: int8_bytes,
        gen.INT8_EXPORTED_FP32: int8_bytes,
        gen.LLAMA_Q8: round(fp32_bytes / 4 * Q8_0_BYTES),
    }
    rows = []
    for batch, bound in GENERATE_TARGETS.items():
        results = gen.run_batch(cfg, batch, mine, theirs)
        figures = [
            Figure(
                r.candidate,
                r.tokens_per_s,
                "tokens/s",
                r.timing,
                gbytes_per_s=per_second(
                    bytes_read(r, weight_bytes.get(r.candidate, fp32_bytes)), r.timing
                ),
                note=note(r, results[0].tokens),
                precision=precision_of(r.candidate, gen.BF16),
            )
            for r in results
        ]
        rows.append(
            Row(
                "generate",
                f"batch {batch}",
                description,
                figures,
                [
                    Target(gen.HF, bound),
                    *(t for of in INT8_FORMS if settings.compile for t in int8_targets(batch, of)),
                ],
                ours=gen.CACHED,
                variants=tuple(v for v in COMPILED_VARIANTS if v in {f.candidate for f in figures}),
                machine=settings.machine,
                remark=""
                if gen.BF16 or not settings.compile
                else f"{gen.BF16_COMPILED}: not run, this CPU has no native bf16",
            )
        )
        print_row(rows[-1])
    return rows


def matmul_weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights a decoding step multiplies by: every linear map's and the LM
    head's (a tied head's once), with an int8 map's scales; embeddings are looked up a
    row a token and are not counted."""
    maps = {
        id(module): module
        for module in model.modules()
        if isinstance(module, nn.Linear | LMHead | QuantizedLinear)
    }
    tensors = [getattr(m, name, None) for m in maps.values() for name in ("weight", "scales")]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, Tensor))


def bytes_read(result: gen.Result, weight_bytes: int) -> int:
    """Bytes read to generate ``result``'s tokens: the matmul weights (``weight_bytes``,
    see :func:`matmul_weight_bytes`) once a step, and the KV cache (see
    :func:`decoding_bytes`, in bfloat16 for a candidate in bfloat16 autocast). The prompt's
    step counts as one."""
    lengths = range(gen.PROMPT_LEN, gen.PROMPT_LEN + result.new_tokens)
    cache_bytes = 2 if precision_of(result.candidate, gen.BF16) == "bf16" else 4
    return decoding_bytes(
        weight_bytes, gen.N_LAYERS, gen.D_MODEL, result.batch, lengths, cache_bytes
    )


def note(result: gen.Result, ours: list[list[int]]) -> str:
    """What a candidate did; for the compiled ones, how long the warm-up (compiling) took;
    for llama.cpp's, how many of its first tokens are ``ours`` (eager, fp32: random weights
    give close logits, so that rounding may pick another token, and greedy text goes its
    own way after it)."""
    done = f"{result.batch} x {result.new_tokens} new tokens, all generated"
    if result.candidate in (gen.LLAMA_F32, gen.LLAMA_Q8):
        pairs = zip(result.tokens[0], ours[0], strict=True)
        same = next((i for i, (a, b) in enumerate(pairs) if a != b), result.new_tokens)
        return f"{done}; the first {same} ours"
    if result.candidate not in COMPILED_VARIANTS:
        return done
    return f"{done}; warm-up (compiling) {result.warmup_s:.1f} s"
