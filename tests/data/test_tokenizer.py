import errno
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as Backend
from tokenizers import models, pre_tokenizers

from scratchformer.config import TOKENIZERS
from scratchformer.data.tokenizer import SENTINEL, SPECIAL_TOKENS, Tokenizer

LM = ("pad", "bos", "eos")
CLASSIFY = ("pad", "unk", "cls", "sep", "mask")


@pytest.fixture(scope="module")
def shakespeare(data_dir: Path) -> str:
    return (data_dir / "tinyshakespeare/input.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sst2(data_dir: Path) -> list[str]:
    lines = (data_dir / "sst2/train.tsv").read_text(encoding="utf-8").splitlines()[1:3001]
    return [line.split("\t")[1] for line in lines]


@pytest.fixture(scope="module")
def char(shakespeare: str) -> Tokenizer:
    return Tokenizer.train("char", [shakespeare], 1000, LM)


@pytest.fixture(scope="module")
def bpe(shakespeare: str) -> Tokenizer:
    return Tokenizer.train("bpe", [shakespeare[:100_000]], 600, ("pad", "unk", *LM[1:]))


@pytest.fixture(scope="module")
def wordpiece(sst2: list[str]) -> Tokenizer:
    return Tokenizer.train("wordpiece", sst2, 1500, CLASSIFY, lowercase=True)


def test_char_tokenizer_on_tiny_shakespeare_has_its_65_symbols(
    char: Tokenizer, shakespeare: str
) -> None:
    assert char.vocab_size == 3 + 65
    assert char.tokens(range(3, 68)) == sorted(set(shakespeare))  # nanoGPT's order


def test_char_round_trip_is_exact(char: Tokenizer, shakespeare: str) -> None:
    text = shakespeare[:20_000]
    ids = char.encode(text)
    assert len(ids) == len(text) and char.decode(ids) == text
    with_ends = char.encode("To be\n", add_bos=True, add_eos=True)
    assert with_ends[0] == char.bos_id and with_ends[-1] == char.eos_id
    assert char.decode(with_ends) == "To be\n"


def test_char_unseen_characters_are_unk_or_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'é'"):
        Tokenizer.train("char", ["abc"], 100, LM).encode("abé")
    with_unk = Tokenizer.train("char", ["abc"], 100, ("pad", "unk"))
    assert with_unk.encode("abé")[-1] == with_unk.unk_id == 1


def test_char_vocab_size_is_an_upper_bound_keeping_frequent_characters() -> None:
    tokenizer = Tokenizer.train("char", ["aaabbc"], 4, ("pad", "unk"))
    assert tokenizer.vocab_size == 4
    assert tokenizer.encode("abc") == [2, 3, tokenizer.unk_id]
    with pytest.raises(ValueError, match="vocab_size=4"):
        Tokenizer.train("char", ["aaabbcd"], 4, ("pad", "eos"))


def test_bpe_round_trip_is_exact_on_shakespeare(bpe: Tokenizer, shakespeare: str) -> None:
    text = shakespeare[-20_000:]  # not seen in training
    ids = bpe.encode(text)
    assert len(ids) < 0.6 * len(text) and bpe.decode(ids) == text


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_bpe_round_trip_is_exact_on_any_unicode(bpe: Tokenizer, text: str) -> None:
    assert bpe.decode(bpe.encode(text)) == text


def test_special_strings_in_the_text_are_plain_text(bpe: Tokenizer) -> None:
    ids = bpe.encode("<s> [CLS] </s>")
    assert not set(ids) & set(bpe.special_ids)
    assert bpe.decode(ids) == "<s> [CLS] </s>"


def test_wordpiece_round_trips_lowercased_sst2_words(wordpiece: Tokenizer, sst2: list[str]) -> None:
    backend = wordpiece.backend
    for text in sst2[:200]:
        ids = wordpiece.encode(text)
        assert wordpiece.unk_id not in ids
        words = backend.pre_tokenizer.pre_tokenize_str(text.lower())
        assert wordpiece.decode(ids) == " ".join(word for word, _ in words)
    assert wordpiece.encode("A Charming FILM") == wordpiece.encode("a charming film")
    assert any(token.startswith("##") for token in wordpiece.tokens(range(wordpiece.vocab_size)))


def test_labels_are_readable_text(bpe: Tokenizer, char: Tokenizer, wordpiece: Tokenizer) -> None:
    german = Tokenizer.train("bpe", ["Ein Mann fährt über eine Brücke."] * 3, 300, ("bos",))
    ids = german.encode("Ein Mann fährt", add_bos=True)
    assert german.tokens(ids)[:3] == ["<s>", "Ein", "ĠMann"]
    assert german.labels(ids) == ["<s>", "Ein", "Mann", "fährt"]
    assert char.labels(char.encode("a b\n")) == ["a", "␣", "b", "↵"]
    pieces = wordpiece.encode("unwatchable")
    assert wordpiece.labels(pieces) == wordpiece.tokens(pieces)


def test_specials_come_first_in_canonical_order() -> None:
    tokenizer = Tokenizer.train("bpe", ["hello world"], 300, ("eos", "mask", "pad", "bos"))
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.mask_id) == (0, 1, 2, 3)
    assert tokenizer.unk_id is tokenizer.cls_id is tokenizer.sep_id is None
    assert tokenizer.special_ids == (0, 1, 2, 3)
    assert tokenizer.tokens([0, 3]) == [SPECIAL_TOKENS["pad"], SPECIAL_TOKENS["mask"]]
    with pytest.raises(ValueError, match="no cls token"):
        tokenizer.encode_pair("a", "b")


def test_invalid_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown special token role"):
        Tokenizer.train("char", ["a"], 10, ("pad", "start"))
    with pytest.raises(ValueError, match="kind="):
        Tokenizer.train("unigram", ["a"], 10, ("pad",))
    with pytest.raises(ValueError, match="needs the 'unk'"):
        Tokenizer.train("wordpiece", ["a"], 10, ("pad", "cls"))
    with pytest.raises(ValueError, match="too small"):
        Tokenizer.train("bpe", ["a"], 100, ("pad",))


@pytest.mark.parametrize("kind", TOKENIZERS)
def test_training_is_deterministic(kind: str, shakespeare: str, tmp_path: Path) -> None:
    texts = shakespeare[:50_000].splitlines()
    for name in ("a.json", "b.json"):
        Tokenizer.train(kind, texts, 500, ("pad", "unk", "bos", "eos")).save(tmp_path / name)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


@pytest.mark.parametrize("name", ["char", "bpe", "wordpiece"])
def test_save_and_load_keep_encodings_and_roles(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tokenizer: Tokenizer = request.getfixturevalue(name)
    tokenizer.save(tmp_path / "tokenizer.json")
    loaded = Tokenizer.load(tmp_path / "tokenizer.json")
    assert loaded.specials == tokenizer.specials and loaded.vocab_size == tokenizer.vocab_size
    text = "my lord, the king is dead.\n"
    assert loaded.encode(text) == tokenizer.encode(text)
    assert pickle.loads(pickle.dumps(tokenizer)).encode(text) == tokenizer.encode(text)


@pytest.mark.parametrize("kind", ["char", "wordpiece"])  # no normalizer; BERT's, cased
def test_lowercased_reads_text_as_its_lower_case_with_the_same_vocabulary(
    kind: str, sst2: list[str], tmp_path: Path
) -> None:
    cased = Tokenizer.train(kind, sst2, 1500, CLASSIFY)
    lowered = cased.lowercased()
    text = "The Film's Heart, by Spielberg"
    assert cased.encode(text) != cased.encode(text.lower())  # the original is left as it was
    assert lowered.encode(text) == cased.encode(text.lower())
    assert lowered.specials == cased.specials and lowered.vocab_size == cased.vocab_size
    lowered.save(tmp_path / "tokenizer.json")
    assert Tokenizer.load(tmp_path / "tokenizer.json").encode(text) == lowered.encode(text)


def test_special_strings_stay_plain_text_after_load_and_pickle(
    bpe: Tokenizer, tmp_path: Path
) -> None:
    bpe.save(tmp_path / "tokenizer.json")
    for tokenizer in (Tokenizer.load(tmp_path / "tokenizer.json"), pickle.loads(pickle.dumps(bpe))):
        assert tokenizer.encode("[CLS] <s>") == bpe.encode("[CLS] <s>")
        assert not set(tokenizer.encode("[CLS] <s>")) & set(bpe.special_ids)


@pytest.mark.parametrize("kind", TOKENIZERS)
def test_sentinels_follow_the_specials_and_survive_save_load_and_pickle(
    kind: str, shakespeare: str, tmp_path: Path
) -> None:
    texts = shakespeare[:20_000].splitlines()
    tokenizer = Tokenizer.train(kind, texts, 400, ("pad", "unk", "bos", "eos"), sentinels=3)
    assert tokenizer.sentinel_ids == [4, 5, 6] and tokenizer.vocab_size <= 400
    assert tokenizer.tokens([4, 6]) == [SENTINEL.format(0), SENTINEL.format(2)]
    assert tokenizer.special_ids == (0, 1, 2, 3, 4, 5, 6)
    tokenizer.save(tmp_path / "tokenizer.json")
    copies = Tokenizer.load(tmp_path / "tokenizer.json"), pickle.loads(pickle.dumps(tokenizer))
    for copy in copies:
        assert copy.sentinel_ids == [4, 5, 6] and copy.specials == tokenizer.specials
        text = "my lord <extra_id_0> is dead"
        assert copy.encode(text) == tokenizer.encode(text)
        assert not set(copy.encode(text)) & {4, 5, 6}, "never from raw text"
    ids = [*tokenizer.encode("my lord"), 4, *tokenizer.encode("dead")]
    assert "<extra_id_0>" not in tokenizer.decode(ids)
    assert "<extra_id_0>" in tokenizer.decode(ids, skip_special=False)
    assert Tokenizer.train(kind, texts, 400, ("pad", "unk")).sentinel_ids == []


def test_encode_sentinels_puts_each_marked_sentinel_between_the_texts_pieces() -> None:
    tokenizer = Tokenizer.train("char", ["my lord is dead</s>"], 40, ("pad", "eos"), sentinels=2)
    encode = tokenizer.encode
    assert tokenizer.encode_sentinels("my<extra_id_1> is <extra_id_0><s>") == [
        *encode("my"),
        3,
        *encode(" is "),
        2,
        *encode("<s>"),
    ]
    assert tokenizer.encode_sentinels("lord") == encode("lord")
    with pytest.raises(ValueError, match="<extra_id_2>: this tokenizer has 2 sentinels"):
        tokenizer.encode_sentinels("my <extra_id_2>")


def test_a_failed_save_leaves_the_old_file(tmp_path: Path, monkeypatch) -> None:
    """The file is replaced whole or not at all: here the disk fills up at the flush."""
    path = tmp_path / "tokenizer.json"
    Tokenizer.train("char", ["abc"], 50, LM).save(path)
    old = path.read_bytes()

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        Tokenizer.train("char", ["abcdef"], 50, LM).save(path)
    assert path.read_bytes() == old
    assert list(tmp_path.iterdir()) == [path]


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing\.json"):
        Tokenizer.load(tmp_path / "missing.json")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"version": "1.0", "model": ', encoding="utf-8")
    with pytest.raises(ValueError, match=r"corrupt\.json"):
        Tokenizer.load(corrupt)


def test_encode_batch_matches_encode(bpe: Tokenizer, shakespeare: str) -> None:
    lines = shakespeare.splitlines()[:500]
    batch = bpe.encode_batch(lines, add_eos=True)
    assert batch == [bpe.encode(line, add_eos=True) for line in lines]


def test_encode_pair_marks_segments(wordpiece: Tokenizer) -> None:
    ids, segments = wordpiece.encode_pair("a fine film", "awful")
    a, b = wordpiece.encode("a fine film"), wordpiece.encode("awful")
    cls, sep = wordpiece.cls_id, wordpiece.sep_id
    assert ids == [cls, *a, sep, *b, sep]
    assert segments == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    long = "a fine film " * 10  # longest first: only the long text loses tokens
    ids, segments = wordpiece.encode_pair(long, "awful", max_len=3 + 2 * len(b))
    assert ids == [cls, *wordpiece.encode(long)[: len(b)], sep, *b, sep]
    assert len(segments) == len(ids) == 3 + 2 * len(b)
    encoded = wordpiece.encode(long)  # the same from token ids, which are left as they were
    assert wordpiece.join_pair(encoded, b, max_len=3 + 2 * len(b)) == (ids, segments)
    assert encoded == wordpiece.encode(long)


def test_encode_words_aligns_sub_words_to_words(wordpiece: Tokenizer, bpe: Tokenizer) -> None:
    words = ["Unbelievably", "moving", ",", "EU", "rejects", "U.S."]
    ids, word_index = wordpiece.encode_words(words)
    assert len(ids) == len(word_index) and word_index == sorted(word_index)
    assert sorted(set(word_index)) == list(range(len(words)))
    tokens = wordpiece.tokens(ids)
    firsts = [word_index.index(w) for w in range(len(words))]
    assert not any(tokens[i].startswith("##") for i in firsts)
    assert ids == wordpiece.encode(" ".join(words))
    ids, word_index = bpe.encode_words(words)
    assert ids == bpe.encode(" ".join(words))
    assert sorted(set(word_index)) == list(range(len(words)))


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_importing_the_package_changes_no_environment_of_forked_children() -> None:
    result = _run(
        """
        import os
        before = dict(os.environ)
        import scratchformer, scratchformer.config, scratchformer.data.tokenizer
        assert dict(os.environ) == before
        read, write = os.pipe()
        if os.fork() == 0:
            os.write(write, os.environ["TOKENIZERS_PARALLELISM"].encode())
            os._exit(0)
        os.wait()
        print(os.read(read, 100).decode())
        """,
        TOKENIZERS_PARALLELISM="true",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "true"


def _backend_with(specials: list[str]):
    """A word-level ``tokenizers.Tokenizer`` with these special tokens and two words."""
    vocab = {token: i for i, token in enumerate([*specials, "hello", "world"])}
    backend = Backend(models.WordLevel(vocab, unk_token=specials[0]))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.add_special_tokens(specials)
    return backend


def test_bert_and_gpt2_special_strings_are_recognised() -> None:
    bert = Tokenizer(_backend_with(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    assert bert.specials == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    gpt2 = Tokenizer(_backend_with(["<|endoftext|>"]))
    assert gpt2.specials == {"unk": 0, "bos": 0, "eos": 0} and gpt2.special_ids == (0,)
    ours = Tokenizer(_backend_with(["<unk>", "[UNK]", "<|endoftext|>", "</s>"]))
    assert ours.specials == {"unk": 0, "bos": 2, "eos": 3}  # our strings first


def test_explicit_roles_replace_recognition_and_survive_pickling() -> None:
    tokenizer = Tokenizer(
        _backend_with(["[PAD]", "<sep>", "[MASK]"]), {"pad": "[PAD]", "sep": "<sep>"}
    )
    assert tokenizer.specials == {"pad": 0, "sep": 1} and tokenizer.mask_id is None
    assert tokenizer.special_tokens == {"pad": "[PAD]", "sep": "<sep>"}
    assert pickle.loads(pickle.dumps(tokenizer)).specials == tokenizer.specials
    with pytest.raises(ValueError, match="unknown special token role"):
        Tokenizer(_backend_with(["[PAD]"]), {"padding": "[PAD]"})
    with pytest.raises(ValueError, match="the eos token '</s>' is not in the vocabulary"):
        Tokenizer(_backend_with(["[PAD]"]), {"eos": "</s>"})


def test_a_backends_own_padding_and_truncation_are_switched_off() -> None:
    backend = _backend_with(["[PAD]"])
    backend.enable_padding(length=8)
    backend.enable_truncation(max_length=1)
    assert Tokenizer(backend).encode("hello world hello") == [1, 2, 1]


@pytest.mark.parametrize("kind", ["char", "bpe", "wordpiece"])
def test_offsets_are_characters_of_the_text_without_whitespace(kind: str) -> None:
    text = "Zoë  fährt nach 日本 — café."
    tokenizer = Tokenizer.train(kind, [text] * 3, 300, ("pad", "unk", "cls", "sep"))
    ids, offsets = tokenizer.encode_offsets(text)
    assert ids == tokenizer.encode(text) and len(offsets) == len(ids)
    assert all(text[start:end] == text[start:end].strip() for start, end in offsets)
    covered = {i for start, end in offsets for i in range(start, end)}
    assert covered == {i for i, char in enumerate(text) if not char.isspace()}
    assert offsets[-1] == (len(text) - 1, len(text))  # characters: bytes run past the end


def test_wrap_puts_one_text_between_cls_and_sep(wordpiece: Tokenizer) -> None:
    ids = wordpiece.encode("a fine film " * 10)
    cls, sep = wordpiece.cls_id, wordpiece.sep_id
    assert wordpiece.wrap(ids) == [cls, *ids, sep]
    assert wordpiece.wrap(ids, max_len=6) == [cls, *ids[:4], sep]
