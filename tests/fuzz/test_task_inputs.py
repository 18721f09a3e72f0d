"""The data files of every task (TSV, CoNLL, SQuAD JSON, plain text, chat JSONL), damaged, read by
``eval --data``; standard input of any bytes, read by classify, tag, answer, fill-mask,
fill-spans and translate; and any prompt, continued by generate. Each command answers, or
refuses in one line that names the file (standard input) or option."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.strategies import assert_sound_or_refused, cli, examples
from helpers import CHAT, CONLL

FIXTURE = [HealthCheck.function_scoped_fixture]


def squad(context: str, question: str, answer: str, start: int) -> str:
    qas = [{"id": "1", "question": question, "answers": [{"text": answer, "answer_start": start}]}]
    data = [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]
    return json.dumps({"version": "1.1", "data": data})


VALID = {
    "classification": "text\tlabel\ngood fun\tpos\nbad dull\tneg\n",
    "tagging": CONLL,
    "qa": squad("The winner is Ada. Then more.", "Who won?", "Ada", 14),
    "mlm": "the cat sat on the mat .\na dog ran under the old tree .\n",
    "sft": "".join(json.dumps({"messages": conversation}) + "\n" for conversation in CHAT),
}
"""A valid data file of each run's task, to damage."""

PIECES = st.sampled_from(
    ["\t", "\n", "\r\n", "\x00", " ", "\ufeff", "é", "[MASK]", "{", "}", '"', ",", ":", "-1",
     "999999999999", "null", "[]", "B-", "I-XYZ", "O O", "\t\t", "\u2028", "😀"]
)  # fmt: skip


@st.composite
def damaged(draw: st.DrawFn, text: str) -> bytes:
    """``text`` with a few pieces cut out, put in or repeated, perhaps a huge line, encoded in
    UTF-8 (a fifth of the time with bytes that are not, a tenth of the time nothing)."""
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        change = draw(st.sampled_from(["cut", "insert", "repeat", "huge"]))
        if change == "cut":
            text = text[:at] + text[at + draw(st.integers(1, 20)) :]
        elif change == "insert":
            text = text[:at] + draw(PIECES | st.text(max_size=6)) + text[at:]
        elif change == "repeat":
            text = text[:at] + text[at : at + 30] * draw(st.integers(2, 5)) + text[at:]
        else:
            text = text[:at] + "w" * 50_000 + text[at:]
    data = text.encode("utf-8")
    kind = draw(st.integers(0, 9))  # mostly text, sometimes not UTF-8, rarely nothing
    if kind == 0:
        return b""
    if kind <= 2:
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.sampled_from([b"\xff\xfe", b"\xc3", b"\x80"])) + data[at:]
    return data


@pytest.mark.parametrize("task", sorted(VALID))
@settings(max_examples=examples(8), deadline=None, suppress_health_check=FIXTURE)
@given(data=st.data())
def test_a_damaged_data_file_is_evaluated_or_refused_naming_it(
    task, classification_run, tagging_run, qa_run, mlm_run, sft_run, data
) -> None:
    runs = {
        "classification": classification_run,
        "tagging": tagging_run,
        "qa": qa_run,
        "mlm": mlm_run,
        "sft": sft_run,
    }
    suffix = {"qa": ".json", "mlm": ".txt", "tagging": ".txt", "sft": ".jsonl"}.get(task, ".tsv")
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / f"data{suffix}"
        path.write_bytes(data.draw(damaged(VALID[task])))
        status, out, err = cli("eval", str(runs[task]), "--data", str(path))
        assert_sound_or_refused(status, err, str(path))
        if status == 0:
            assert json.loads(out)["split"] == str(path)


INPUTS = {
    "classify": ("classification", "good fun\nbad\n"),
    "tag": ("tagging", "Peter went to Paris\n"),
    "answer": ("qa", "Who won?\tThe winner is Ada.\n"),
    "fill-mask": ("mlm", "the cat [MASK] on the mat .\n"),
    "translate": ("translation", "3 4 5\n7 7 1 2\n"),
    "fill-spans": ("span", "the man<extra_id_0> in the park\na <extra_id_1> dog<extra_id_0>\n"),
}
"""Each command that reads standard input a line at a time, the run it reads with, and a
valid input to damage."""


@pytest.mark.parametrize("command", sorted(INPUTS))
@settings(max_examples=examples(8), deadline=None, suppress_health_check=FIXTURE)
@given(data=st.data())
def test_standard_input_of_any_bytes_is_answered_or_refused(
    command, classification_run, tagging_run, qa_run, mlm_run, copy_run, span_run, data
) -> None:
    runs = {"classification": classification_run, "tagging": tagging_run, "qa": qa_run}
    runs |= {"mlm": mlm_run, "translation": copy_run, "span": span_run}
    kind, valid = INPUTS[command]
    stdin = data.draw(damaged(valid) | st.binary(max_size=40))
    status, _, err = cli(command, str(runs[kind]), stdin=stdin)
    assert_sound_or_refused(status, err, "standard input")


@settings(max_examples=examples(12), deadline=None, suppress_health_check=FIXTURE)
@given(prompt=st.text(max_size=30) | st.sampled_from(["", "\x00", "\udcff", "to be\r\n"]))
def test_any_prompt_is_continued_or_refused(lm_run, prompt) -> None:
    """``generate --prompt``: any text (a lone surrogate is what a prompt of bytes that are
    not UTF-8 becomes in ``sys.argv``) is continued, or refused naming the option."""
    status, out, err = cli("generate", str(lm_run), "--prompt", prompt, "--max-new-tokens", "4")
    assert_sound_or_refused(status, err, "--prompt")
    if status == 0:
        assert out.startswith(prompt)
