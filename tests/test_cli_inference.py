"""The commands that use a trained run: one line out per line in, whatever the input."""

from __future__ import annotations

import io
import json
import shutil

from helpers import compile_without_inductor, compiled_graphs, run, train
from scratchformer.cli import main


def test_translate_keeps_line_alignment(copy_run, capsys, monkeypatch) -> None:
    lines = "123\n\n4567\n99x9\n" + "1" * 300 + "\n"
    for beam in ("1", "3"):
        status, out, err = run(
            capsys, monkeypatch, lines, "translate", str(copy_run), "--beam", beam
        )
        assert status == 0 and len(out) == 5 and out[1] == ""
        assert "1 line(s) longer than 128 tokens were cut (line 5)" in err


def test_translate_compiled_gives_the_eager_translations(copy_run, capsys, monkeypatch) -> None:
    """Batches of three sizes and five source lengths compile three graphs in all: the
    encoder, the decoder's first step and its later ones (rows and lengths are dynamic)."""
    lines = "123\n\n4567\n99x9\n1\n12345678\n"
    args = ["translate", str(copy_run), "--beam", "3", "--batch-size", "2"]
    eager = run(capsys, monkeypatch, lines, *args, "--verbose")
    assert eager[0] == 0 and len(eager[1]) == 6
    assert "not compiling: not run here before" in eager[2]
    compile_without_inductor(monkeypatch)
    before = compiled_graphs()
    compiled = run(capsys, monkeypatch, lines, *args, "--compile", "--verbose")
    assert compiled[:2] == eager[:2]
    assert "compiling: --compile" in compiled[2]
    assert compiled_graphs() - before == 3


def test_encoder_commands_compile_as_told(classification_run, capsys, monkeypatch) -> None:
    lines = "a good film\nbad\n" + "so long " * 20 + "\n"
    eager = run(capsys, monkeypatch, lines, "classify", str(classification_run))
    compile_without_inductor(monkeypatch)
    before = compiled_graphs()
    compiled = run(capsys, monkeypatch, lines, "classify", str(classification_run), "--compile")
    assert compiled[:2] == eager[:2] and compiled_graphs() > before
    refused = run(capsys, monkeypatch, lines, "classify", "x", "--compile", "--no-compile")
    assert refused[0] == 2 and "not allowed with argument" in refused[2]
    onnx = run(capsys, monkeypatch, lines, "classify", str(classification_run), "--onnx", "x")
    compiled_onnx = run(
        capsys, monkeypatch, lines, "classify", str(classification_run), "--onnx", "x", "--compile"
    )
    assert compiled_onnx[0] == 2 and "leave out --compile" in compiled_onnx[2]
    assert "leave out --compile" not in onnx[2]


def test_commands_refuse_runs_of_another_task(copy_run, capsys, monkeypatch) -> None:
    for args, wanted in [
        (["classify"], "a classification or regression or similarity run"),
        (["tag"], "a tagging run"),
        (["generate", "--prompt", "1"], "a lm or sft or dpo run"),
        (["fill-mask"], "a mlm run"),
        (["fill-spans"], "a span_corruption run"),
    ]:
        command, *options = args
        status, _, err = run(capsys, monkeypatch, "x\n", command, str(copy_run), *options)
        assert status == 2 and f"is a 'synthetic' run; {command} needs {wanted}" in err


def test_classify_prints_a_label_and_probability_per_line(
    classification_run, capsys, monkeypatch
) -> None:
    for quantize in ([], ["--quantize", "int8"]):
        lines = "good fun\n\nbad\n"
        args = ["classify", str(classification_run), *quantize]
        status, out, _ = run(capsys, monkeypatch, lines, *args)
        assert status == 0 and len(out) == 3
        for line in out:
            label, probability = line.split("\t")
            assert label in ("neg", "pos") and 0.5 <= float(probability) <= 1.0


def test_tag_prints_conll_with_blank_lines(tmp_path, capsys, monkeypatch) -> None:
    data = tmp_path / "train.txt"
    data.write_text("Peter B-PER\nwent O\nto O\nParis B-LOC\n\n" * 5)
    run_dir = tmp_path / "ner"
    train(
        run_dir,
        "conll2003.toml",
        f"data.train='{data}'",
        f"data.val='{data}'",
        "data.dataset=none",
        "data.vocab_size=60",
    )
    for quantize in ([], ["--quantize", "int8"]):
        lines = "Peter went home\n\nParis\n"
        status, out, _ = run(capsys, monkeypatch, lines, "tag", str(run_dir), *quantize)
        words = [line.split(" ")[0] for line in out]
        assert status == 0 and words == ["Peter", "went", "home", "", "", "Paris", ""]


def _fillers(line: str) -> list[list[tuple[str, float]]]:
    """``token probability`` pairs, tab-separated, of each mask (masks separated by `` | ``)."""
    masks = []
    for mask in line.split(" | "):
        pairs = [candidate.rsplit(" ", 1) for candidate in mask.split("\t")]
        masks.append([(token, float(probability)) for token, probability in pairs])
    return masks


def test_fill_mask_prints_the_likeliest_tokens_of_each_mask(mlm_run, capsys, monkeypatch):
    lines = "the cat [MASK] on the mat .\na [MASK] dog ran under the [MASK] tree .\n"
    for top_k, extra in [(5, []), (3, ["--top-k", "3"]), (5, ["--quantize", "int8"])]:
        status, out, err = run(capsys, monkeypatch, lines, "fill-mask", str(mlm_run), *extra)
        assert status == 0, err
        assert [len(_fillers(line)) for line in out] == [1, 2]  # one line a text, a mask
        for line in out:
            for candidates in _fillers(line):
                tokens = [token for token, _ in candidates]
                probabilities = [probability for _, probability in candidates]
                assert len(set(tokens)) == top_k and all(tokens)
                assert probabilities == sorted(probabilities, reverse=True)
                assert probabilities[-1] > 0 and sum(probabilities) <= 1 + 5e-4  # 4 decimals


def test_fill_mask_refuses_a_line_without_a_mask(mlm_run, capsys, monkeypatch) -> None:
    lines = "the cat [MASK] on the mat .\nthe cat sat on the mat .\n"
    status, _, err = run(capsys, monkeypatch, lines, "fill-mask", str(mlm_run))
    assert status == 2 and err.count("\n") == 1
    assert "no [MASK] in 'the cat sat on the mat .'" in err


def test_generate_is_reproducible_with_a_seed(tmp_path, capsys, monkeypatch) -> None:
    data = tmp_path / "text.txt"
    data.write_text("to be or not to be, that is the question.\n" * 40)
    run_dir = tmp_path / "lm"
    train(
        run_dir,
        "shakespeare-char.toml",
        f"data.train='{data}'",
        f"data.val='{data}'",
        "data.dataset=none",
        "data.lm.block_size=16",
        "model.max_len=64",
    )
    args = ["generate", str(run_dir), "--prompt", "to be", "--max-new-tokens", "20", "--seed", "3"]
    first = run(capsys, monkeypatch, "", *args)
    second = run(capsys, monkeypatch, "", *args)
    assert first[0] == 0 and first[1] == second[1]
    assert first[1][0].startswith("to be")
    greedy = [*args[:6], "--greedy"]
    eager = run(capsys, monkeypatch, "", *greedy)
    int8 = [*greedy, "--quantize", "int8"]
    quantized = run(capsys, monkeypatch, "", *int8)
    assert quantized[0] == 0 and quantized[1][0].startswith("to be")
    # --compile: the decoding step compiled ahead of time, kept for the next process
    compiled = run(capsys, monkeypatch, "", *greedy, "--compile", "--verbose")
    assert compiled[:2] == eager[:2] and "compiled 1 graphs" in compiled[2]
    assert "(0 from the cache)" in compiled[2]
    kept = run(capsys, monkeypatch, "", *greedy, "--compile", "--verbose")
    assert kept[:2] == eager[:2] and "(1 from the cache)" in kept[2]
    assert run(capsys, monkeypatch, "", *int8, "--compile")[:2] == quantized[:2]
    # --logprobs 2: after the text, a line a new token, the greedy token the likeliest
    status, out, _ = run(capsys, monkeypatch, "", *greedy, "--logprobs", "2")
    text = len(eager[1])
    assert status == 0 and out[:text] == eager[1] and 1 <= len(out) - text <= 20
    for line in out[text:]:
        token, logprob, first, second = line.split("\t")
        assert first.startswith(token + " ") and float(first.rsplit(" ", 1)[1]) == float(logprob)
        assert float(logprob) >= float(second.rsplit(" ", 1)[1])


def test_standard_input_that_is_not_utf8_names_its_line(copy_run, capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"123\n\xff\xfe45\n")))
    status = main(["--quiet", "translate", str(copy_run)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert "standard input, line 2: not UTF-8 text" in err


def test_beams_that_would_not_fit_in_memory_are_refused(copy_run, capsys, monkeypatch) -> None:
    """The decoding cache's size is checked in integer arithmetic before it is allocated."""
    status, _, err = run(
        capsys, monkeypatch, "3 4 5\n", "translate", str(copy_run), "--beam", "2147483648"
    )
    assert status == 2 and len(err.splitlines()) == 1
    assert "a decoding cache for 2147483648 rows" in err and "this machine's memory holds" in err


def test_generate_refuses_a_prompt_or_stop_it_cannot_use(lm_run, capsys, monkeypatch) -> None:
    for options, message in [
        (["--prompt", "to \udcff"], "--prompt: character(s) ' \\udcff' are not in the vocabulary"),
        (["--prompt", ""], "--prompt '' is no tokens"),
        (["--prompt", "to", "--stop", ""], "--stop '' would stop before the first token"),
    ]:
        status, _, err = run(capsys, monkeypatch, "", "generate", str(lm_run), *options)
        assert status == 2 and len(err.splitlines()) == 1 and message in err, err


def test_export_hf_of_a_model_no_family_holds_names_the_run(
    copy_run, tmp_path, capsys, monkeypatch
):
    status, _, err = run(
        capsys, monkeypatch, "", "export-hf", str(copy_run), "--out", str(tmp_path / "hf")
    )
    assert status == 2 and err.startswith(f"scratchformer: error: {copy_run}: cannot export as t5")


def test_eval_data_of_a_translation_run_names_the_option(copy_run, capsys, monkeypatch) -> None:
    status, _, err = run(capsys, monkeypatch, "", "eval", str(copy_run), "--data", "one.txt")
    assert status == 2 and "--data 'one.txt' must list two files: source, target" in err


def test_eval_of_a_split_the_runs_recipe_lacks_names_its_config(
    classification_run, tmp_path, capsys, monkeypatch
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(classification_run, copy)
    config = json.loads((copy / "config.json").read_text())
    config["data"]["val"] = None
    (copy / "config.json").write_text(json.dumps(config))
    status, _, err = run(capsys, monkeypatch, "", "eval", str(copy), "--split", "val")
    assert status == 2 and err.startswith(f"scratchformer: error: {copy / 'config.json'}: no val")


def test_training_on_a_split_the_recipe_lacks_names_the_recipe(tmp_path, capsys, monkeypatch):
    recipe = tmp_path / "recipe.toml"
    recipe.write_text('task = "classification"\n[data]\ndataset = "none"\n')
    out = str(tmp_path / "run")
    status, _, err = run(capsys, monkeypatch, "", "train", str(recipe), "--out", out)
    assert status == 2 and err.startswith(f"scratchformer: error: {recipe}: no train data")
