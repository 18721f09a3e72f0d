"""The ``generate`` workload: greedy generation with the KV cache against Hugging Face."""

from __future__ import annotations

import torch

import generate as gen
from workloads.report import Figure, Row, Settings, Target, print_row

GENERATE_TARGETS = {1: 3.0, 8: 1.5}
"""Batch size: the least speed-up of ours with the KV cache over Hugging Face."""


def generation(settings: Settings) -> list[Row]:
    """Greedy generation through ``benchmarks/generate.py``: its models, prompts and
    checked, interleaved runs; ours without the cache is left to that script."""
    cfg = gen.Config(settings.new_tokens, settings.repeats_or(3, quick=1), 0, settings.threads)
    torch.manual_seed(0)
    mine, theirs = gen.our_model(), gen.hf_model()
    description = (
        f"{gen.N_LAYERS} layers, d_model {gen.D_MODEL}, {gen.N_HEADS} heads, d_ff {gen.D_FF}, "
        f"vocab {gen.VOCAB}, GELU tanh, {gen.MAX_LEN} positions; prompt {cfg.prompt_len}, "
        f"{cfg.new_tokens} new tokens a row, greedy, never stopped early"
    )
    rows = []
    for batch, bound in GENERATE_TARGETS.items():
        figures = [
            Figure(
                r.candidate,
                r.tokens_per_s,
                "tokens/s",
                r.timing,
                note=f"{batch} x {r.new_tokens} new tokens, all generated",
            )
            for r in gen.run_batch(cfg, batch, mine, theirs)
        ]
        rows.append(
            Row(
                "generate",
                f"batch {batch}",
                description,
                figures,
                [Target(gen.HF, bound)],
                ours=gen.CACHED,
            )
        )
        print_row(rows[-1])
    return rows
