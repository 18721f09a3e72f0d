"""A trained run directory with one of its files damaged (values of the wrong type or
shape, records that are not records, weights truncated or replaced), then used by the
commands that read it: each answers, or refuses in one line that names the run."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.strategies import SCALARS, assert_sound_or_refused, cli, examples, mutated, values

USES = {
    "classify": lambda run: ("classify", str(run)),
    "eval": lambda run: ("eval", str(run), "--split", "val"),
    "plot": lambda run: ("plot", str(run), "--out", str(run.parent / "curves.png")),
}
"""The commands a damaged run is handed to, each reading some of its files."""
FIXTURE = [HealthCheck.function_scoped_fixture]


def use_damaged(run: Path, name: str, damage, command: str) -> None:
    """Copy ``run``, let ``damage(path)`` rewrite its file ``name``, run ``command``."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "run"
        shutil.copytree(run, copy)
        damage(copy / name)
        status, _, err = cli(*USES[command](copy), stdin="good fun\nbad\n")
        assert_sound_or_refused(status, err, str(copy))


@settings(max_examples=examples(40), deadline=None, suppress_health_check=FIXTURE)
@given(st.data())
def test_a_damaged_json_file_is_used_or_refused_in_one_line(classification_run, data) -> None:
    name = data.draw(st.sampled_from(["config.json", "run.json", "tokenizer.json"]))
    document = json.loads((classification_run / name).read_text(encoding="utf-8"))
    damaged = data.draw(mutated(document, depth=2 if name == "tokenizer.json" else 4))
    command = data.draw(st.sampled_from(sorted(USES)))
    use_damaged(classification_run, name, lambda p: p.write_text(json.dumps(damaged)), command)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=FIXTURE)
@given(st.data())
def test_damaged_metrics_records_are_plotted_or_refused(classification_run, data) -> None:
    lines = (classification_run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    at = data.draw(st.integers(0, len(records) - 1))
    record = data.draw(mutated(records[at], depth=1) | values() | SCALARS)
    text = json.dumps(record) if data.draw(st.booleans()) else data.draw(st.text(max_size=20))
    lines[at] = text

    def damage(path: Path) -> None:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    use_damaged(classification_run, "metrics.jsonl", damage, "plot")


@settings(max_examples=examples(30), deadline=None, suppress_health_check=FIXTURE)
@given(st.data())
def test_damaged_weights_are_refused_in_one_line(classification_run, data) -> None:
    weights = (classification_run / "model.safetensors").read_bytes()
    cut = data.draw(st.integers(0, len(weights) - 1))
    noise = data.draw(st.binary(max_size=64))
    command = data.draw(st.sampled_from(["classify", "eval"]))

    def damage(path: Path) -> None:
        path.write_bytes(weights[:cut] + noise)

    use_damaged(classification_run, "model.safetensors", damage, command)


def test_eval_of_a_split_that_is_no_split_is_refused(classification_run) -> None:
    for split in ("tokenizer", "vocab_size", "train_path", ""):
        status, _, err = cli("eval", str(classification_run), "--split", split)
        assert_sound_or_refused(status, err, "--split", split or "split")
        assert status == 2


def test_a_tokenizer_that_lost_its_special_tokens_is_refused(classification_run) -> None:
    """Found at ten times the examples: ``added_tokens`` emptied, the pad token is gone."""

    def damage(path: Path) -> None:
        path.write_text(json.dumps({**json.loads(path.read_text()), "added_tokens": []}))

    for command in ("classify", "eval"):
        use_damaged(classification_run, "tokenizer.json", damage, command)
