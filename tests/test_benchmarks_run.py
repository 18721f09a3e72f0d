"""Every workload of ``benchmarks/speed.py`` runs to its end in ``--quick`` mode, on this
CPU and as an AVX2 CPU without native bf16 (``ATEN_CPU_CAPABILITY=avx2``: torch's and
Inductor's AVX2 kernels, bf16 not native), so that ``make bench`` works on both kinds of
machine the project meets, whichever runs the tests; and so does ``benchmarks/serve.py``.

Minutes of work: marked ``bench``, out of ``make test``, run by ``make bench-check`` (CI's
second step), a thread a run, so that the runs on every core do not crowd each other.
Compilation is disabled (``TORCH_COMPILE_DISABLE=1``: the compiled candidates run
eagerly): what rots in a benchmark is its own code (candidates, rows, targets, the
report), while what compiling computes is the compiled tests' to hold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SPEED = Path(__file__).resolve().parents[1] / "benchmarks" / "speed.py"
SERVE = SPEED.parent / "serve.py"
WORKLOADS = (
    "lm-train",
    "seq2seq-train",
    "generate",
    "encoder-infer",
    "onnx-infer",
    "translate",
    "memory",
    "jobs",
)
ISAS = {"this CPU": {}, "AVX2": {"ATEN_CPU_CAPABILITY": "avx2"}}


def test_the_list_is_speed_py_s() -> None:
    listed = subprocess.run(
        [sys.executable, str(SPEED), "--help"], capture_output=True, text=True, check=True
    )
    assert all(name in listed.stdout for name in WORKLOADS)
    assert "{" + ",".join(WORKLOADS) + "}" in listed.stdout


@pytest.mark.bench
@pytest.mark.parametrize("isa", list(ISAS))
@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_workload_runs_quick(workload: str, isa: str, tmp_path: Path) -> None:
    env = {**os.environ, **ISAS[isa], "TORCH_COMPILE_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    command = [sys.executable, str(SPEED), "--quick", "--workload", workload, "--threads", "1"]
    command += ["--json", str(tmp_path / "rows.json")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "rows.json").stat().st_size > 0
    if isa == "AVX2":
        assert "AVX2" in result.stdout


@pytest.mark.bench
def test_the_serving_benchmark_runs_quick() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(SERVE), "--quick", "--no-compile", "--threads", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for endpoint in ("completions", "classify"):
        assert f"{endpoint}, concurrency 32: " in result.stdout
    assert "GET /health at concurrency 32" in result.stdout
    assert "the answers with the prefix cache equal those without" in result.stdout
    assert "prefix, concurrency 32: mean time to first token" in result.stdout


@pytest.mark.bench
def test_the_grammar_benchmark_runs_quick() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(SPEED.parent / "grammar.py"), "--quick", "--threads", "1"]
    command += ["--new-tokens", "8"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "batch 8: decoding step" in result.stdout
    assert "constrained step at most" in result.stdout
