"""The ``generate`` workload: greedy generation with the KV cache against Hugging Face, and
ours compiled (``CompiledLM``) as a variant."""

from __future__ import annotations

import torch

import generate as gen
from workloads.flops import decoding_bytes, layer_matmul_params, per_second
from workloads.report import Figure, Row, Settings, Target, print_row

GENERATE_TARGETS = {1: 3.0, 8: 1.5}
"""Batch size: the least speed-up of ours with the KV cache over Hugging Face."""
INT8_TARGETS = {
    1: [Target(gen.COMPILED, 2.0, of=gen.QUANTIZED), Target(gen.HF, 5.0, of=gen.QUANTIZED)],
    8: [Target(gen.COMPILED, 1.5, of=gen.QUANTIZED)],
}
"""Batch size: the least speed-ups of ours with int8 weights, compiled."""


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
    rows = []
    for batch, bound in GENERATE_TARGETS.items():
        results = gen.run_batch(cfg, batch, mine, theirs)
        figures = [
            Figure(
                r.candidate,
                r.tokens_per_s,
                "tokens/s",
                r.timing,
                gbytes_per_s=per_second(bytes_read(r), r.timing),
                note=note(r),
            )
            for r in results
        ]
        rows.append(
            Row(
                "generate",
                f"batch {batch}",
                description,
                figures,
                [Target(gen.HF, bound), *(INT8_TARGETS[batch] if settings.compile else [])],
                ours=gen.CACHED,
                variants=(gen.COMPILED, gen.QUANTIZED) if settings.compile else (),
                machine=settings.machine,
            )
        )
        print_row(rows[-1])
    return rows


def bytes_read(result: gen.Result) -> int:
    """Bytes read to generate ``result``'s tokens: the matmul weights (the layers' and the
    tied head's) once a step, 4 bytes each, or for int8 1 byte each and a 4-byte scale per
    output row; and the KV cache (see :func:`decoding_bytes`). The prompt's step counts as
    one."""
    d, d_ff = gen.D_MODEL, gen.D_FF
    weights = gen.N_LAYERS * layer_matmul_params(d, d_ff) + gen.VOCAB * d
    rows = gen.N_LAYERS * (4 * d + d_ff + d) + gen.VOCAB
    weight_bytes = weights + 4 * rows if result.candidate == gen.QUANTIZED else 4 * weights
    lengths = range(gen.PROMPT_LEN, gen.PROMPT_LEN + result.new_tokens)
    return decoding_bytes(weight_bytes, gen.N_LAYERS, d, result.batch, lengths)


def note(result: gen.Result) -> str:
    """What a candidate did; for the compiled ones, how long the warm-up (compiling) took."""
    done = f"{result.batch} x {result.new_tokens} new tokens, all generated"
    if result.candidate not in (gen.COMPILED, gen.QUANTIZED):
        return done
    return f"{done}; warm-up (compiling) {result.warmup_s:.1f} s"
