"""Structured output: which tokens may come next so that the text follows a grammar (a JSON
schema, any JSON object, a regular expression or a list of choices), computed by
``llguidance``.

Per row and step, the decoding loop fills the row's allowed-token mask (:meth:`Constraint.
fill`, or :func:`fill_masks` for several rows at once), sets the other logits to ``-inf``,
samples, and hands the token to :meth:`Constraint.advance`. Once the grammar is complete the
eos token is allowed; once nothing may follow (:attr:`Constraint.finished`) it is the only
token allowed.

``llguidance`` sees a token as the bytes it adds to the text. A tokenizer whose tokens
decode to fixed bytes is supported: byte-level BPE (GPT-2's), SentencePiece-style
``▁``-for-space vocabularies (BPE or unigram, with or without byte fallback) and the
character tokenizer; WordPiece is not, as its decoder puts spaces between tokens depending
on their neighbours.
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import llguidance
import numpy as np
import torch
from torch import Tensor

from ..data.tokenizer import Tokenizer

Kind = Literal["json_schema", "json_object", "regex", "choice"]
_SPACE = "▁"  # SentencePiece's mark of a space
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""How JSON is laid out: as Python's ``json.dumps`` writes it, one way only, so that a model
cannot wander in whitespace (a schema's own ``x-guidance`` options take precedence)."""


@dataclass(frozen=True)
class Grammar:
    """What the text must be: a JSON schema (``json_schema``, a dict), any JSON object
    (``json_object``, no source), a regular expression matching the whole text (``regex``,
    a string) or one of some strings (``choice``, a list)."""

    kind: Kind
    source: Any = None

    def text(self) -> str:
        """The grammar in ``llguidance``'s own form, not yet checked."""
        if self.kind == "json_object":
            return _json({"type": "object"})
        if self.kind == "json_schema":
            if not isinstance(self.source, dict):
                raise ValueError("a JSON schema must be an object")
            return _json(self.source)
        if self.kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(self.source)
        if self.kind == "choice":
            if not self.source or not all(isinstance(c, str) and c for c in self.source):
                raise ValueError("choices must be a non-empty list of non-empty strings")
            # JSON's string quoting is a Lark string literal's
            alternatives = " | ".join(json.dumps(choice) for choice in self.source)
            return llguidance.LLMatcher.grammar_from_lark(f"start: {alternatives}")
        raise ValueError(f"kind={self.kind!r} must be one of {', '.join(Kind.__args__)}")

    def check(self, tokenizer: Tokenizer) -> None:
        """Compile the grammar for ``tokenizer`` (kept for the constraints that follow it);
        ValueError with the library's message when it cannot be compiled (an unknown
        schema keyword, a malformed regex) or the tokenizer is not supported."""
        _compiled(grammar_tokenizer(tokenizer), self.text())


@functools.lru_cache(maxsize=256)
def _compiled(tokenizer: llguidance.LLTokenizer, text: str) -> llguidance.LLMatcher:
    """The matcher of grammar ``text`` at its start, which constraints copy (a copy costs
    microseconds, compiling milliseconds)."""
    matcher = llguidance.LLMatcher(tokenizer, text, log_level=0)
    if matcher.is_error():
        raise ValueError(matcher.get_error())
    return matcher


def _json(schema: dict[str, Any]) -> str:
    return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_LAYOUT)


_TOKENIZERS: weakref.WeakKeyDictionary[Tokenizer, llguidance.LLTokenizer] = (
    weakref.WeakKeyDictionary()
)


def grammar_tokenizer(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """``llguidance``'s view of ``tokenizer``, built on first use (it indexes the whole
    vocabulary) and kept while ``tokenizer`` lives. Byte-level BPE and byte-fallback
    vocabularies are read by the library itself from ``tokenizer.json`` (in Rust: no Python
    runs while masks are computed); the others through their tokens' bytes
    (:class:`_Vocabulary`)."""
    found = _TOKENIZERS.get(tokenizer)
    if found is None:
        if tokenizer.eos_id is None:
            raise ValueError("structured output needs a tokenizer with an eos token")
        spec = json.loads(tokenizer.to_json())
        if _decoders(spec) & {"ByteLevel", "ByteFallback"}:
            source: Any = tokenizer.to_json()
        else:
            source = llguidance.TokenizerWrapper(_Vocabulary(tokenizer, _speller(spec)))
        found = llguidance.LLTokenizer(
            source, n_vocab=tokenizer.vocab_size, eos_token=tokenizer.eos_id
        )
        _TOKENIZERS[tokenizer] = found
    return found


def _decoders(spec: dict[str, Any]) -> set[str]:
    """The types of a ``tokenizer.json``'s decoder, the steps of a sequence."""
    decoder = spec.get("decoder") or {}
    steps = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    return {step.get("type") for step in steps}


class _Vocabulary:
    """A tokenizer as ``llguidance.TokenizerWrapper`` reads one: every token's bytes, the
    eos, bos and special ids, and encoding of UTF-8 text."""

    def __init__(self, tokenizer: Tokenizer, spell: Callable[[str], bytes]) -> None:
        self._tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_id
        self.bos_token_id = tokenizer.bos_id
        specials = {
            i for i, token in tokenizer.backend.get_added_tokens_decoder().items() if token.special
        }
        self.special_token_ids = sorted(specials)
        self.tokens = [
            b"" if i in specials else spell(token)
            for i, token in enumerate(tokenizer.tokens(range(tokenizer.vocab_size)))
        ]

    def __call__(self, text: bytes) -> list[int]:
        return self._tokenizer.encode(text.decode("utf-8", errors="replace"))


def _speller(spec: dict[str, Any]) -> Callable[[str], bytes]:
    """The function from a token's string to the bytes it adds to decoded text, for the
    SentencePiece-style (``▁`` for a space) and char tokenizers of ``tokenizer.json``
    ``spec``; ValueError for a kind whose tokens have no fixed bytes."""
    types = _decoders(spec)
    if "Metaspace" in types:
        return lambda token: token.replace(_SPACE, " ").encode("utf-8")
    if types == {"Fuse"} and (spec.get("pre_tokenizer") or {}).get("type") == "FixedLength":
        return lambda token: token.encode("utf-8")  # the char tokenizer
    if "WordPiece" in types:
        raise ValueError(
            "structured output does not support WordPiece tokenizers: their tokens are "
            "joined with spaces that depend on the neighbouring tokens; use data.tokenizer=bpe"
        )
    raise ValueError(
        f"structured output does not support this tokenizer (decoder {sorted(types)}): "
        "it needs byte-level BPE, a SentencePiece-style or a char tokenizer"
    )


class Constraint:
    """One row's grammar as it is being followed, over a model vocabulary of ``vocab``
    ids (at least the tokenizer's; ids past the tokenizer's are never allowed)."""

    def __init__(self, grammar: Grammar, tokenizer: Tokenizer, vocab: int) -> None:
        if vocab < tokenizer.vocab_size:
            raise ValueError(
                f"vocab={vocab} is smaller than the tokenizer's {tokenizer.vocab_size} tokens"
            )
        self.vocab = vocab
        self.eos_id = tokenizer.eos_id
        self._matcher = _compiled(grammar_tokenizer(tokenizer), grammar.text()).deep_copy()
        self._bits = torch.zeros(1, _words(tokenizer.vocab_size), dtype=torch.int32)

    def fill(self, mask: Tensor) -> None:
        """Write into ``mask`` (bool, ``(vocab,)``) which tokens may come next."""
        self._matcher.unsafe_compute_mask_ptr(self._bits.data_ptr(), self._bits.nbytes)
        self._check()
        unpack(self._bits, mask.view(1, -1))

    def advance(self, token_id: int) -> None:
        """Take ``token_id`` as the row's next token; ValueError if the grammar forbids it."""
        if not self._matcher.consume_token(int(token_id)):
            raise ValueError(f"token {token_id} breaks the grammar: {self._matcher.get_error()}")

    @property
    def finished(self) -> bool:
        """Whether nothing may follow: the grammar is complete and eos is the only token
        allowed (or eos has been taken)."""
        return self._matcher.is_stopped()

    @property
    def complete(self) -> bool:
        """Whether the text so far is a whole match, so that eos may end it here."""
        return self._matcher.is_accepting()

    def _check(self) -> None:
        if self._matcher.is_error():
            raise ValueError(self._matcher.get_error())


def unpack(bits: Tensor, mask: Tensor) -> None:
    """Write ``llguidance``'s bit masks (int32, ``(rows, words)``, bit ``j`` of word ``w`` for
    id ``32 w + j``) into the bool CPU tensor ``mask`` (``(rows, vocab)``); ids past the bits
    are disallowed. (In numpy: torch copies a batch's masks on all threads, slowly.)"""
    width = min(bits.shape[1] * 32, mask.shape[1])
    as_bytes = bits.numpy().astype("<i4", copy=False).view(np.uint8)  # bit j % 8 of byte
    allowed = np.unpackbits(as_bytes, axis=1, count=width, bitorder="little")  # 4 w + j // 8
    target = mask.numpy()
    target[:, :width] = allowed.view(np.bool_)
    target[:, width:] = False


@functools.cache
def _executor() -> llguidance.LLExecutor:
    """The library's threads that compute a batch's masks (80% of the cores, at least 1)."""
    return llguidance.LLExecutor()


def fill_masks(constraints: list[Constraint], masks: Tensor) -> None:
    """:meth:`Constraint.fill` of every row at once: row ``i`` of ``masks`` (bool,
    ``(len(constraints), vocab)``) for ``constraints[i]``, the rows computed in parallel by
    ``llguidance``'s own threads."""
    if masks.shape[0] != len(constraints):
        raise ValueError(f"{masks.shape[0]} mask rows for {len(constraints)} constraints")
    if not constraints:
        return
    words = constraints[0]._bits.shape[1]
    if any(c._bits.shape[1] != words for c in constraints):
        raise ValueError("the constraints of one batch must share a tokenizer")
    bits = torch.zeros(len(constraints), words, dtype=torch.int32)
    pairs = [(c._matcher, row) for row, c in enumerate(constraints)]
    _executor().unsafe_compute_mask_ptr(pairs, bits.data_ptr(), words * 4, len(constraints))
    for constraint in constraints:
        constraint._check()
    unpack(bits, masks)


def _words(vocab: int) -> int:
    return (vocab + 31) // 32
