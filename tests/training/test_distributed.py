"""torchrun with 2 CPU processes (gloo): one step with batch b on each rank gives the same
weights as one step with batch 2b in a single process. And the check for native bfloat16.

Adam's first step is about ``lr * sign(gradient)``, which magnifies the rounding
differences of summing a batch in two halves for gradients near zero; lr 1e-4 keeps those
under 1e-6 while a wrong split of the data would move weights by ~1e-4."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import RECIPES, set_options
from scratchformer.device import (
    CPU,
    CPU_BF16_PROBES,
    bf16_autocast,
    native_bf16,
    uses_bf16,
)

RECIPE = RECIPES / "shakespeare-char.toml"
SETTINGS = [
    "model.n_layers=2",
    "model.d_model=64",
    "model.d_ff=128",
    "train.max_steps=1",
    "train.eval_batches=1",
    "train.warmup_steps=0",
    "train.schedule=constant",
    "train.lr=1e-4",
]


def train(launcher: list[str], out: Path, batch_size: int) -> dict[str, torch.Tensor]:
    sets = set_options([*SETTINGS, f"train.batch_size={batch_size}"])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [*launcher, "scratchformer", "--quiet", "train", str(RECIPE), "--out", str(out)]
    result = subprocess.run([*command, *sets], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return load_file(out / "checkpoints" / "step-00000001" / "model.safetensors")


def test_two_ranks_with_batch_b_equal_one_rank_with_batch_2b(tmp_path: Path, data_dir) -> None:
    single = train([sys.executable, "-m"], tmp_path / "one", batch_size=8)
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
    ]
    double = train(torchrun, tmp_path / "two", batch_size=4)
    assert single.keys() == double.keys()
    for name in single:
        torch.testing.assert_close(double[name], single[name], atol=1e-6, rtol=0, msg=name)
    half = train([sys.executable, "-m"], tmp_path / "half", batch_size=4)  # the control
    assert max((half[k] - single[k]).abs().max().item() for k in single) > 1e-5


def test_world_size_without_rank_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "WORLD_SIZE": "2"}
    env.pop("RANK", None)
    command = [sys.executable, "-m", "scratchformer", "train", str(RECIPE), "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("scratchformer: error: WORLD_SIZE is set but RANK is not")


def test_when_rank_0_cannot_start_the_others_stop_too(tmp_path: Path) -> None:
    """Rank 0 alone reads the recipe: its error must not leave rank 1 waiting at a barrier
    until the process group times out (30 minutes)."""
    recipe = tmp_path / "broken.toml"
    recipe.write_text('task = "lm"\n[data]\ntrain = "no-such-file.txt"\n')
    command = [
        sys.executable,
        *("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"),
        *("-m", "scratchformer", "--quiet", "train", str(recipe), "--out", str(tmp_path / "r")),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode != 0
    assert "no-such-file.txt" in result.stderr
    assert "rank 0 could not start the run" in result.stderr


@pytest.mark.parametrize("answers", [(False, False), (True, False), (False, True)])
def test_native_bf16_reads_the_cpu_probes(monkeypatch: pytest.MonkeyPatch, answers) -> None:
    for name, answer in zip(CPU_BF16_PROBES, answers, strict=True):
        monkeypatch.setattr(torch.cpu, name, lambda answer=answer: answer)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert native_bf16(torch.device("cpu")) is any(answers)


@pytest.mark.parametrize("capability", ["AVX2", "DEFAULT"])
def test_native_bf16_is_false_where_torch_runs_kernels_below_avx512(
    monkeypatch: pytest.MonkeyPatch, capability: str
) -> None:
    for name in CPU_BF16_PROBES:
        monkeypatch.setattr(torch.cpu, name, lambda: True)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert native_bf16(torch.device("cpu")) is False


def test_native_bf16_is_false_on_a_torch_without_the_private_cpu_probes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in CPU_BF16_PROBES:
        monkeypatch.delattr(torch.cpu, name)
    assert native_bf16(torch.device("cpu")) is False


@pytest.mark.parametrize("native", [True, False])
def test_a_precision_computes_in_bf16_where_it_says_and_warns_where_emulated(
    monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    monkeypatch.setattr("scratchformer.device.native_bf16", lambda device: native)
    assert uses_bf16("fp32", CPU) is False
    assert uses_bf16("auto", CPU) is native
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert uses_bf16("bf16", CPU) is True
        assert uses_bf16("bf16", CPU, warn=False) is True
    assert len(caught) == (0 if native else 1)
    with bf16_autocast(CPU, True):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    with bf16_autocast(CPU, False):
        assert not torch.is_autocast_enabled("cpu")
