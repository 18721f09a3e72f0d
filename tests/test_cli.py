"""The command line: user errors give one line on stderr and exit status 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import RECIPES, TINY_MODEL, set_options, snapshot
from scratchformer import demo as demo_module
from scratchformer.cli import commands, main

TINY = set_options(
    [
        *TINY_MODEL,
        "data.synthetic.train_size=200",
        "data.synthetic.val_size=20",
        "train.max_steps=4",
        "train.eval_every=2",
    ]
)


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["--quiet", *args])
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_error(status: int, err: str, *fragments: str) -> None:
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("scratchformer: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


def test_train_then_eval_prints_json(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "copy"
    status, out, _ = run(capsys, "train", str(RECIPES / "copy.toml"), "--out", str(run_dir), *TINY)
    assert status == 0 and json.loads(out)["step"] == 4
    status, out, _ = run(capsys, "eval", str(run_dir))
    metrics = json.loads(out)
    assert status == 0 and metrics["split"] == "val" and 0 <= metrics["exact_match"] <= 1
    status, out, _ = run(capsys, "eval", str(run_dir), "--split", "test", "--beam", "2")
    metrics = json.loads(out)
    assert status == 0 and metrics["split"] == "test" and metrics["beam"] == 2
    assert {"bleu", "bleu_tokenized_lc", "chrf"} <= metrics.keys()


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["train", "missing.toml", "--out", "x"], ["missing.toml"]),
        (
            ["train", str(RECIPES / "copy.toml"), "--out", "x", "--set", "train.max_step=3"],
            ["unknown TrainConfig field(s): max_step", "valid fields: max_steps"],
        ),
        (
            ["train", str(RECIPES / "copy.toml"), "--out", "x", "--set", "train.lr=-1"],
            ["lr=-1.0 must be positive"],
        ),
        (
            ["train", str(RECIPES / "copy.toml"), "--out", "x", "--resume"],
            ["holds no checkpoint to resume"],
        ),
        (
            ["train", str(RECIPES / "copy.toml"), "--out", "x", "--resume", "--overwrite"],
            ["--resume continues a run and --overwrite replaces it: choose one"],
        ),
        (["eval", "nowhere"], ["nowhere holds no trained model"]),
        (["export-hf", ".", "--out", "hf"], [". holds no trained model"]),
        (["plot-pe", "--out", "missing/pe.png"], ["no directory missing: 'missing/pe.png'"]),
        (
            ["plot-pe", "--out", "pe.png", "--d-model", "\u0663"],
            ["--d-model 3: d_model=3 must be an even number"],
        ),
        (
            ["plot-pe", "--out", f"{RECIPES / 'copy.toml'}/pe.png"],
            [f"{RECIPES / 'copy.toml'} is a file, not a directory"],
        ),
        (
            ["train", str(RECIPES / "copy.toml"), "--out", "x", "--set", "data.tokenizer='bpe'"],
            ["data.vocab_size=20 is too small for byte-level BPE"],
        ),
    ],
)
def test_user_errors_are_one_line(tmp_path: Path, monkeypatch, capsys, args, fragments) -> None:
    monkeypatch.chdir(tmp_path)
    status, _, err = run(capsys, *args)
    assert_one_line_error(status, err, *fragments)


def test_malformed_data_names_file_and_line(tmp_path: Path, capsys) -> None:
    source, target = tmp_path / "train.src", tmp_path / "train.tgt"
    source.write_text("123\n456\n789\n")
    target.write_text("123\n456\n")
    status, _, err = run(
        capsys,
        "train",
        str(RECIPES / "copy.toml"),
        "--out",
        str(tmp_path / "run"),
        "--set",
        f"data.train=['{source}', '{target}']",
    )
    assert_one_line_error(status, err, f"{source}:3:")
    assert not (tmp_path / "run" / "trainer_state.json").exists()


def test_an_existing_run_is_not_overwritten(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "copy"
    assert run(capsys, "train", str(RECIPES / "copy.toml"), "--out", str(run_dir), *TINY)[0] == 0
    status, _, err = run(capsys, "train", str(RECIPES / "copy.toml"), "--out", str(run_dir))
    assert_one_line_error(status, err, "already holds a run", "--resume")


def test_an_overwrite_that_cannot_start_keeps_the_run_it_would_replace(
    tmp_path: Path, capsys
) -> None:
    """The old run's files are set aside, not deleted, until the new run is written: a
    setting, data file or tokenizer refused leaves the old run as it was."""
    run_dir = tmp_path / "copy"
    train = ["train", str(RECIPES / "copy.toml"), "--out", str(run_dir)]
    assert run(capsys, *train, *TINY)[0] == 0
    before = snapshot(run_dir)
    for setting, refusal in [
        ("", "--set '' must look like section.key=value"),
        ("data.train=['no.de', 'no.en']", "no.de"),
        ("data.tokenizer='bpe'", "data.vocab_size=20 is too small for byte-level BPE"),
    ]:
        status, _, err = run(capsys, *train, *TINY, "--overwrite", "--set", setting)
        assert_one_line_error(status, err, refusal)
        assert snapshot(run_dir) == before
    assert run(capsys, *train, *TINY, "--overwrite")[0] == 0
    assert not [path for path in run_dir.iterdir() if path.name.startswith(".")]  # none aside


@pytest.mark.parametrize("command", ["train", "demo"])
def test_help_tells_what_overwrite_replaces(command: str, capsys) -> None:
    assert main([command, "--help"]) == 0
    assert "refusing if it holds anything else" in " ".join(capsys.readouterr().out.split())


def test_training_into_a_directory_of_other_files_is_refused(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    (tmp_path / "thesis.tex").write_text("\\begin{document}\n")
    before = snapshot(tmp_path)
    monkeypatch.chdir(tmp_path)
    for overwrite in ([], ["--overwrite"]):
        status, _, err = run(capsys, "train", str(RECIPES / "copy.toml"), "--out", ".", *overwrite)
        assert_one_line_error(status, err, ". is not empty (thesis.tex) and holds no run; choose")
    assert snapshot(tmp_path) == before


def test_demo_replaces_only_its_own_run_and_only_when_told(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    recipe = {
        **demo_module.DEMO_RECIPE,
        "model": {**demo_module.DEMO_RECIPE["model"], "d_model": 32, "d_ff": 64, "n_layers": 1},
        "train": {**demo_module.DEMO_RECIPE["train"], "max_steps": 2, "eval_every": 2},
    }
    monkeypatch.setattr(demo_module, "DEMO_RECIPE", recipe)
    demo = tmp_path / "demo"
    assert run(capsys, "demo", "--out", str(demo))[0] == 0
    before = snapshot(demo)
    assert_one_line_error(*run(capsys, "demo", "--out", str(demo))[::2], "already holds a run")
    assert snapshot(demo) == before
    assert run(capsys, "demo", "--out", str(demo), "--overwrite")[0] == 0
    (demo / "notes.txt").write_text("mine\n")
    status, _, err = run(capsys, "demo", "--out", str(demo), "--overwrite")
    assert_one_line_error(status, err, "holds files that are no run's (notes.txt)")


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        main(["--debug", "train", str(tmp_path / "missing.toml"), "--out", str(tmp_path)])


def test_real_process_exit_status_and_stderr(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scratchformer", "train", "missing.toml", "--out", "x"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert_one_line_error(result.returncode, result.stderr, "missing.toml")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_asking_for_a_gpu_without_one_is_a_clear_error(tmp_path: Path, capsys) -> None:
    args = ["train", str(RECIPES / "copy.toml"), "--out", str(tmp_path / "run")]
    status, _, err = run(capsys, "--device", "cuda", *args)
    assert_one_line_error(status, err, "--device cuda: PyTorch sees no CUDA device")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["translate", "run", "--batch-size", "0"],
        ["translate", "run", "--batch-size", "-1"],
        ["translate", "run", "--beam", "0"],
        ["translate", "run", "--length-penalty", "inf"],
        ["eval", "run", "--beam", "two"],
        ["generate", "run", "--prompt", "a", "--max-new-tokens", "-5"],
        ["generate", "run", "--prompt", "a", "--temperature", "-1"],
        ["generate", "run", "--prompt", "a", "--temperature", "nan"],
        ["generate", "run", "--prompt", "a", "--top-k", "0"],
        ["generate", "run", "--prompt", "a", "--top-p", "0"],
        ["generate", "run", "--prompt", "a", "--top-p", "1.5"],
        ["generate", "run", "--prompt", "a", "--no-repeat-ngram", "-1"],
        ["generate", "run", "--prompt", "a", "--repetition-penalty", "0"],
        ["attention", "run", "text", "--out", "a.png", "--layer", "-1"],
        ["plot-pe", "--out", "pe.png", "--d-model", "0"],
        ["plot-pe", "--out", "pe.png", "--length", "4097"],
    ],
    ids=lambda args: " ".join(args[-2:]),
)
def test_numeric_options_are_checked_where_they_are_parsed(args: list[str], capsys) -> None:
    status = main(args)
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"scratchformer {args[0]}: error: argument {args[-2]}")


@pytest.mark.parametrize(
    ("args", "argument"),
    [
        (["eval", ""], "run"),
        (["import-hf", "", "--out", "x"], "hf_dir"),
        (["plot", "r", "--out", ""], "--out"),
    ],
)
def test_an_empty_path_is_refused_where_it_is_parsed(args, argument, capsys) -> None:
    """An empty path would be the working directory: a run's files written or read there."""
    assert main(args) == 2
    assert capsys.readouterr().err.endswith(f": error: argument {argument}: '' is no path\n")


def test_global_options_are_accepted_after_the_subcommand(tmp_path: Path, capsys) -> None:
    out = tmp_path / "pe.png"
    assert main(["plot-pe", "--out", str(out), "--quiet", "--device", "cpu"]) == 0
    assert out.stat().st_size > 0
    with pytest.raises(ValueError, match=r"pe\.gif"):  # --debug: the error itself
        main(["plot-pe", "--out", str(tmp_path / "pe.gif"), "--debug"])


HEAVY = "any(m.startswith(('torch._inductor', 'matplotlib')) for m in sys.modules)"


@pytest.mark.parametrize("command", ["--help", "train", "eval", "import-hf"])
def test_light_commands_load_neither_the_compiler_nor_matplotlib(command: str) -> None:
    """``--help`` and the commands that draw nothing start without torch's compiler or
    matplotlib (seconds of start-up each)."""
    load = (
        "main(['--help'])"
        if command == "--help"
        else f"next(c for c in COMMANDS if c.name == {command!r}).handler()"
    )
    code = f"import sys\nfrom scratchformer.cli import COMMANDS, main\n{load}\nprint({HEAVY})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "False"


def test_every_command_has_help(capsys) -> None:
    for command in ["--help", *(f"{c.name} --help" for c in commands())]:
        assert main(command.split()) == 0, command
        assert capsys.readouterr().out.startswith("usage: scratchformer"), command


def test_an_error_quoting_control_characters_is_still_one_line(
    classification_run, tmp_path, capsys
) -> None:
    """A message that quotes a file's content as it is (here the tokenizers library's, of a
    version string holding a carriage return and a newline) is printed on one line, the
    characters escaped."""
    run_dir = tmp_path / "run"
    shutil.copytree(classification_run, run_dir)
    tokenizer = json.loads((run_dir / "tokenizer.json").read_text(encoding="utf-8"))
    (run_dir / "tokenizer.json").write_text(json.dumps({**tokenizer, "version": "1\r\n2"}))
    assert main(["classify", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\r" not in err and "'1\\r\\n2'" in err
    assert err.startswith(f"scratchformer: error: {run_dir / 'tokenizer.json'}")


def test_make_chat_data_writes_its_four_files(tmp_path: Path, data_dir: Path, capsys) -> None:
    out = tmp_path / "chat"
    args = ["make-chat-data", "--out", str(out), "--per-source", "6", "--val", "2"]
    status, stdout, _ = run(capsys, *args, "--source", "squad", "--system", "Be brief.")
    assert status == 0
    assert stdout.splitlines() == [
        f"{out / 'train.jsonl'}: 6 conversations (squad 6)",
        f"{out / 'val.jsonl'}: 2 conversations (squad 2)",
        f"{out / 'pairs-train.jsonl'}: 6 pairs (squad 6)",
        f"{out / 'pairs-val.jsonl'}: 2 pairs (squad 2)",
    ]
    first = json.loads((out / "pairs-train.jsonl").read_text().splitlines()[0])
    assert first["prompt"][0] == {"role": "system", "content": "Be brief."}


def test_make_chat_data_without_the_datasets_names_the_variable(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("SCRATCHFORMER_DATA", str(tmp_path / "nothing"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    status, _, err = run(capsys, "make-chat-data", "--out", str(tmp_path / "chat"))
    assert_one_line_error(status, err, "dataset 'sst2' not found", "Set SCRATCHFORMER_DATA")
    assert not (tmp_path / "chat").exists()
