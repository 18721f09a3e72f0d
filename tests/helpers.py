"""Small helpers shared by tests."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import torch

from scratchformer import ModelConfig, build_model
from scratchformer.cli import main


def set_options(settings: Iterable[str]) -> list[str]:
    """``["a.b=1", "c.d=2"]`` -> ``["--set", "a.b=1", "--set", "c.d=2"]``."""
    return [part for setting in settings for part in ("--set", setting)]


RECIPES = Path(__file__).resolve().parents[1] / "recipes"
TINY = [
    "model.d_model=32",
    "model.d_ff=64",
    "model.n_layers=1",
    "train.max_steps=6",
    "train.eval_every=3",
    "train.batch_size=4",
]


def train(run_dir: Path, recipe: str, *settings: str) -> None:
    args = ["--quiet", "train", str(RECIPES / recipe), "--out", str(run_dir)]
    assert main([*args, *set_options([*TINY, *settings])]) == 0


def run(capsys, monkeypatch, stdin: str, *args: str) -> tuple[int, list[str], str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    capsys.readouterr()
    status = main(["--quiet", *args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


def decoder(**overrides) -> torch.nn.Module:
    """A small random decoder-only LM (tied output), ``overrides`` of its config applied."""
    values = dict(arch="decoder", vocab_size=30, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    return build_model(ModelConfig(**{**values, **overrides}))


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


TINY_SIZES = {"d_model": 32, "n_heads": 4, "n_layers": 2, "d_ff": 64, "tie_output": False}
"""The sizes of the tiny models of the decoding tests (an untied head, to be scaled)."""
TINY_VOCAB = 29
PROMPTS = [[5, 9, 2], [7], [3, 1, 4, 1, 5, 9], [8, 8]]
"""Prompts of different lengths, for generation from :func:`tiny_lm`."""


def peaked(config: ModelConfig, scale: float) -> torch.nn.Module:
    """A random model of ``config`` in eval mode whose output weights are scaled by
    ``scale``, so that its next-token distributions are peaked and greedy decisions are not
    near-ties."""
    model = build_model(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def tiny_lm(positional: str = "learned", peaked_by: float = 4.0) -> torch.nn.Module:
    """A small random decoder-only LM with peaked output distributions (:func:`peaked`)."""
    config = ModelConfig(
        arch="decoder", vocab_size=TINY_VOCAB, positional=positional, max_len=32, **TINY_SIZES
    )
    return peaked(config, peaked_by)
