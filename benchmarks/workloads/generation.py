"""The ``generate`` workload: greedy generation with the KV cache against Hugging Face, and
ours compiled (``CompiledLM``) as a variant."""

from __future__ import annotations

import torch

import generate as gen
from workloads.flops import decoding_bytes, layer_matmul_params, per_second
from workloads.report import Figure, Row, Settings, Target, print_row

GENERATE_TARGETS = {1: 3.0, 8: 1.5}
"""Batch size: the least speed-up of ours with the KV cache over Hugging Face."""


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
                gbytes_per_s=per_second(bytes_read(r, 4), r.timing),
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
                [Target(gen.HF, bound)],
                ours=gen.CACHED,
                variants=(gen.COMPILED,) if settings.compile else (),
                machine=settings.machine,
            )
        )
        print_row(rows[-1])
    return rows


def bytes_read(result: gen.Result, weight_bytes: float) -> int:
    """Bytes read to generate ``result``'s tokens, with ``weight_bytes`` bytes a weight: the
    matmul weights (the layers' and the tied head's) once a step, and the KV cache (see
    :func:`decoding_bytes`); the prompt's step counts as one."""
    weights = gen.N_LAYERS * layer_matmul_params(gen.D_MODEL, gen.D_FF) + gen.VOCAB * gen.D_MODEL
    prompt = gen.PROMPT_LEN
    lengths = range(prompt, prompt + result.new_tokens)
    return decoding_bytes(
        int(weights * weight_bytes), gen.N_LAYERS, gen.D_MODEL, result.batch, lengths
    )


def note(result: gen.Result) -> str:
    """What a candidate did; for the compiled one, how long its warm-up (compiling) took."""
    done = f"{result.batch} x {result.new_tokens} new tokens, all generated"
    if result.candidate != gen.COMPILED:
        return done
    return f"{done}; warm-up (compiling) {result.warmup_s:.1f} s"
