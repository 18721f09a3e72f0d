"""Direct preference optimisation (DPO; Rafailov et al., 2023): a language model learns from
pairs of responses to a prompt, one preferred (chosen) and one not (rejected), to raise the
chosen response's probability relative to the model training started from (the reference)
more than the rejected one's (:mod:`scratchformer.tasks.preference`).

It is a chat fine-tune (:class:`~scratchformer.tasks.sft.ChatTuningTask`): the same
tokenizer, chat template and rows, two a pair. A conversational prompt is rendered by the
template with the response as the assistant's last turn, and only that turn's tokens count
(its end-of-turn token included, not the history's assistant turns). A plain-text prompt is
the user's message, rendered alike when the run has a chat template (the recipe's or the
model's): on a chat model, a prompt means what the user says. A run with neither reads
plain-text pairs as plain text: the prompt's tokens, then the response's and the eos token,
which count.

Dropout is off: the policy and the reference must score alike at the start (the reference
scores in eval mode), and a response's reward should not vary with a dropout draw.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from ..config import ModelConfig, Recipe
from ..data.chat import DEFAULT_TEMPLATE
from ..data.preferences import PreferencePair, iter_preferences
from ..data.readers import DataError
from .base import Batch, add, register_task
from .preference import Reference, preference_loss, reference_for
from .sft import ChatTuningTask, Encoded, shifted, turn_ends

DROPOUTS = ("dropout", "attention_dropout")


@dataclass(frozen=True)
class Located:
    """A preference pair and the file it was read from."""

    path: str
    pair: PreferencePair


@dataclass(frozen=True)
class EncodedPair:
    """The rows of a pair's chosen and rejected responses."""

    chosen: Encoded
    rejected: Encoded


@register_task
class PreferenceTask(ChatTuningTask):
    """Preference pairs of JSONL files (``data.train``, ``data.val``;
    :mod:`scratchformer.data.preferences`), a fine-tune of a language model
    (``train.init_from``), fully or by LoRA, by DPO's loss with ``data.dpo.beta``. Its
    validation metric is DPO's loss on the held-out pairs: unlike the reward accuracy, which
    soon reaches 1 on a small set and then chooses nothing, it keeps telling checkpoints
    apart."""

    name = "dpo"
    loss_in_forward = False
    keeps_starting_model = True
    examples_are = "preference pairs"

    def __init__(self, recipe: Recipe) -> None:
        super().__init__(recipe)
        self.reference: Reference | None = None
        self._train_metrics: dict[str, float] = {}

    def read_file(self, path: str) -> list[Located]:
        return [Located(path, pair) for pair in iter_preferences(path)]

    def default_template(self) -> str | None:
        """The default template if a training pair's prompt is a conversation, which only
        a template renders; else none, and the pairs are plain text."""
        if any(located.pair.conversational for located in self.read("train")):
            return DEFAULT_TEMPLATE
        return None

    def model_config(self, pretrained: ModelConfig | None = None) -> ModelConfig:
        """The language model's, without dropout (a recipe's own dropout is warned of)."""
        asked = [
            f"model.{name}={value}"
            for name in DROPOUTS
            if (value := getattr(self.recipe.model, name)) and value != getattr(ModelConfig, name)
        ]
        if asked:
            warnings.warn(
                f"{', '.join(asked)}: dpo trains without dropout, so that the policy scores "
                "as the reference does",
                stacklevel=2,
            )
        config = super().model_config(pretrained)
        return dataclasses.replace(config, **dict.fromkeys(DROPOUTS, 0.0))

    def prepare_model(self, model: nn.Module) -> None:
        """The reference: ``model`` as training starts (:func:`reference_for`)."""
        self.reference = reference_for(model)

    def encode(self, raw: Sequence[Located]) -> list[EncodedPair]:
        """Each pair's two rows, cut to ``data.max_len`` input tokens; a pair of which a
        response is cut away is left out, with a warning."""
        encoded, left_out, ends = [], [], Counter[int]()
        for located in raw:
            rows = []
            for response in (located.pair.chosen, located.pair.rejected):
                ids, mask = self.encode_response(located, response)
                ends.update(turn_ends(ids, mask))
                rows.append(shifted(ids, mask, self.data.max_len))
            chosen, rejected = rows
            if chosen is None or rejected is None:
                left_out.append(f"{located.path}:{located.pair.line}")
            else:
                encoded.append(EncodedPair(chosen, rejected))
        self.warn_of(ends, left_out, "pair(s)")
        return encoded

    def encode_response(self, located: Located, response: str) -> tuple[list[int], list[bool]]:
        """The token ids of the pair's prompt followed by ``response``, and which of them
        are the response's (with its end of turn)."""
        prompt, line = located.pair.prompt, located.pair.line
        if self.chat_template is not None:
            history = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            messages = [*history, {"role": "assistant", "content": response}]
            return self.encode_messages(messages, located.path, line, final_only=True)
        if not isinstance(prompt, str):
            reason = "a conversation needs a chat template and the run has none"
            raise DataError.at(located.path, line, reason)
        tokenizer = self.tokenizer()
        asked, answer = tokenizer.encode(prompt), tokenizer.encode(response, add_eos=True)
        return asked + answer, [False] * len(asked) + [True] * len(answer)

    def length(self, example: EncodedPair) -> int:
        """The pair's two rows, padded alike."""
        return 2 * max(len(example.chosen.ids), len(example.rejected.ids))

    def collate(self, examples: Sequence[EncodedPair]) -> Batch:
        """The rows of every pair padded together, as ``(pairs, 2, seq)``: slicing the
        batch keeps each pair whole."""
        rows = super().collate([row for pair in examples for row in (pair.chosen, pair.rejected)])
        pairs = len(examples)
        inputs = {name: value.view(pairs, 2, -1) for name, value in rows.inputs.items()}
        return Batch(inputs, rows.targets.view(pairs, 2, -1), rows.tokens)

    def starting_reference(self) -> Reference:
        """The reference that :meth:`prepare_model` made."""
        if self.reference is None:
            raise RuntimeError("the dpo task has no reference yet: call prepare_model()")
        return self.reference

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        """DPO's loss of the batch's pairs; their rewards are :meth:`train_metrics`."""
        options = self.data.dpo
        result = preference_loss(
            model, self.starting_reference(), batch, options.beta, options.sft_weight
        )
        self._train_metrics = result.metrics()
        return result.loss

    def train_metrics(self) -> dict[str, float]:
        return self._train_metrics

    def score(self, totals: dict[str, Any], model: nn.Module, batch: Batch) -> None:
        """The batch's loss and metrics (:meth:`PreferenceLoss.metrics`), as sums over its
        pairs."""
        result = preference_loss(model, self.starting_reference(), batch, self.data.dpo.beta)
        pairs = len(result.losses)
        sums = {name: mean * pairs for name, mean in result.metrics().items()}
        add(totals, pairs=pairs, loss=result.losses.sum().item(), **sums)

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        """DPO's loss and the rewards, means over the pairs, under TRL's names."""
        pairs = totals["pairs"]
        return {name: total / pairs for name, total in totals.items() if name != "pairs"}
