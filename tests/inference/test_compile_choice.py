"""Whether to compile: the arithmetic of the choice, the ledger of measurements it reads,
and where compiled code is kept."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import tiny_lm
from scratchformer import caches
from scratchformer.caches import compiled_code_dir, cpu_key
from scratchformer.inference import compile_choice
from scratchformer.inference.compile_choice import Costs, choose, job_key, measured, remember


def test_the_flags_decide_without_measurements() -> None:
    assert choose("always", "k", 1.0).compile
    assert not choose("never", "k", 1e9).compile
    with pytest.raises(ValueError, match="compile='sometimes'"):
        choose("sometimes", "k", 1.0)


def test_a_job_never_run_here_runs_eagerly_whatever_its_size() -> None:
    choice = choose("auto", "unseen", 1e12)
    assert not choice.compile
    assert "not run here before" in choice.reason


@pytest.mark.parametrize(
    ("costs", "units", "compiles"),
    [
        # eager 0.01 s/unit; cold compile unmeasured (300 s), speed-up unmeasured (1.5x):
        # pays once 300 + 0.01 u / 1.5 < 0.01 u, i.e. u > 90,000
        (Costs(eager_per_unit=0.01), 89_000, False),
        (Costs(eager_per_unit=0.01), 91_000, True),
        # measured: compile 20 s warm, compiled 0.005 s/unit (2x): pays once u > 4,000
        (Costs(0.01, 0.005, compile_cold=200.0, compile_warm=20.0), 3_900, False),
        (Costs(0.01, 0.005, compile_cold=200.0, compile_warm=20.0), 4_100, True),
        # only a cold compilation measured: 200 s at 2x pays once u > 40,000
        (Costs(0.01, 0.005, compile_cold=200.0), 39_000, False),
        (Costs(0.01, 0.005, compile_cold=200.0), 41_000, True),
        # compiled steps slower than eager: never
        (Costs(0.01, 0.02, compile_warm=0.0), 1e9, False),
    ],
)
def test_auto_compiles_exactly_when_the_measured_figures_say_it_pays(
    costs: Costs, units: float, compiles: bool
) -> None:
    remember("job", **vars(costs))
    choice = choose("auto", "job", units)
    assert choice.compile is compiles, choice.reason


def test_a_run_records_its_eager_rate_and_a_compiled_one_its_compilation(
    monkeypatch, capsys
) -> None:
    clock = iter([100.0, 104.0, 200.0, 203.0])
    monkeypatch.setattr(compile_choice.time, "perf_counter", lambda: next(clock))
    with measured(choose("never", "job", 400.0)):
        pass
    assert compile_choice.read_ledger()["job"] == Costs(eager_per_unit=0.01, last_units=400.0)
    # two seconds of compiling in the job: three graphs, all of them from Inductor's cache
    counts = iter([(5.0, 1, 1), (7.0, 4, 4), (0.0, 0, 0), (4.0, 3, 1)])
    monkeypatch.setattr(compile_choice, "compile_counts", lambda: next(counts))
    with measured(choose("always", "job", 1_000.0), done=lambda: 100.0):  # ended early
        pass
    assert compile_choice.read_ledger()["job"] == Costs(
        0.01, 0.01, compile_warm=2.0, last_units=100.0
    )
    clock = iter([0.0, 5.0])
    monkeypatch.setattr(compile_choice.time, "perf_counter", lambda: next(clock))
    with measured(choose("always", "job", 100.0), verbose=True):  # two graphs compiled anew
        pass
    assert compile_choice.read_ledger()["job"] == Costs(0.01, 0.01, 4.0, 2.0, last_units=100.0)
    assert capsys.readouterr().err == "compiled 3 graphs in 4.0 s (1 from the cache)\n"


def test_a_failed_job_records_nothing() -> None:
    with pytest.raises(RuntimeError), measured(choose("never", "job", 10.0)):
        raise RuntimeError
    assert compile_choice.read_ledger() == {}


def test_an_unreadable_ledger_is_no_advice_and_is_replaced() -> None:
    compile_choice.ledger_path().write_text("{not json")
    assert compile_choice.read_ledger() == {}
    remember("job", eager_per_unit=1.0)
    assert compile_choice.read_ledger() == {"job": Costs(eager_per_unit=1.0)}


def test_the_key_tells_models_commands_and_settings_apart() -> None:
    small, wide = tiny_lm("rotary", n_layers=1), tiny_lm("rotary", n_layers=2)
    keys = {
        job_key(small, "generate"),
        job_key(wide, "generate"),
        job_key(small, "translate"),
        job_key(small, "translate", beam=5),
    }
    assert len(keys) == 4
    assert job_key(small, "generate") == job_key(tiny_lm("rotary", n_layers=1), "generate")


def test_compiled_code_is_kept_in_the_users_cache_unless_torch_is_told(
    monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    ours = compiled_code_dir()
    assert ours.parent == tmp_path / "xdg/scratchformer/inductor"
    assert ours.name == cpu_key()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(ours)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compiled_code_dir() == tmp_path / "mine"


def test_each_instruction_set_has_its_own_compiled_code(monkeypatch, tmp_path: Path) -> None:
    """Code compiled for AVX-512 is not read where torch runs AVX2 kernels, nor on
    another processor (Inductor's cache does not tell them apart)."""
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    native = cpu_key()
    assert cpu_key() == native
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    avx2 = cpu_key()
    assert avx2 != native
    other = tmp_path / "cpuinfo"
    other.write_text("processor\t: 0\nmodel name\t: Another CPU\nflags\t\t: fpu sse2 avx2\n")
    monkeypatch.setattr(caches, "CPU_INFO", other)
    assert cpu_key() not in {native, avx2}
