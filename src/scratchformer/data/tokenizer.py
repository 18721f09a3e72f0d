"""Char, byte-level BPE and WordPiece tokenizers on Hugging Face ``tokenizers``.

A :class:`Tokenizer` wraps a ``tokenizers.Tokenizer`` and knows the roles of its special
tokens (pad, unk, bos, eos, cls, sep, mask). Trained tokenizers use the fixed strings of
:data:`SPECIAL_TOKENS`, so a saved ``tokenizer.json`` is the library's own format and
loading it recovers the roles; BERT's (``[PAD]``, ``[UNK]``) and GPT-2's
(``<|endoftext|>``) strings are recognised too (:data:`RECOGNISED`), and roles can be
given explicitly. Specials are only ever inserted by this class (``add_bos``,
:meth:`Tokenizer.encode_pair`): the text ``"<s>"`` in the input is encoded as ordinary
text, never as the bos token -- but in the text a chat template renders
(:meth:`Tokenizer.encode_rendered`), where the template writes the special tokens. A
tokenizer may also hold sentinels, T5's ``<extra_id_N>`` special tokens, which span
corruption puts in place of the spans it hides.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from tokenizers import Tokenizer as _Backend
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from ..io import atomic_write_text
from ..registry import Registry

SPECIAL_TOKENS = {
    "pad": "<pad>",
    "unk": "<unk>",
    "bos": "<s>",
    "eos": "</s>",
    "cls": "[CLS]",
    "sep": "[SEP]",
    "mask": "[MASK]",
}
"""Role -> token string. Trained tokenizers give specials the first ids, in this order."""

_OTHER_CONVENTIONS = {
    "pad": ("[PAD]",),  # BERT
    "unk": ("[UNK]", "<|endoftext|>"),  # BERT, GPT-2 (one token for unk, bos and eos)
    "bos": ("<|endoftext|>",),
    "eos": ("<|endoftext|>",),
}
RECOGNISED = {
    role: (token, *_OTHER_CONVENTIONS.get(role, ())) for role, token in SPECIAL_TOKENS.items()
}
"""Role -> the special-token strings that take it when no roles are given, first found wins:
ours, then BERT's and GPT-2's."""

SENTINEL = "<extra_id_{}>"
"""The string of sentinel number N (from 0), as T5 names them."""
_SENTINEL_PATTERN = re.compile(r"<extra_id_(\d+)>")

_PREFIX = "##"  # WordPiece's mark of a sub-word that continues a word


_VISIBLE_SPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


class Tokenizer:
    """Text <-> token ids, with named special tokens.

    Build one with :meth:`train` or :meth:`load`; wrapping any ``tokenizers.Tokenizer``
    also works. ``roles`` (role -> token string, e.g. ``{"pad": "[PAD]"}``) names the
    special tokens; without it, the backend's specials whose strings are in
    :data:`RECOGNISED` get roles. The backend's own padding and truncation are switched
    off: lengths are the caller's business (``max_len`` arguments, batching).
    """

    def __init__(self, backend: _Backend, roles: Mapping[str, str] | None = None) -> None:
        backend.encode_special_tokens = True  # specials in raw text are plain text
        backend.no_padding()
        backend.no_truncation()
        self._backend = backend
        self._roles = recognise_roles(backend) if roles is None else dict(roles)
        _check_roles(self._roles)
        self._ids: dict[str, int] = {}
        for role, token in self._roles.items():
            token_id = backend.token_to_id(token)
            if token_id is None:
                raise ValueError(f"the {role} token {token!r} is not in the vocabulary")
            self._ids[role] = token_id
        self._sentinel_ids = _sentinels(backend)

    # Construction ------------------------------------------------------------------------

    @classmethod
    def train(
        cls,
        kind: str,
        texts: Iterable[str],
        vocab_size: int,
        specials: Iterable[str],
        *,
        lowercase: bool = False,
        sentinels: int = 0,
    ) -> Tokenizer:
        """Train a tokenizer of ``kind`` on ``texts`` (the training split only).

        ``specials`` names the roles the task needs, e.g. ``("pad", "bos", "eos")``; they
        get ids ``0, 1, ...`` in :data:`SPECIAL_TOKENS` order, so pad is 0 when present.
        ``vocab_size`` counts the specials. Training is deterministic.

        - ``char``: one token per character of the texts, ids in code-point order (as in
          nanoGPT's shakespeare_char); encoding is an exact round trip, spaces and newlines
          included. ``vocab_size`` is an upper bound: with more characters than fit, the most
          frequent are kept. A character outside the vocabulary becomes unk when ``"unk"`` is
          a special, else encoding raises ``ValueError`` naming it.
        - ``bpe``: GPT-2 style byte-level BPE; every text round-trips exactly, no unk needed.
        - ``wordpiece``: BERT-style (whitespace and punctuation split, ``##`` continuations);
          needs ``"unk"``. ``decode`` joins the pre-tokenized words with single spaces.

        ``lowercase`` lower-cases text before everything else (round trips then hold up to
        case). Accents are kept. ``sentinels`` adds that many sentinel tokens
        (:data:`SENTINEL`) after the specials, counted in ``vocab_size`` too.
        """
        roles = set(specials)
        _check_roles(roles)
        if kind not in TOKENIZERS:
            raise ValueError(f"kind={kind!r} must be one of {', '.join(TOKENIZERS)}")
        tokens = [token for role, token in SPECIAL_TOKENS.items() if role in roles]
        tokens += [SENTINEL.format(n) for n in range(sentinels)]
        if vocab_size <= len(tokens):
            raise ValueError(f"vocab_size={vocab_size} leaves no room after {len(tokens)} specials")
        return cls(TOKENIZERS[kind](texts, vocab_size, tokens, lowercase))

    @classmethod
    def load(cls, path: str | Path, roles: Mapping[str, str] | None = None) -> Tokenizer:
        """Load a ``tokenizer.json`` written by :meth:`save` (or by ``tokenizers``); ``roles``
        as in the constructor."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"tokenizer file not found: {path}") from None
        try:
            backend = _Backend.from_str(text)
        except Exception as error:  # the library raises a bare Exception
            raise ValueError(f"{path} is not a valid tokenizer.json: {error}") from None
        return cls(backend, roles)

    def lowercased(self) -> Tokenizer:
        """This tokenizer, lower-casing text before its own normalisation: the same
        vocabulary, for a fine-tune whose text's capitals are noise to it (headlines in
        title case read by a cased vocabulary)."""
        backend = _Backend.from_str(self.to_json())
        own = backend.normalizer
        lower = normalizers.Lowercase()
        backend.normalizer = lower if own is None else normalizers.Sequence([lower, own])
        return Tokenizer(backend, self._roles)

    def to_json(self) -> str:
        """The library's ``tokenizer.json`` (byte-identical for identical training)."""
        return self._backend.to_str(pretty=False)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` atomically: a failed save leaves the old file as it was."""
        atomic_write_text(path, self.to_json())

    # Pickling (DataLoader workers under spawn) goes through the JSON, which does not keep
    # ``encode_special_tokens``: rebuilding through __init__ sets it again.

    def __getstate__(self) -> tuple[str, dict[str, str]]:
        return self._backend.to_str(), self._roles

    def __setstate__(self, state: tuple[str, dict[str, str]]) -> None:
        text, roles = state
        self.__init__(_Backend.from_str(text), roles)  # type: ignore[misc]

    # Vocabulary -------------------------------------------------------------------------

    @property
    def backend(self) -> _Backend:
        """The wrapped ``tokenizers.Tokenizer`` (offsets, token strings, ...)."""
        return self._backend

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def specials(self) -> dict[str, int]:
        """Role -> id of the special tokens this tokenizer has."""
        return dict(self._ids)

    @property
    def special_tokens(self) -> dict[str, str]:
        """Role -> token string of the special tokens this tokenizer has."""
        return dict(self._roles)

    @property
    def special_ids(self) -> tuple[int, ...]:
        """The ids of every special token: those with roles and the sentinels."""
        return tuple(sorted({*self._ids.values(), *self.sentinel_ids}))

    @property
    def sentinel_ids(self) -> list[int]:
        """The ids of the sentinels ``<extra_id_0>``, ``<extra_id_1>``, ..., in that order."""
        return list(self._sentinel_ids)

    @property
    def pad_id(self) -> int | None:
        return self._ids.get("pad")

    @property
    def unk_id(self) -> int | None:
        return self._ids.get("unk")

    @property
    def bos_id(self) -> int | None:
        return self._ids.get("bos")

    @property
    def eos_id(self) -> int | None:
        return self._ids.get("eos")

    @property
    def cls_id(self) -> int | None:
        return self._ids.get("cls")

    @property
    def sep_id(self) -> int | None:
        return self._ids.get("sep")

    @property
    def mask_id(self) -> int | None:
        return self._ids.get("mask")

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """The token strings of ``ids``, as the vocabulary spells them."""
        return [self._backend.id_to_token(int(i)) for i in ids]

    def word_starts(self) -> list[bool]:
        """Per id, whether the token begins a word (for whole-word masking): true of all
        but WordPiece's ``##`` continuations. Other kinds of tokenizer do not mark words."""
        if not isinstance(self._backend.model, models.WordPiece):
            raise ValueError("whole-word masking needs a wordpiece tokenizer")
        return [
            not self._backend.id_to_token(i).startswith(_PREFIX) for i in range(self.vocab_size)
        ]

    def labels(self, ids: Sequence[int]) -> list[str]:
        """The tokens of ``ids`` as a reader wants them on the axes of attention pictures:
        byte-level BPE pieces as the text they stand for (``Ġman`` -> ``man``, ``fÃ¤hrt``
        -> ``fährt``), whitespace-only tokens made visible (``␣``, ``↵``)."""
        tokens = self.tokens(ids)
        if isinstance(self._backend.pre_tokenizer, pre_tokenizers.ByteLevel):
            specials = set(self.tokens(self.special_ids))
            decoder = self._backend.decoder
            tokens = [t if t in specials else decoder.decode([t]) for t in tokens]
        return [token.strip() or token.translate(_VISIBLE_SPACE) for token in tokens]

    # Encoding ---------------------------------------------------------------------------

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        head, tail = self._ends(add_bos, add_eos)
        try:
            ids = self._backend.encode(text, add_special_tokens=False).ids
        except Exception as error:  # the library raises a bare Exception
            raise self._encode_error([text], error) from None
        return head + ids + tail

    def encode_sentinels(self, text: str) -> list[int]:
        """``text`` encoded with each ``<extra_id_N>`` in it as sentinel N, as T5 marks the
        spans to fill (the other special tokens' strings stay plain text); a sentinel the
        tokenizer lacks is an error."""
        pieces = _SENTINEL_PATTERN.split(text)  # text, number, text, number, ..., text
        ids = self.encode(pieces[0])
        for number, piece in zip(pieces[1::2], pieces[2::2], strict=True):
            if int(number) >= len(self._sentinel_ids):
                raise ValueError(
                    f"{SENTINEL.format(number)}: this tokenizer has "
                    f"{len(self._sentinel_ids)} sentinels"
                )
            ids += [self._sentinel_ids[int(number)], *self.encode(piece)]
        return ids

    def encode_batch(
        self, texts: Sequence[str], *, add_bos: bool = False, add_eos: bool = False
    ) -> list[list[int]]:
        """Encode many texts at once (the library encodes them in parallel)."""
        head, tail = self._ends(add_bos, add_eos)
        try:
            encodings = self._backend.encode_batch(list(texts), add_special_tokens=False)
        except Exception as error:
            raise self._encode_error(texts, error) from None
        return [head + e.ids + tail for e in encodings]

    def encode_pair(
        self, a: str, b: str, *, max_len: int | None = None
    ) -> tuple[list[int], list[int]]:
        """``[CLS] a [SEP] b [SEP]`` and segment ids (0 up to the first sep, then 1).

        With ``max_len`` the longer of the two texts loses its last token until the whole
        fits (BERT's "longest first" truncation).
        """
        return self.join_pair(self.encode(a), self.encode(b), max_len=max_len)

    def wrap(self, ids: Sequence[int], *, max_len: int | None = None) -> list[int]:
        """``[CLS] ids [SEP]``, with ``max_len`` the ids cut so that the whole fits."""
        kept = ids if max_len is None else ids[: max_len - 2]
        return [self.cls_id, *kept, self.sep_id]

    def join_pair(
        self, ids_a: Sequence[int], ids_b: Sequence[int], *, max_len: int | None = None
    ) -> tuple[list[int], list[int]]:
        """:meth:`encode_pair` of two texts already encoded (``ids_a``, ``ids_b``: not
        changed)."""
        cls, sep = self._require("cls"), self._require("sep")
        ids_a, ids_b = list(ids_a), list(ids_b)
        if max_len is not None:
            if max_len < 3:
                raise ValueError(f"max_len={max_len} must be at least 3 ([CLS] and two [SEP])")
            while len(ids_a) + len(ids_b) + 3 > max_len:
                (ids_a if len(ids_a) >= len(ids_b) else ids_b).pop()
        ids = [cls, *ids_a, sep, *ids_b, sep]
        segments = [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
        return ids, segments

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids of ``text`` and, per token, the characters ``(start, end)`` of ``text``
        it stands for, whitespace trimmed: byte-level BPE's ``Ġman`` covers ``man``, not
        `` man``. Offsets count characters (code points), never bytes: the pieces of one
        character split into several byte tokens each cover the whole character. A token of
        whitespace only covers nothing (``start == end``). Specials are not added."""
        try:
            encoding = self._backend.encode(text, add_special_tokens=False)
        except Exception as error:  # the library raises a bare Exception
            raise self._encode_error([text], error) from None
        offsets = []
        for start, end in encoding.offsets:
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            offsets.append((start, end))
        return encoding.ids, offsets

    def encode_rendered(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids of a text rendered from a chat template, in which the special tokens'
        strings stand for those tokens (as ``transformers`` reads a rendered chat), and the
        characters ``(start, end)`` of ``text`` each token stands for, untrimmed.
        Specials are not added."""
        try:
            encoding = self._reading_specials.encode(text, add_special_tokens=False)
        except Exception as error:  # the library raises a bare Exception
            raise self._encode_error([text], error) from None
        return encoding.ids, encoding.offsets

    @functools.cached_property
    def _reading_specials(self) -> _Backend:
        """A copy of the backend that reads special tokens' strings as those tokens."""
        backend = _Backend.from_str(self._backend.to_str())
        backend.encode_special_tokens = False
        return backend

    def encode_words(self, words: Sequence[str]) -> tuple[list[int], list[int]]:
        """Encode pre-split words (NER): sub-word ids and, per id, the index of its word.

        A word's label goes on its first sub-word. Byte-level BPE sees each word after the
        first with its leading space, so the ids equal those of ``" ".join(words)``; a char
        tokenizer encodes the words back to back. A word that yields no tokens (the empty
        string) is absent from the word indices. Specials are not added.
        """
        words = list(words)
        if isinstance(self._backend.pre_tokenizer, pre_tokenizers.ByteLevel):
            words = words[:1] + [" " + word for word in words[1:]]
        try:
            encoding = self._backend.encode(words, is_pretokenized=True, add_special_tokens=False)
        except Exception as error:
            raise self._encode_error(words, error) from None
        return encoding.ids, [int(i) for i in encoding.word_ids]

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self._backend.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def _ends(self, add_bos: bool, add_eos: bool) -> tuple[list[int], list[int]]:
        return [self._require("bos")] if add_bos else [], [self._require("eos")] if add_eos else []

    def _require(self, role: str) -> int:
        if role not in self._ids:
            have = ", ".join(self._ids) or "none"
            raise ValueError(f"this tokenizer has no {role} token (its specials: {have})")
        return self._ids[role]

    def _encode_error(self, texts: Sequence[str], error: Exception) -> ValueError:
        """A readable error for characters outside a unk-less vocabulary."""
        vocab = self._backend.get_vocab()
        normalizer = self._backend.normalizer
        chars = set("".join(normalizer.normalize_str(t) if normalizer else t for t in texts))
        missing = sorted(c for c in chars if c not in vocab)
        if missing:
            shown = "".join(missing[:20])
            return ValueError(
                f"character(s) {shown!r} are not in the vocabulary and the tokenizer "
                "has no unk token; train on text that contains them or add 'unk'"
            )
        return ValueError(f"cannot encode: {error}")


def recognise_roles(backend: _Backend) -> dict[str, str]:
    """Role -> token for the backend's special tokens whose strings :data:`RECOGNISED` knows."""
    specials = {t.content for t in backend.get_added_tokens_decoder().values() if t.special}
    found = {role: [t for t in tokens if t in specials] for role, tokens in RECOGNISED.items()}
    return {role: tokens[0] for role, tokens in found.items() if tokens}


def _sentinels(backend: _Backend) -> list[int]:
    """The ids of the backend's sentinel tokens, by their number."""
    numbered = {}
    for token_id, token in backend.get_added_tokens_decoder().items():
        match = _SENTINEL_PATTERN.fullmatch(token.content)
        if token.special and match:
            numbered[int(match.group(1))] = token_id
    return [numbered[n] for n in sorted(numbered)]


def _check_roles(roles: Iterable[str]) -> None:
    unknown = sorted(set(roles) - set(SPECIAL_TOKENS))
    if unknown:
        raise ValueError(
            f"unknown special token role(s) {', '.join(unknown)}; "
            f"choose from {', '.join(SPECIAL_TOKENS)}"
        )


# Training ---------------------------------------------------------------------------------

Trainer = Callable[[Iterable[str], int, list[str], bool], _Backend]
"""A kind of tokenizer's training: ``(texts, vocab_size, specials, lowercase)`` -> the
backend, whose first ids are the special token strings ``specials``, in that order."""

TOKENIZERS: Registry[Trainer] = Registry("tokenizer")


def _lowercasing(lowercase: bool) -> normalizers.Normalizer | None:
    """The normalizer of a tokenizer that lower-cases text (``lowercase``), else none."""
    return normalizers.Lowercase() if lowercase else None


@TOKENIZERS.register("char")
def _train_char(
    texts: Iterable[str], vocab_size: int, specials: list[str], lowercase: bool
) -> _Backend:
    normalizer = _lowercasing(lowercase)
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(normalizer.normalize_str(text) if normalizer else text)
    room = vocab_size - len(specials)
    if len(counts) > room and SPECIAL_TOKENS["unk"] not in specials:
        raise ValueError(
            f"the texts have {len(counts)} distinct characters but vocab_size={vocab_size} "
            f"leaves room for {room}; raise vocab_size or add the 'unk' special token"
        )
    kept = sorted(counts, key=lambda c: (-counts[c], c))[:room]
    vocab = {token: i for i, token in enumerate(specials + sorted(kept))}
    backend = _Backend(models.WordLevel(vocab, unk_token=SPECIAL_TOKENS["unk"]))
    backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizers.FixedLength(length=1)
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(specials)
    return backend


@TOKENIZERS.register("bpe")
def _train_bpe(
    texts: Iterable[str], vocab_size: int, specials: list[str], lowercase: bool
) -> _Backend:
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(specials):
        raise ValueError(
            f"data.vocab_size={vocab_size} is too small for byte-level BPE: it needs at least "
            f"{len(alphabet)} byte symbols + {len(specials)} specials"
        )
    backend = _Backend(models.BPE())
    backend.normalizer = _lowercasing(lowercase)
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer)
    return backend


@TOKENIZERS.register("wordpiece")
def _train_wordpiece(
    texts: Iterable[str], vocab_size: int, specials: list[str], lowercase: bool
) -> _Backend:
    if SPECIAL_TOKENS["unk"] not in specials:
        raise ValueError("a wordpiece tokenizer needs the 'unk' special token")
    normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=False)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    texts = list(texts)
    # The trainer numbers the "##" continuation symbols in hash-map order and breaks ties
    # between merges by those numbers, so its vocabulary varies from run to run
    # (huggingface/tokenizers#1794). Listed up front as special tokens, the symbols get
    # fixed numbers; the tokenizer is then rebuilt with only the real specials.
    inner = set()
    for text in texts:
        for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)):
            inner.update(word[1:])
    continuations = [_PREFIX + char for char in sorted(inner)]
    trained = _Backend(models.WordPiece(unk_token=SPECIAL_TOKENS["unk"]))
    trained.normalizer = normalizer
    trained.pre_tokenizer = pre_tokenizer
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        special_tokens=specials + continuations,
        continuing_subword_prefix=_PREFIX,
        show_progress=False,
    )
    trained.train_from_iterator(texts, trainer)
    backend = _Backend(
        models.WordPiece(
            trained.get_vocab(), unk_token=SPECIAL_TOKENS["unk"], continuing_subword_prefix=_PREFIX
        )
    )
    backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.WordPiece(prefix=_PREFIX, cleanup=False)
    backend.add_special_tokens(specials)
    return backend
