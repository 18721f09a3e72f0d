"""The benchmarks' report (``benchmarks/workloads/report.py``): a row holds a figure of
every candidate it names, so that a candidate this CPU does not run (bf16 without native
bf16) is left out where the row is made, not found missing while it is printed."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_a_row_refuses_a_variant_without_a_figure(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from workloads.report import Figure, Row, Target

    figures = [Figure("ours", 2.0, "tokens/s"), Figure("HF", 1.0, "tokens/s")]
    row = Row("generate", "batch 1", "", figures, [Target("HF", 1.5)], variants=())
    assert row.ratio(row.targets[0]) == 2.0
    with pytest.raises(ValueError, match="generate batch 1: no figure of ours compiled bf16"):
        Row("generate", "batch 1", "", figures, [], variants=("ours compiled bf16",))
