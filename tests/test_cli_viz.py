"""``attention``, ``plot`` and ``plot-pe``: pictures and pages from run directories."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib.image

from helpers import run


def picture(path: Path):
    pixels = matplotlib.image.imread(path)
    assert pixels[..., :3].std() > 0.05, "not a blank picture"
    return pixels


def test_attention_png_of_a_translation_model(copy_run, tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "attn.png"
    status, lines, err = run(
        capsys, monkeypatch, "", "attention", str(copy_run), "12345", "--out", str(out)
    )
    assert status == 0, err
    assert re.fullmatch(rf"{out}: cross attention, \d+ query x 6 key tokens", lines[0])
    grid = picture(out)  # 1 layer x 2 heads, side by side
    status, _, _ = run(
        capsys,
        monkeypatch,
        "",
        "attention",
        str(copy_run),
        "12345",
        "--target",
        "54321",
        "--kind",
        "encoder",
        "--layer",
        "0",
        "--head",
        "1",
        "--out",
        str(out),
    )
    assert status == 0
    single = picture(out)
    assert single.shape[1] < grid.shape[1]


def test_attention_html_is_one_self_contained_page(copy_run, tmp_path, capsys, monkeypatch):
    out = tmp_path / "attn.html"
    status, _, err = run(
        capsys, monkeypatch, "", "attention", str(copy_run), "907", "--out", str(out)
    )
    assert status == 0, err
    page = out.read_text(encoding="utf-8")
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page)
    data = re.search(r'<script type="application/json" id="attention-data">(.*?)</script>', page)
    assert data and {"encoder", "decoder", "cross"} <= set(json.loads(data.group(1))["attention"])


def test_attention_of_a_masked_lm_run(mlm_run, tmp_path, capsys, monkeypatch) -> None:
    """``[CLS] text [SEP]`` with the mask token in place, cut to ``data.max_len`` (32)."""
    png, page = tmp_path / "attn.png", tmp_path / "attn.html"
    text = "the cat [MASK] on the mat ."
    status, lines, err = run(
        capsys, monkeypatch, "", "attention", str(mlm_run), text, "--out", str(png)
    )
    assert status == 0, err
    assert re.fullmatch(rf"{png}: encoder attention, (\d+) query x \1 key tokens", lines[0])
    picture(png)
    for words, length in [(text, None), (" ".join([text] * 10), 32)]:
        status, _, err = run(
            capsys, monkeypatch, "", "attention", str(mlm_run), words, "--out", str(page)
        )
        assert status == 0, err
        html = page.read_text(encoding="utf-8")
        data = re.search(
            r'<script type="application/json" id="attention-data">(.*?)</script>', html
        )
        encoder = json.loads(data.group(1))["attention"]["encoder"]
        tokens = encoder["queries"]
        assert tokens == encoder["keys"] and "[MASK]" in tokens
        assert tokens[0] == "[CLS]" and tokens.index("[SEP]") == len(tokens) - 1
        assert length is None or len(tokens) == length


def test_attention_mistakes_are_one_line_errors(copy_run, tmp_path, capsys, monkeypatch):
    cases = [
        (["--out", str(tmp_path / "a.jpg")], "the picture's name must end in .png, .svg, .pdf"),
        (["--layer", "3", "--out", str(tmp_path / "a.png")], "layer=3 is out of range"),
        (["--kind", "cross", "--out", str(tmp_path / "a.png")], None),
    ]
    for extra, message in cases:
        status, _, err = run(capsys, monkeypatch, "", "attention", str(copy_run), "1", *extra)
        if message is None:
            assert status == 0
        else:
            assert status == 2 and err.count("\n") == 1 and message in err
    status, _, err = run(
        capsys, monkeypatch, "", "attention", str(tmp_path), "1", "--out", str(tmp_path / "a.png")
    )
    assert status == 2 and "holds no trained model" in err


def test_plot_draws_the_curves_of_a_run(copy_run, tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "curves.png"
    status, lines, err = run(capsys, monkeypatch, "", "plot", str(copy_run), "--out", str(out))
    assert status == 0, err
    assert lines[0].startswith(f"{out}: training curves of {copy_run}")
    assert picture(out).shape[1] > 800
    status, _, err = run(capsys, monkeypatch, "", "plot", str(tmp_path), "--out", str(out))
    assert status == 2 and "metrics.jsonl" in err


def test_plot_pe(tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "pe.svg"
    args = ["plot-pe", "--d-model", "32", "--length", "50", "--out", str(out)]
    status, _, _ = run(capsys, monkeypatch, "", *args)
    assert status == 0 and out.read_text().startswith("<?xml")
    status, _, err = run(capsys, monkeypatch, "", "plot-pe", "--d-model", "7", "--out", str(out))
    assert status == 2 and "--d-model 7: d_model=7 must be an even number" in err
