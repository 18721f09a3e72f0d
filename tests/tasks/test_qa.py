"""Extractive question answering: windows over long contexts, answers located in them and
mapped back to the context's characters, the span decoding, and a tiny run end to end."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import FILLER, RECIPES, run, squad_file, train
from scratchformer.config import Recipe
from scratchformer.data.text import SHARED_SEGMENT
from scratchformer.data.tokenizer import Tokenizer
from scratchformer.data.windows import CONTEXT, QUESTION, Window, answer_tokens, question_windows
from scratchformer.run import export_hf, load_run
from scratchformer.tasks.qa import QuestionAnsweringTask, best_answer, span_loss

UNICODE = "Zoë fährt nach Köln — naïve 日本語 café, 東京 and São Paulo. "


@pytest.fixture(scope="module", params=["bpe", "wordpiece", "char"])
def tokenizer(request) -> Tokenizer:
    texts = [FILLER, UNICODE, "Who is it? The answer is Grace Hopper here."] * 3
    size = {"bpe": 400, "wordpiece": 200, "char": 200}[request.param]
    return Tokenizer.train(request.param, texts, size, ("pad", "unk", "cls", "sep"))


def windows_of(tokenizer: Tokenizer, context: str, answer: str, **sizes: int) -> list[Window]:
    start = context.index(answer)
    return question_windows(
        tokenizer,
        "Who is it?",
        context,
        answer=(start, start + len(answer)),
        **{"max_len": 40, "stride": 8, "max_question_len": 8, **sizes},
    )


def answer_text(window: Window, context: str) -> str:
    first, last = window.offsets[window.start], window.offsets[window.end]
    assert first is not None and last is not None
    return context[first[0] : last[1]]


def test_windows_cover_the_context_and_overlap(tokenizer) -> None:
    context = FILLER
    windows = windows_of(tokenizer, context, "w59")
    assert len(windows) > 2
    covered = [offset for w in windows for offset in w.offsets if offset is not None]
    assert covered[0][0] == 0 and covered[-1][1] == len(context)
    for window in windows:
        assert len(window.ids) <= 40 and len(window.ids) == len(window.segments)
        assert window.ids[0] == tokenizer.cls_id and window.ids[-1] == tokenizer.sep_id
        # segment 1 from the context on, and only context positions have offsets
        assert [s == 1 for s in window.segments][:-1] == [o is not None for o in window.offsets][
            :-1
        ]
    firsts = [next(o for o in w.offsets if o is not None)[0] for w in windows]
    lasts = [[o for o in w.offsets if o is not None][-1][1] for w in windows]
    assert all(b < a for a, b in zip(lasts, firsts[1:], strict=False))  # they overlap


def test_an_answer_across_a_window_boundary_is_whole_in_a_later_window(tokenizer) -> None:
    context, answer = FILLER, "w20 w21 w22 w23 w24"
    first = context.index(answer)
    windows = windows_of(tokenizer, context, answer, stride=2)
    cut = holding = 0
    for window in windows:
        spans = [offset for offset in window.offsets if offset is not None]
        if spans[0][0] <= first and spans[-1][1] >= first + len(answer):
            holding += 1
            assert answer_text(window, context) == answer
            continue
        assert (window.start, window.end) == (0, 0)  # not whole in it: [CLS]
        cut += any(start < first + len(answer) and end > first for start, end in spans)
    assert cut and holding  # some windows' edges cut the answer, later ones hold it


def test_an_answer_at_the_very_end_of_a_long_context(tokenizer) -> None:
    context = FILLER + " The answer is Grace Hopper"
    windows = windows_of(tokenizer, context, "Grace Hopper")
    last = windows[-1]
    assert answer_text(last, context) == "Grace Hopper"
    assert last.end == len(last.ids) - 2  # the token before the final [SEP]
    assert all((w.start, w.end) == (0, 0) for w in windows[:-2])


def test_unicode_offsets_count_characters_not_bytes(tokenizer) -> None:
    context = UNICODE * 2 + "The answer is São Paulo"
    assert len(context.encode("utf-8")) > len(context)
    answer = "São Paulo"
    start = context.rindex(answer)
    windows = question_windows(
        tokenizer,
        "Who?",
        context,
        max_len=40,
        stride=12,
        max_question_len=8,
        answer=(start, start + len(answer)),
    )
    holding = [w for w in windows if (w.start, w.end) != (0, 0)]
    assert holding
    for window in holding:
        first = window.offsets[window.start]
        assert first is not None and first[0] == start
        assert answer_text(window, context) == answer


def test_answer_tokens_of_an_answer_inside_a_token() -> None:
    offsets = [(0, 5), (6, 11), (12, 17)]
    assert answer_tokens(offsets, (7, 9)) == (1, 1)
    assert answer_tokens(offsets, (3, 13)) == (0, 2)
    assert answer_tokens(offsets, (5, 6)) is None  # the space between two tokens


def test_windows_mark_the_words_of_the_question_only_when_asked(tokenizer) -> None:
    context, question = FILLER + " The answer is Grace Hopper here.", "Who is it? Grace."
    sizes = {"max_len": 40, "stride": 8, "max_question_len": 8}
    plain = question_windows(tokenizer, question, context, **sizes)
    marked = question_windows(tokenizer, question, context, mark_shared_words=True, **sizes)
    assert [w.ids for w in plain] == [w.ids for w in marked]
    assert {s for w in plain for s in w.segments} == {QUESTION, CONTEXT}
    asked = [(context.index(w), context.index(w) + len(w)) for w in (" is ", "Grace")]
    for window in marked:
        for segment, offset in zip(window.segments, window.offsets, strict=True):
            if offset is None:
                assert segment in (QUESTION, CONTEXT)  # question, specials
            else:  # inside " is " or "Grace": the question's words in the context
                inside = any(a <= offset[0] and offset[1] <= b for a, b in asked)
                assert (segment == SHARED_SEGMENT) == (inside and not context[offset[0]].isspace())
    assert any(SHARED_SEGMENT in w.segments for w in marked)


def test_a_question_longer_than_max_len_allows_is_an_error(tokenizer) -> None:
    with pytest.raises(ValueError, match=r"data\.max_len=8 leaves no room"):
        question_windows(tokenizer, FILLER, "x", max_len=8, stride=4, max_question_len=64)


def test_best_answer_takes_the_likeliest_span_over_windows() -> None:
    # two windows of [CLS] q [SEP] c c c [SEP]; context characters in offsets
    offsets = [None, None, None, (0, 3), (4, 7), (8, 11), None]
    windows = [Window([0] * 7, [0] * 7, offsets), Window([0] * 7, [0] * 7, offsets)]
    unsure = torch.zeros(7, 2)
    sure = torch.full((7, 2), -10.0)
    sure[4, 0], sure[5, 1] = 10.0, 10.0  # start at "abc"[4:7], end at [8:11]
    prediction = best_answer([(windows[0], unsure), (windows[1], sure)], max_answer_len=5)
    assert prediction.span == (4, 11) and prediction.score > 0.99
    too_long = best_answer([(windows[1], sure)], max_answer_len=1)
    assert too_long.span[1] - too_long.span[0] == 3  # one token
    no_context = Window([0] * 3, [0] * 3, [None, None, None])
    assert best_answer([(no_context, torch.zeros(3, 2))], 30).span == (0, 0)


def test_an_answer_never_ends_before_it_starts() -> None:
    offsets = [None, (0, 3), (4, 7), (8, 11), None]
    logits = torch.tensor([[0.0, 0.0], [0.0, 9.0], [0.0, 0.0], [9.0, 0.0], [0.0, 0.0]])
    prediction = best_answer([(Window([0] * 5, [0] * 5, offsets), logits)], 30)
    assert prediction.span[0] < prediction.span[1]


def test_span_loss_ignores_padding() -> None:
    logits = torch.randn(1, 4, 2)
    targets = torch.tensor([[1, 2]])
    padded = torch.cat([logits, torch.full((1, 3, 2), 50.0)], dim=1)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0]])
    expected = span_loss(logits, torch.ones(1, 4), targets)
    assert torch.allclose(span_loss(padded, mask, targets), expected)
    manual = (logits[0, :, 0].log_softmax(0)[1] + logits[0, :, 1].log_softmax(0)[2]) / -2
    assert torch.allclose(expected, manual)
    smoothed = span_loss(logits, torch.ones(1, 4), targets, label_smoothing=0.1)
    reference = torch.nn.functional.cross_entropy(
        logits[0].T, targets[0], label_smoothing=0.1
    )  # over real tokens only, padding is not smoothed into
    assert torch.allclose(span_loss(padded, mask, targets, label_smoothing=0.1), smoothed)
    assert torch.allclose(smoothed, reference)


def test_a_tiny_run_evaluates_and_answers_line_by_line(qa_run, capsys, monkeypatch) -> None:
    status, out, _ = run(capsys, monkeypatch, "", "eval", str(qa_run))
    metrics = json.loads("\n".join(out))
    assert status == 0 and {"loss", "exact_match", "f1", "span_accuracy"} <= metrics.keys()
    contexts = [f"{FILLER} The winner is Ada. Then more.", "The winner is Zoë in Köln."]
    lines = f"Who won?\t{contexts[0]}\n\nWho won?\t{contexts[1]}\nWho?\t\n"
    for quantize in ([], ["--quantize", "int8"]):
        status, out, _ = run(capsys, monkeypatch, lines, "answer", str(qa_run), *quantize)
        assert status == 0 and len(out) == 4 and out[1] == ""
        for line, context in zip([out[0], out[2]], contexts, strict=True):
            answer, score = line.split("\t")
            assert answer and answer in context and 0 < float(score) <= 1
        assert out[3] == "\t0.0000"  # no context: no answer


def test_answer_lines_need_a_tab(qa_run, capsys, monkeypatch) -> None:
    status, _, err = run(capsys, monkeypatch, "Who won?\n", "answer", str(qa_run))
    assert status == 2 and "line 1: expected 'question<TAB>context'" in err


def test_attention_on_a_qa_run(qa_run, tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "attn.png"
    text = "Who won?\tThe winner is Ada."
    status, _, err = run(capsys, monkeypatch, "", "attention", str(qa_run), text, "--out", str(out))
    assert status == 0, err
    assert out.stat().st_size > 0


def test_cloze_questions_join_the_training_split_only(tmp_path, monkeypatch) -> None:
    context = "Ada met Grace in London. Later Grace moved to London in 1952."
    data = squad_file(tmp_path / "train.json", [(context, "Who met Ada?", "Grace")])
    settings = [f"data.train='{data}'", f"data.val='{data}'", "data.dataset=none"]
    plain = QuestionAnsweringTask(Recipe.load(RECIPES / "squad.toml", settings))
    assert len(plain.read("train")) == 1
    task = QuestionAnsweringTask(
        Recipe.load(RECIPES / "squad.toml", [*settings, "data.qa.cloze_questions=2"])
    )
    train = task.read("train")
    assert sorted((q.question, q.context) for q in train[1:]) == [
        ("Ada met Grace in what?", "Later Grace moved to London in 1952."),
        ("Ada met what in London?", "Later Grace moved to London in 1952."),
        ("Later Grace moved to what in 1952?", "Ada met Grace in London."),
        ("Later what moved to London in 1952?", "Ada met Grace in London."),
    ]
    assert len(task.read("val")) == 1
    learnt = []
    monkeypatch.setattr(task, "train_tokenizer", lambda texts, _: learnt.append(texts))
    task.prepare()
    assert learnt == [[context, "Who met Ada?"]], "the tokenizer reads no cloze context"


def test_a_fine_tune_marking_the_question_adds_a_segment_to_a_pretrained_encoder(
    tmp_path, mlm_run, capsys, monkeypatch
) -> None:
    """From a masked-LM run with two segment ids, ``data.pairs.mark_shared_words`` gives the model a
    third that starts as a copy of the context's, so the fine-tune starts from the
    pretrained model unchanged; it trains, evaluates and answers."""
    context = "Ada met Grace in London. Later Grace moved to Paris in 1952."
    data = squad_file(tmp_path / "train.json", [(context, "Who moved to Paris?", "Grace")] * 4)
    run_dir = tmp_path / "run"
    train(
        run_dir,
        "squad.toml",
        f"train.init_from='{mlm_run}'",
        f"data.train='{data}'",
        f"data.val='{data}'",
        "data.dataset=none",
        "data.pairs.mark_shared_words=true",
        "data.max_len=32",
        "data.qa.doc_stride=8",
        "train.lr=1e-9",
    )
    _, start = load_run(mlm_run)
    _, tuned = load_run(run_dir)
    segments = start.embedding.segments.weight
    assert segments.shape[0] == 2 and tuned.config.type_vocab_size == 3
    expected = torch.cat([segments, segments[1:]])
    torch.testing.assert_close(tuned.embedding.segments.weight, expected, atol=1e-6, rtol=0)
    code, lines, _ = run(capsys, monkeypatch, f"Who moved?\t{context}\n", "answer", str(run_dir))
    assert code == 0 and len(lines) == 1
    with pytest.warns(UserWarning, match="token type 2.*pass them as token_type_ids"):
        export_hf(run_dir, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["type_vocab_size"] == 3
