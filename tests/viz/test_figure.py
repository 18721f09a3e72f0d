"""Pictures are written whole or not at all, in the format their name asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from scratchformer.viz import positional_encoding_figure, save_figure


@pytest.mark.parametrize(
    ("name", "start"), [("pe.png", b"\x89PNG"), ("pe.SVG", b"<?xml"), ("pe.pdf", b"%PDF")]
)
def test_the_suffix_names_the_format(name: str, start: bytes, tmp_path: Path) -> None:
    save_figure(positional_encoding_figure(d_model=4, length=3), tmp_path / name)
    assert (tmp_path / name).read_bytes().startswith(start)
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_an_unknown_suffix_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"pe\.txt: a picture's name must end in .*\.png"):
        save_figure(positional_encoding_figure(d_model=4, length=3), tmp_path / "pe.txt")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_save_leaves_no_file_and_no_temp(tmp_path: Path, monkeypatch) -> None:
    figure = positional_encoding_figure(d_model=4, length=3)
    path = tmp_path / "pe.png"

    def half_then_fail(file: Path, **options: object) -> None:
        Path(file).write_bytes(b"\x89PNG half a pic")
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(figure, "savefig", half_then_fail)
    with pytest.raises(RuntimeError, match="renderer crashed"):
        save_figure(figure, path)
    assert list(tmp_path.iterdir()) == []

    save_figure(positional_encoding_figure(d_model=4, length=3), path)
    old = path.read_bytes()
    with pytest.raises(RuntimeError, match="renderer crashed"):
        save_figure(figure, path)
    assert path.read_bytes() == old  # an earlier picture stays as it was
    assert list(tmp_path.iterdir()) == [path]
