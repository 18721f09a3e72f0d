"""``scratchformer merge``: a LoRA run's adapters folded into an ordinary run that eval
scores as the adapted run; a taken --out or a run without adapters is a user error, as is
``export-peft`` of a run that started from no checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scratchformer.cli import main


def evaluation(run_dir: Path, capsys) -> dict[str, object]:
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--split", "test"]) == 0
    return json.loads(capsys.readouterr().out)


def test_merge_gives_a_run_that_evaluates_as_the_lora_run(
    lora_copy_run: Path, tmp_path: Path, capsys
) -> None:
    assert main(["--quiet", "merge", str(lora_copy_run), "--out", str(tmp_path / "full")]) == 0
    adapted, merged = evaluation(lora_copy_run, capsys), evaluation(tmp_path / "full", capsys)
    numbers = {key for key, value in adapted.items() if isinstance(value, float)}
    assert numbers and merged.keys() == adapted.keys()
    assert all(merged[key] == pytest.approx(adapted[key], rel=1e-5) for key in numbers)
    assert all(merged[key] == adapted[key] for key in adapted.keys() - numbers)

    assert main(["merge", str(lora_copy_run), "--out", str(tmp_path / "full")]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "full"), "--out", str(tmp_path / "again")]) == 2
    assert "is not a LoRA run" in capsys.readouterr().err
    assert not (tmp_path / "again").exists()
    # adapters of a model trained from its seed's weights: no checkpoint for PEFT to adapt
    assert main(["export-peft", str(lora_copy_run), "--out", str(tmp_path / "peft")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.init_from is unset" in err
    assert not (tmp_path / "peft").exists()
