import gzip
import json
from pathlib import Path

import pytest

from scratchformer.data import (
    DataError,
    LabeledText,
    TaggedSentence,
    read_chat,
    read_conll,
    read_lines,
    read_parallel,
    read_squad,
    read_text,
    read_tsv,
)
from scratchformer.data.registry import DATASETS


def error(read, *args, **kwargs) -> str:
    """The message of the DataError that ``read(*args, **kwargs)`` raises."""
    with pytest.raises(DataError) as info:
        read(*args, **kwargs)
    return str(info.value)


def write(path: Path, content: str | bytes) -> Path:
    data = content.encode() if isinstance(content, str) else content
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


# --- the real files ------------------------------------------------------------------------


def test_sst2_rows_with_crlf_endings_and_different_headers(data_dir: Path) -> None:
    train = read_tsv(
        data_dir / "sst2/train.tsv", "sentence", "label", header=True, labels=("0", "1")
    )
    dev = read_tsv(data_dir / "sst2/dev.tsv", "content", "label", header=True, labels=("0", "1"))
    assert (len(train), len(dev)) == (67_349, 872)
    assert not any("\r" in example.texts[0] for example in train)
    assert train[0] == LabeledText(("hide new secretions from the parental units",), "0", 2)
    assert train[-1].texts[0].endswith("must be a serious contender for the title .")
    assert train[-1].line == 67_350
    assert dev[0] == LabeledText(("one long string of cliches .",), "0", 2)


def test_stsb_pairs_by_index_without_header(data_dir: Path) -> None:
    train = read_tsv(data_dir / "stsb/train.tsv", (7, 8), 9, header=False, regression=True)
    dev = read_tsv(data_dir / "stsb/dev.tsv", (7, 8), 9, header=False, regression=True)
    assert (len(train), len(dev)) == (4_249, 1_500)
    assert train[0] == LabeledText(
        ("A plane is taking off.", "An air plane is taking off."), 5.0, 1
    )
    assert dev[-1].label == 0.0 and dev[-1].texts[0].startswith("Dozens of Egyptians")
    assert all(0.0 <= example.label <= 5.0 for example in train + dev)


def test_conll2003_sentences(data_dir: Path) -> None:
    train = read_conll(data_dir / "conll2003/train.txt")
    dev = read_conll(data_dir / "conll2003/dev.txt")
    assert (len(train), len(dev)) == (14_041, 3_250)
    assert train[0] == TaggedSentence(
        ("EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."),
        ("B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"),
        1,
    )
    assert train[1] == TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER"), 11)
    assert dev[-1].tokens[-1] == "880-2-506363" and dev[-1].tags[-1] == "O"


@pytest.mark.parametrize(
    ("split", "count"), [("train", 29_000), ("val", 1_014), ("test_2016_flickr", 1_000)]
)
def test_multi30k_parallel_gzip(split: str, count: int, data_dir: Path) -> None:
    pairs = read_parallel(
        data_dir / f"multi30k/{split}.en.gz", data_dir / f"multi30k/{split}.de.gz"
    )
    assert len(pairs) == count
    if split == "train":
        assert pairs[0] == (
            "Two young, White males are outside near many bushes.",
            "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
        )


def test_tinyshakespeare_text(data_dir: Path) -> None:
    text = read_text(data_dir / "tinyshakespeare/input.txt")
    assert len(text) == 1_115_394
    assert text.startswith("First Citizen:\n") and text.endswith("art waking.\n")
    assert len(read_lines(data_dir / "tinyshakespeare/input.txt")) == 40_000


# --- well-formed quirks --------------------------------------------------------------------


def test_crlf_becomes_lf_and_newlines_are_kept(tmp_path) -> None:
    path = write(tmp_path / "a.txt", "one\r\ntwo\r\n\r\nthree")
    assert read_text(path) == "one\ntwo\n\nthree"
    assert read_lines(path) == ["one", "two", "", "three"]


def test_tsv_is_literal_and_columns_go_by_name_or_index(tmp_path) -> None:
    path = write(tmp_path / "a.tsv", "id\ts1\ts2\tscore\r\n7\t\"quoted\tit's\t2.5\r\n\n")
    by_name = read_tsv(path, ["s1", "s2"], "score", header=True, regression=True)
    assert by_name == [LabeledText(('"quoted', "it's"), 2.5, 2)]
    assert read_tsv(path, (1, 2), 3, header=True, regression=True) == by_name
    assert read_tsv(path, 1, "id", header=True) == [LabeledText(('"quoted',), "7", 2)]


def test_conll_skips_docstart_and_takes_first_and_last_columns(tmp_path) -> None:
    path = write(tmp_path / "a.txt", "-DOCSTART- -X- O O\n\nEU NNP B-NP B-ORG\nrejects VBZ O\n\n\n")
    assert read_conll(path) == [TaggedSentence(("EU", "rejects"), ("B-ORG", "O"), 3)]


# --- every malformed case names the file and the line --------------------------------------


def test_parallel_files_of_different_lengths(tmp_path) -> None:
    source = write(tmp_path / "a.de", "eins\nzwei\ndrei\n")
    target = write(tmp_path / "a.en.gz", "one\ntwo\n")
    message = error(read_parallel, source, target)
    assert message.startswith(f"{source}:3: no matching line in {target}, which ends at line 2")
    assert f"{source} has 3 lines, {target} has 2" in message
    assert error(read_parallel, target, source).startswith(f"{source}:3: ")


def test_tsv_row_with_the_wrong_number_of_columns(tmp_path) -> None:
    path = write(tmp_path / "a.tsv", "label\tsentence\n1\tgood\n0\tbad\textra\n")
    assert error(read_tsv, path, 1, 0, header=True) == f"{path}:3: expected 2 columns, found 3"
    path = write(tmp_path / "b.tsv", "1\tgood\n0\n")
    assert error(read_tsv, path, 1, 0, header=False) == f"{path}:2: expected 2 columns, found 1"


def test_tsv_label_outside_the_label_set(tmp_path) -> None:
    path = write(tmp_path / "a.tsv", "label\tsentence\n1\tgood\n2\tbad\n")
    message = error(read_tsv, path, 1, 0, header=True, labels=["0", "1"])
    assert message == f"{path}:3: label '2' is not one of '0', '1'"


@pytest.mark.parametrize("score", ["high", "nan", ""])
def test_tsv_regression_target_that_is_not_a_number(tmp_path, score: str) -> None:
    path = write(tmp_path / "a.tsv", f"a\tb\t1.5\nc\td\t{score}\n")
    message = error(read_tsv, path, (0, 1), 2, header=False, regression=True)
    assert message.startswith(f"{path}:2: label {score!r} is not a")


def test_tsv_unknown_column_names_the_header(tmp_path) -> None:
    path = write(tmp_path / "a.tsv", "label\tcontent\n1\tgood\n")
    message = error(read_tsv, path, "sentence", "label", header=True)
    assert message == f"{path}:1: no column 'sentence'; the header has ['label', 'content']"
    assert error(read_tsv, path, 5, 0, header=True).startswith(f"{path}:1: column 5 is out")
    with pytest.raises(ValueError, match="needs header=True"):
        read_tsv(path, "content", 0, header=False)


def test_conll_line_without_a_tag(tmp_path) -> None:
    path = write(tmp_path / "a.txt", "EU B-ORG\nrejects O\n\nPeter\n")
    assert error(read_conll, path).startswith(f"{path}:4: expected 'token tag', found 'Peter'")


@pytest.mark.parametrize(
    ("read", "content", "message"),
    [
        (read_text, "", "empty file"),
        (read_lines, "\r\n\n", "empty file"),
        (read_tsv, "label\tsentence\r\n", "no data rows after the header"),
        (read_conll, "-DOCSTART- O\n\n", "no sentences"),
    ],
)
def test_empty_files(tmp_path, read, content: str, message: str) -> None:
    path = write(tmp_path / "a.gz", content)
    args = (1, 0, True) if read is read_tsv else ()
    assert error(read, path, *args) == f"{path}: {message}"


@pytest.mark.parametrize("name", ["a.txt", "a.txt.gz"])
def test_bytes_that_are_not_utf8(tmp_path, name: str) -> None:
    path = write(tmp_path / name, b"fine\nstill fine\nbad \xff\xfe\nok\n")
    assert error(read_lines, path) == f"{path}:3: not valid UTF-8 (byte 0xff)"
    assert error(read_conll, path).startswith(f"{path}:3: ")


def test_a_broken_gzip_file(tmp_path) -> None:
    path = tmp_path / "a.gz"
    path.write_bytes(b"not gzip at all")
    assert error(read_text, path).startswith(f"{path}: not a valid gzip file")
    path.write_bytes(gzip.compress(b"cut short\n")[:-6])
    assert error(read_text, path).startswith(f"{path}: not a valid gzip file")


# --- SQuAD JSON ------------------------------------------------------------------------------


def test_squad_questions_of_the_real_files(data_dir: Path) -> None:
    train, val = DATASETS["squad"].examples("train"), DATASETS["squad"].examples("val")
    assert (len(train), len(val)) == (6713, 1168)
    assert min(len(q.answers) for q in val) >= 1 and max(len(q.answers) for q in val) > 1
    for question in train[:50] + val[:50]:
        for answer in question.answers:
            assert question.context[answer.start : answer.end] == answer.text


def squad(context: object = "Ada wrote it.", answer: object = None, **qa: object) -> dict:
    answer = {"text": "Ada", "answer_start": 0} if answer is None else answer
    question = {"id": "q1", "question": "Who?", "answers": [answer], **qa}
    paragraph = {"qas": [question]} if context is None else {"context": context, "qas": [question]}
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [paragraph]}]}


def test_squad_reads_a_question_with_its_key(tmp_path) -> None:
    (question,) = read_squad(write(tmp_path / "s.json", json.dumps(squad())))
    assert (question.id, question.question, question.context) == ("q1", "Who?", "Ada wrote it.")
    assert question.answers[0].text == "Ada" and question.answers[0].end == 3
    assert question.key == "data[0].paragraphs[0].qas[0]"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (squad(context=None), "data[0].paragraphs[0].context: missing"),
        (squad(context=7), "data[0].paragraphs[0].context: expected a string, found 7"),
        (
            squad(answer={"text": "wrote", "answer_start": 0}),
            "data[0].paragraphs[0].qas[0].answers[0]: answer_start=0 does not match its text "
            "'wrote' (the context reads 'Ada w' there)",
        ),
        (
            squad(answer={"text": "Ada"}),
            "data[0].paragraphs[0].qas[0].answers[0].answer_start: missing",
        ),
        (squad(answers=[]), "data[0].paragraphs[0].qas[0].answers: no answer"),
        ({"version": "1.1"}, "data: missing"),
        ({"data": [[]]}, "data[0]: expected an object"),
    ],
)
def test_malformed_squad_names_file_and_key(tmp_path, content, message: str) -> None:
    path = write(tmp_path / "s.json", json.dumps(content))
    assert error(read_squad, path) == f"{path}: {message}"


def test_squad_that_is_not_json_names_its_line(tmp_path) -> None:
    path = write(tmp_path / "s.json", '{"data": [\n  oops\n]}')
    assert error(read_squad, path).startswith(f"{path}:2: not valid JSON")


# --- chat JSONL ------------------------------------------------------------------------------

USER = {"role": "user", "content": "hi"}
ASSISTANT = {"role": "assistant", "content": "hello", "name": "bot"}


def test_chat_lines_are_conversations_with_their_lines(tmp_path) -> None:
    lines = [{"messages": [USER, ASSISTANT]}, {"messages": [ASSISTANT]}]
    path = write(tmp_path / "chat.jsonl.gz", "\n".join(map(json.dumps, lines)) + "\n\n")
    read = read_chat(path)
    assert [(c.messages, c.line) for c in read] == [((USER, ASSISTANT), 1), ((ASSISTANT,), 2)]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"messages": [', "not valid JSON"),
        ("[1]", 'expected {"messages": [...]}, a non-empty list'),
        ('{"messages": []}', 'expected {"messages": [...]}, a non-empty list'),
        ('{"messages": ["hi"]}', "messages[0] must be a message object, not a string"),
        ('{"messages": [{"role": "tool", "content": "x"}]}', "messages[0]: role 'tool' is not"),
        (
            '{"messages": [{"role": "user", "content": 3}]}',
            "messages[0]: 'content' is not a string (a number)",
        ),
        ('{"messages": [{"role": "user", "content": "hi"}]}', "no assistant message"),
    ],
)
def test_malformed_chat_lines_name_file_and_line(tmp_path, line: str, message: str) -> None:
    path = write(
        tmp_path / "chat.jsonl", json.dumps({"messages": [USER, ASSISTANT]}) + f"\n{line}\n"
    )
    assert error(read_chat, path).startswith(f"{path}:2: ")
    assert message in error(read_chat, path)
