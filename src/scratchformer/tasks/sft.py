"""Supervised chat fine-tuning: a language model learns to answer as the assistant of
conversations rendered by a chat template, the loss counting the assistant's tokens only.

The template is the recipe's (``data.chat.template``), else that of the model fine-tuned
(an imported checkpoint's), else :data:`~scratchformer.data.chat.DEFAULT_TEMPLATE`; the run
keeps it, so that ``scratchformer serve`` renders chats as the model learnt them, and the
exports carry it. Rendering and the assistant's tokens are :mod:`scratchformer.data.chat`'s.

Conversations are not packed into shared windows: each is a row of its own, right-padded,
and ``train.max_tokens`` groups conversations of similar lengths so that little padding is
computed. Packing several into a row would need attention kept inside each conversation
and positions counted from each one's start, which the decoder's padding mask and
positions do not express (nor the fused, compiled and exported attention paths that take
them); a chat's length varies far less within a length bucket than across a corpus, so
bucketing loses little to padding.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from jinja2 import TemplateError
from torch import Tensor

from ..data.batching import pad_batch
from ..data.chat import DEFAULT_TEMPLATE, Message, compiled, encode_chat
from ..data.readers import Conversation, DataError, read_chat
from ..errors import DataSettingsError
from ..nn.loss import IGNORE_INDEX
from ..predictions import GENERATE
from .base import Batch, ExampleTask, TokenLabels, register_task
from .lm import text_attention_inputs


@dataclass(frozen=True)
class Encoded:
    """A conversation's input ids and, for each, the next token if it is the assistant's
    (else :data:`IGNORE_INDEX`)."""

    ids: list[int]
    targets: list[int]


@register_task
class ChatTuningTask(ExampleTask):
    """Conversations of JSONL files (``data.train``, ``data.val``) rendered by the chat
    template; a fine-tune of a language model (``train.init_from``), fully or by LoRA."""

    name = "sft"
    arch = "decoder"
    loss_in_forward = True
    metric = "loss"
    higher_is_better = False
    predicts = GENERATE

    examples_are: ClassVar[str] = "conversations"
    """What a line of the task's JSONL files holds, for the error of a split without one."""

    def read(self, split: str, path: str | None = None) -> list[Any]:
        files = path or getattr(self.data, split, None)
        if files is None:
            raise DataSettingsError(
                f"no {split} data: set data.{split} to a JSONL file of {self.examples_are}"
            )
        return [
            item
            for file in ([files] if isinstance(files, str) else files)
            for item in self.read_file(file)
        ]

    def read_file(self, path: str) -> list[Any]:
        """The examples of one file."""
        return list(read_chat(path))

    def prepare(self) -> None:
        """The pretrained model's tokenizer (which must have an eos token, where decoding
        stops) and the chat template: the recipe's, the pretrained model's or
        :meth:`default_template`."""
        if self.pretrained_tokenizer is None:
            raise DataSettingsError(
                f"{self.name} fine-tunes a language model: set train.init_from to a run or a "
                "Hugging Face checkpoint"
            )
        self.tokenizers = {"tokenizer": self.train_tokenizer((), ("eos",))}
        named = self.data.chat.template
        if named is not None:
            try:
                self.chat_template = Path(named).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                raise DataSettingsError(f"data.chat.template={named!r}: {error}") from None
        elif self.chat_template is None:
            self.chat_template = self.default_template()
        if self.chat_template is None:
            return
        try:
            compiled(self.chat_template)
        except TemplateError as error:
            origin = f"data.chat.template={named!r}" if named else "the pretrained model's"
            raise ValueError(f"{origin} chat template is not a template: {error}") from None

    def default_template(self) -> str | None:
        """The chat template of a run whose recipe and starting model name none."""
        return DEFAULT_TEMPLATE

    def model_sizes(self) -> dict[str, int]:
        return {"vocab_size": self.tokenizer().vocab_size}

    def template(self) -> str:
        if self.chat_template is None:
            raise RuntimeError(
                f"the {self.name} task has no chat template: call prepare() or load()"
            )
        return self.chat_template

    def encode(self, raw: Sequence[Conversation]) -> list[Encoded]:
        """Each conversation rendered and encoded, cut to ``data.max_len`` input tokens; one
        left without an assistant's token by the cut is left out, with a warning. A
        template whose assistant turns never end with the eos token, where decoding stops,
        is warned of."""
        encoded, left_out, ends = [], [], Counter[int]()
        for conversation in raw:
            ids, mask = self.encode_messages(
                conversation.messages, conversation.path, conversation.line
            )
            ends.update(turn_ends(ids, mask))
            example = shifted(ids, mask, self.data.max_len)
            if example is None:
                left_out.append(f"{conversation.path}:{conversation.line}")
            else:
                encoded.append(example)
        self.warn_of(ends, left_out, "conversation(s)")
        return encoded

    def encode_messages(
        self, messages: Sequence[Message], path: str, line: int, final_only: bool = False
    ) -> tuple[list[int], list[bool]]:
        """:func:`~scratchformer.data.chat.encode_chat` by the run's template, of messages
        read from ``line`` of ``path``, which the error names if the template refuses them."""
        try:
            return encode_chat(self.template(), messages, self.tokenizer(), final_only)
        except TemplateError as error:
            reason = f"the chat template refused it: {error}"
            raise DataError.at(path, line, reason) from None
        except ValueError as error:
            raise DataError.at(path, line, str(error)) from None

    def warn_of(self, ends: Counter[int], left_out: Sequence[str], what: str) -> None:
        """Warn of assistant turns that end (``ends``: the counts of their last tokens)
        otherwise than with the eos token, where decoding stops, and of the examples
        ``left_out`` (``path:line``) with no assistant token within ``data.max_len``."""
        tokenizer = self.tokenizer()
        if ends and tokenizer.eos_id not in ends:
            (end, _), eos = ends.most_common(1)[0], tokenizer.tokens([tokenizer.eos_id])
            warnings.warn(
                f"the chat template ends the assistant's turns with {tokenizer.tokens([end])}, "
                f"not with the eos token {eos}, where decoding stops: declare the turns' end "
                "the eos token (eos_token in the checkpoint's tokenizer_config.json)",
                stacklevel=4,
            )
        if left_out:
            shown = ", ".join(left_out[:5]) + (" ..." if len(left_out) > 5 else "")
            warnings.warn(
                f"{len(left_out)} {what} have no assistant token within "
                f"data.max_len={self.data.max_len} tokens and are left out ({shown})",
                stacklevel=4,
            )

    def length(self, example: Encoded) -> int:
        return len(example.ids)

    def attention_inputs(self, text: str) -> tuple[dict[str, Tensor], TokenLabels]:
        """The tokens of ``text``, at most as many as the model reads in training."""
        limit = min(self.data.max_len, self.recipe.model.max_len)
        return text_attention_inputs(self.tokenizer(), text, limit)

    def collate(self, examples: Sequence[Encoded]) -> Batch:
        """Right-padded ids (padding comes after each text, which causal attention never
        lets it read, so no mask is needed) and targets padded with ``IGNORE_INDEX``."""
        ids, real = pad_batch([e.ids for e in examples], self.tokenizer().eos_id)
        targets, _ = pad_batch([e.targets for e in examples], IGNORE_INDEX)
        return Batch({"input_ids": ids}, targets, int(real.sum()))


def shifted(ids: Sequence[int], mask: Sequence[bool], limit: int) -> Encoded | None:
    """The inputs (at most ``limit``) and targets of a text of token ``ids`` of which
    ``mask`` marks those learnt; ``None`` when none is left to learn."""
    ids, mask = ids[: limit + 1], mask[: limit + 1]
    targets = [t if learnt else IGNORE_INDEX for t, learnt in zip(ids[1:], mask[1:], strict=True)]
    if all(target == IGNORE_INDEX for target in targets):
        return None
    return Encoded(list(ids[:-1]), targets)


def turn_ends(ids: Sequence[int], mask: Sequence[bool]) -> list[int]:
    """The last token of each assistant turn: of each run of the tokens ``mask`` marks."""
    last = len(ids) - 1
    return [ids[i] for i in range(len(ids)) if mask[i] and (i == last or not mask[i + 1])]
