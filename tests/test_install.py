"""`make demo` installs the package alone, and the demo runs on it: neither the `dev` extra
(test tools, Hugging Face, llama.cpp, which compiles for minutes) nor the `export` extra is
needed before a newcomer sees a model learn. The demo's one test is here."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

from scratchformer.config import tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]


def distribution(requirement: str) -> str:
    """The normalised distribution name of a requirement (``llama-cpp-python>=0.3``)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def optional_distributions() -> set[str]:
    """Every distribution that only the extras bring, this package's own extras unfolded."""
    names = set()
    for requirements in PROJECT["optional-dependencies"].values():
        names |= {distribution(r) for r in requirements if not r.startswith(PROJECT["name"])}
    return names


def test_make_demo_installs_no_extra(tmp_path: Path) -> None:
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    planned = subprocess.run(
        ["make", "-n", "demo"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    installs = [line for line in planned.splitlines() if "pip install" in line]
    assert installs, f"make demo installs nothing:\n{planned}"
    assert all("[" not in line for line in installs), f"make demo installs an extra:\n{planned}"


def test_no_runtime_dependency_is_an_extra() -> None:
    runtime = {distribution(r) for r in PROJECT["dependencies"]}
    assert not runtime & optional_distributions()


def test_the_demo_trains_decodes_and_draws_with_no_extra(tmp_path: Path) -> None:
    """The demo, made short, runs with every module of the extras' distributions refused."""
    optional = optional_distributions()
    refused = sorted(
        module
        for module, owners in packages_distributions().items()
        if all(distribution(owner) in optional for owner in owners)
    )
    assert "llama_cpp" in refused and "transformers" in refused  # the extras are installed
    out = tmp_path / "demo"
    script = f"""
import sys

for name in {refused!r}:
    sys.modules[name] = None  # import raises ModuleNotFoundError; find_spec answers None
from scratchformer import cli, demo

demo.DEMO_RECIPE = {{
    **demo.DEMO_RECIPE,
    "data": {{**demo.DEMO_RECIPE["data"], "synthetic_train_size": 640, "synthetic_val_size": 32}},
    "train": {{**demo.DEMO_RECIPE["train"], "max_steps": 20, "eval_every": 10}},
}}
sys.exit(cli.main(["demo", "--out", {str(out)!r}]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Exact match on" in done.stdout and "greedy" in done.stdout and "beam 4" in done.stdout
    assert (out / "attention.png").stat().st_size > 1000
