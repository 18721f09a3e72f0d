"""Importing the command line, and asking it for help, loads no torch: the package exports
its names lazily and the commands import what they use when they run."""

from __future__ import annotations

import json
import subprocess
import sys

import scratchformer

HEAVY = ("torch", "transformers", "safetensors", "tokenizers", "matplotlib")

PROBE = f"""
import contextlib, io, json, sys
import scratchformer.cli as cli

for argv in [["--help"], *([command.name, "--help"] for command in cli.commands())]:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.build_parser().parse_args(argv)
        except SystemExit as done:
            assert done.code == 0, (argv, done.code)
print(json.dumps(sorted(name for name in {HEAVY!r} if name in sys.modules)))
"""


def test_the_cli_and_every_help_load_no_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_a_heavy_import_is_seen() -> None:
    """The probe can fail: a command that imports its handler loads torch."""
    probe = PROBE.replace(
        "print(", "cli.COMMANDS[0].handler()\nprint(", 1
    )  # the train command's module
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "torch" in json.loads(done.stdout)


def test_every_exported_name_resolves_and_is_listed() -> None:
    for name in scratchformer.__all__:
        assert getattr(scratchformer, name) is not None, name
    assert set(scratchformer.__all__) <= set(dir(scratchformer))
    assert scratchformer.DecoderModel.__module__ == "scratchformer.models.decoder"
