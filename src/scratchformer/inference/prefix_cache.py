"""Keys and values of recent prompts, kept for the prompts that begin alike.

Many requests to a server share the start of their prompt (a system prompt, few-shot
examples); on a CPU, computing it again is most of a request's time to its first token.
The decoding engine keeps the keys and values of the prompts it has run, by blocks of
:data:`BLOCK` tokens, and a prompt that begins with kept blocks computes only the rest. A
block is known by its tokens and the block before it (so only a whole prefix matches: the
keys of a token depend on every token before it), and the least recently used blocks go
first once the cache holds ``max_tokens`` tokens (a block whose parent went is then never
found again, and goes in its turn). The keys were computed at the same positions for every
prompt that shares the block, so a reused prefix gives the numbers its prompt would.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from .cache import DecoderCache

BLOCK = 16
"""Tokens a block: a prompt reuses whole blocks (vLLM's default block size)."""

Key = tuple[int, tuple[int, ...]]
"""A block's place in the cache: its parent's number (0 for a prompt's first), its tokens."""


@dataclass
class Block:
    """The keys and values of :data:`BLOCK` tokens, a tensor a layer, and the block's
    number (its children's parent)."""

    number: int
    keys: list[Tensor]
    values: list[Tensor]


class PrefixCache:
    """The blocks of recent prompts, at most ``max_tokens`` tokens of them."""

    def __init__(self, max_tokens: int) -> None:
        if max_tokens < BLOCK:
            raise ValueError(f"a prefix cache of {max_tokens} tokens holds no block of {BLOCK}")
        self.most = max_tokens // BLOCK
        self.blocks: OrderedDict[Key, Block] = OrderedDict()
        self.numbers = itertools.count(1)

    @property
    def tokens(self) -> int:
        """The tokens whose keys and values it holds."""
        return len(self.blocks) * BLOCK

    def reuse(self, prompt: Sequence[int], cache: DecoderCache) -> int:
        """Fill the start of ``cache`` (one row, empty) with the longest kept prefix of
        ``prompt`` that leaves a token to compute (whose logits choose the next one); the
        number of its tokens, to which the cache's length is set."""
        reused, parent = 0, 0
        while reused + BLOCK < len(prompt):
            key = (parent, tuple(prompt[reused : reused + BLOCK]))
            block = self.blocks.get(key)
            if block is None:
                break
            self.blocks.move_to_end(key)
            for layer, keys, values in zip(cache.self_attn, block.keys, block.values, strict=True):
                layer.keys[0, :, reused : reused + BLOCK] = keys
                layer.values[0, :, reused : reused + BLOCK] = values
            reused, parent = reused + BLOCK, block.number
        for layer in cache.self_attn:
            layer.length = reused
        return reused

    def keep(self, prompt: Sequence[int], cache: DecoderCache) -> None:
        """Keep the whole blocks of ``prompt``, whose keys and values ``cache`` (one row)
        holds, and let the least recently used go beyond the size limit."""
        parent = 0
        for start in range(0, len(prompt) - len(prompt) % BLOCK, BLOCK):
            key = (parent, tuple(prompt[start : start + BLOCK]))
            block = self.blocks.get(key)
            if block is None:
                span = slice(start, start + BLOCK)
                block = Block(
                    next(self.numbers),
                    [layer.keys[0, :, span].clone() for layer in cache.self_attn],
                    [layer.values[0, :, span].clone() for layer in cache.self_attn],
                )
                self.blocks[key] = block
            else:
                self.blocks.move_to_end(key)
            parent = block.number
        while len(self.blocks) > self.most:
            self.blocks.popitem(last=False)
