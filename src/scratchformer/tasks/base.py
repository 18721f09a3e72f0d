"""What every task provides to the trainer, to ``scratchformer eval`` and to the commands
that use a trained model.

A task owns its data (examples read through the registry or from local files), its
tokenizer(s), the model configuration it needs, its loss and its metrics. Training batches
are a pure function of ``(seed, index)``: resuming at step N needs no data-loader state,
and with several processes (or accumulated micro-batches) each cuts its own slice of the
same batch, so that 2 ranks with batch b compute what 1 rank with batch 2b does.
"""

from __future__ import annotations

import bisect
import dataclasses
import sys
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from ..config import ModelConfig, Recipe
from ..data.batching import fixed_size_batches, token_budget_batches
from ..data.tokenizer import Tokenizer
from ..device import model_device
from ..errors import LineError
from ..metrics import perplexity
from ..nn.loss import IGNORE_INDEX
from ..predictions import BEAM_SIZE, Prediction, Record
from ..registry import Registry

Attentions = dict[str, list[Tensor]]
"""Per attention kind (``encoder``, ``decoder``, ``cross``): the weights ``(1, heads,
queries, keys)`` of each layer."""

TokenLabels = dict[str, tuple[list[str], list[str]]]
"""Per attention kind: the labels of the query tokens and of the key tokens."""


T = TypeVar("T")


@dataclass
class Batch:
    """Model inputs (keyword arguments of the model's forward), targets, and the number of
    tokens it holds (for throughput)."""

    inputs: dict[str, Tensor]
    targets: Tensor
    tokens: int
    examples: Sequence[Any] = ()
    """The encoded examples of its rows, when a task's metrics need more than the targets
    (an evaluation batch of an :class:`ExampleTask`)."""

    def to(self, device: torch.device) -> Batch:
        inputs = {k: v.to(device, non_blocking=True) for k, v in self.inputs.items()}
        targets = self.targets.to(device, non_blocking=True)
        return Batch(inputs, targets, self.tokens, self.examples)

    def doubled(self) -> Batch:
        """The rows twice over (``[rows; rows]``), for two forward passes in one."""
        inputs = {k: torch.cat([v, v]) for k, v in self.inputs.items()}
        targets = torch.cat([self.targets, self.targets])
        return Batch(inputs, targets, 2 * self.tokens, [*self.examples, *self.examples])

    def slice(self, part: int, parts: int) -> Batch:
        """Slice ``part`` of ``parts`` contiguous shares of the rows."""
        rows = self.targets.shape[0]
        start, stop = part * rows // parts, (part + 1) * rows // parts
        inputs = {k: v[start:stop] for k, v in self.inputs.items()}
        targets = self.targets[start:stop]
        share = self.tokens * (stop - start) // max(rows, 1)
        return Batch(inputs, targets, share, self.examples[start:stop])


class Task(ABC):
    """Base of the tasks: subclasses fill in data, model config, batches, loss, metrics."""

    name: ClassVar[str]
    arch: ClassVar[str]
    head: ClassVar[str | None] = None
    metric: ClassVar[str]
    """The validation metric that selects the best checkpoint and drives early stopping."""
    higher_is_better: ClassVar[bool]
    loss_in_forward: ClassVar[bool] = False
    """Whether the model computes the loss itself from ``labels`` (language models: without
    forming the logits); else the task computes it from :meth:`logits`."""
    predicts: ClassVar[Prediction | None] = None
    """What the task's models predict from text, if anything (:mod:`scratchformer.predictions`):
    the command and the endpoint that ask for it refuse the runs of other tasks."""
    keeps_starting_model: ClassVar[bool] = False
    """Whether the task keeps the model as training starts (DPO's reference), which
    :meth:`prepare_model` is given: a resumed run then builds its model with the starting
    weights (``train.init_from``'s) before the checkpoint's replace them."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.data = recipe.data
        self.train_config = recipe.train
        self.tokenizers: dict[str, Tokenizer] = {}
        """By file stem: ``tokenizer``, or ``tokenizer-src`` and ``tokenizer-tgt``."""
        self.pretrained_tokenizer: Tokenizer | None = None
        """Set before :meth:`prepare` to fine-tune with a pretrained model's tokenizer."""
        self.chat_template: str | None = None
        """The chat template of the task's models (:mod:`scratchformer.data.chat`), which
        their run keeps and the server renders chats with: set before :meth:`prepare` to a
        pretrained model's, which a task may replace (a chat fine-tune's own), and read
        back with the run."""
        if recipe.train.token_dropout and self.arch != "encoder":
            raise ValueError(
                f"[train] token_dropout={recipe.train.token_dropout}: only encoder tasks "
                f"(classification, tagging) drop input tokens, not {recipe.task}"
            )

    # -- set-up -------------------------------------------------------------------------

    @abstractmethod
    def prepare(self) -> None:
        """Read the training data and learn the tokenizer(s) from it; tasks with classes or
        tags also fix ``data.labels`` (saved with the recipe)."""

    def train_tokenizer(
        self, texts: Iterable[str], specials: Sequence[str], sentinels: int = 0
    ) -> Tokenizer:
        """A tokenizer of the recipe's kind and size, learnt from ``texts``, with
        ``sentinels`` sentinel tokens -- or, for a fine-tune, the pretrained model's own
        (``self.pretrained_tokenizer``). Either lower-cases text with ``data.lowercase``."""
        if self.pretrained_tokenizer is not None:
            missing = [
                role
                for role in specials
                if role != "unk" and getattr(self.pretrained_tokenizer, f"{role}_id") is None
            ]
            if missing:
                raise ValueError(f"the pretrained tokenizer has no {', '.join(missing)} token")
            have = len(self.pretrained_tokenizer.sentinel_ids)
            if have < sentinels:
                raise ValueError(f"the pretrained tokenizer has {have} sentinels, not {sentinels}")
            if self.data.lowercase:
                return self.pretrained_tokenizer.lowercased()
            return self.pretrained_tokenizer
        data = self.data
        return Tokenizer.train(
            data.tokenizer,
            texts,
            data.vocab_size,
            specials,
            lowercase=data.lowercase,
            sentinels=sentinels,
        )

    def tokenizer(self, name: str = "tokenizer") -> Tokenizer:
        """A tokenizer learnt by :meth:`prepare` or read by :meth:`load`."""
        if name not in self.tokenizers:
            raise RuntimeError(f"the {self.name} task has no {name} yet: call prepare() or load()")
        return self.tokenizers[name]

    def labels(self) -> list[str]:
        """Class or tag names, fixed by :meth:`prepare` (or by the recipe)."""
        if self.data.labels is None:
            raise RuntimeError(f"the {self.name} task has no labels yet: call prepare() or load()")
        return self.data.labels

    def model_config(self, pretrained: ModelConfig | None = None) -> ModelConfig:
        """The recipe's model section completed with what the data decides; for a fine-tune,
        the ``pretrained`` architecture with the task's head, pooling and dropout, and as
        many segment ids as the task needs (more than the pretrained model's: the new ones
        start as its last, :func:`~scratchformer.training.initialisation.copy_pretrained`)."""
        if pretrained is not None:
            return self._fine_tune_config(pretrained)
        model = self.recipe.model
        for field, wanted in (("arch", self.arch), ("head", self.head)):
            value = getattr(model, field)
            default = getattr(ModelConfig, field)
            if value not in (wanted, default):
                raise ValueError(
                    f"task {self.name!r} needs model.{field}={wanted!r}, not {value!r}"
                )
        return dataclasses.replace(model, arch=self.arch, head=self.head, **self.model_sizes())

    def _fine_tune_config(self, pretrained: ModelConfig) -> ModelConfig:
        if pretrained.arch != self.arch:
            raise ValueError(
                f"task {self.name!r} needs an {self.arch} to start from, not a {pretrained.arch}"
            )
        sizes = self.model_sizes()
        if sizes["vocab_size"] > pretrained.vocab_size:
            raise ValueError(
                f"the tokenizer has {sizes['vocab_size']} tokens, the pretrained "
                f"model {pretrained.vocab_size}"
            )
        if pretrained.positional == "learned" and self.data.max_len > pretrained.max_len:
            raise ValueError(
                f"data.max_len={self.data.max_len} is beyond the {pretrained.max_len} positions "
                "the pretrained model learnt"
            )
        segments = sizes.get("type_vocab_size", 0)
        if segments and not pretrained.type_vocab_size:
            raise ValueError("sentence pairs need segment embeddings the pretrained model lacks")
        recipe = self.recipe.model
        return dataclasses.replace(
            pretrained,
            type_vocab_size=max(segments, pretrained.type_vocab_size),
            head=self.head,
            num_labels=sizes.get("num_labels", pretrained.num_labels),
            pooling=recipe.pooling,
            pooler=False,  # heads pool for themselves
            dropout=recipe.dropout,
            attention_dropout=recipe.attention_dropout,
        )

    def prepare_model(self, model: nn.Module) -> None:
        """Called with the model to train before training starts or resumes: the plain
        model (no distributed or compiled wrapper), at its starting weights when
        :attr:`keeps_starting_model`, on its device. Nothing by default."""
        return None

    @abstractmethod
    def model_sizes(self) -> dict[str, Any]:
        """Vocabulary sizes, number of labels: the model fields the data decides."""

    # -- batches -----------------------------------------------------------------------

    @abstractmethod
    def global_batch(self, index: int, parts: int) -> Batch:
        """Training batch ``index`` (0, 1, ...): ``parts`` times the configured size, to be
        cut into ``parts`` slices (processes times accumulated micro-batches)."""

    @abstractmethod
    def eval_batches(self, split: str, path: str | None = None) -> Iterator[Batch]:
        """Batches of a split (``val``, ``test``) or of a file, in order."""

    # -- loss and metrics --------------------------------------------------------------

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        return model(**batch.inputs).logits

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        """Mean cross-entropy over the targets that count, with label smoothing; with
        ``train.rdrop`` (R-Drop) in training, the batch runs twice and the two predictions'
        disagreement is added (:func:`rdrop_loss`). Language models (decoder, seq2seq)
        compute it in their forward without forming the logits, unless R-Drop needs them."""
        smoothing = self.train_config.label_smoothing
        twice = self.train_config.rdrop > 0 and model.training
        if not twice and self.loss_in_forward:
            return model(**batch.inputs, labels=batch.targets, label_smoothing=smoothing).loss
        if twice:
            batch = batch.doubled()
        logits = self.logits(model, batch).flatten(0, -2).float()
        targets = batch.targets.flatten()
        loss = F.cross_entropy(
            logits, targets, ignore_index=IGNORE_INDEX, label_smoothing=smoothing
        )
        if not twice:
            return loss
        first, second = logits.chunk(2)
        counted = targets[: len(targets) // 2] != IGNORE_INDEX
        return loss + self.train_config.rdrop * rdrop_loss(first[counted], second[counted])

    def train_metrics(self) -> dict[str, float]:
        """Metrics of the batch of the last :meth:`loss` in training besides the loss (DPO's
        rewards), which the trainer averages over a step's micro-batches and logs with the
        loss. None by default."""
        return {}

    @torch.no_grad()
    def evaluate(
        self,
        model: nn.Module,
        split: str = "val",
        path: str | None = None,
        max_batches: int | None = None,
        device: torch.device | None = None,
    ) -> dict[str, float]:
        """Metrics of ``model`` on a split: loss and token accuracy, plus the task's own."""
        was_training = model.training
        model.eval()
        totals: dict[str, Any] = {}
        try:
            for i, batch in enumerate(self.eval_batches(split, path)):
                if max_batches is not None and i >= max_batches:
                    break
                batch = batch.to(device) if device is not None else batch
                self.score(totals, model, batch)
        finally:
            model.train(was_training)
        if not totals:
            raise ValueError(f"no examples to evaluate in split {split!r}")
        return self.summarize(totals)

    def score(self, totals: dict[str, Any], model: nn.Module, batch: Batch) -> None:
        """Add what ``model`` makes of an evaluation batch to ``totals``: by default its
        :meth:`logits`, through :meth:`accumulate`."""
        self.accumulate(totals, self.logits(model, batch).float(), batch)

    def accumulate(self, totals: dict[str, Any], logits: Tensor, batch: Batch) -> None:
        """Add a batch and the model's ``logits`` of it to ``totals``: sums of
        cross-entropy, counted targets, correct ones."""
        targets = batch.targets
        counted = targets != IGNORE_INDEX
        loss = F.cross_entropy(
            logits.flatten(0, -2), targets.flatten(), reduction="sum", ignore_index=IGNORE_INDEX
        )
        correct = (logits.argmax(-1) == targets) & counted
        add(
            totals, loss_sum=loss.item(), targets=counted.sum().item(), correct=correct.sum().item()
        )

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        """Metrics from the sums: mean loss, perplexity, accuracy over counted targets."""
        count = max(totals["targets"], 1)
        loss = totals["loss_sum"] / count
        return {"loss": loss, "perplexity": perplexity(loss), "accuracy": totals["correct"] / count}

    def decoding_metrics(
        self,
        model: nn.Module,
        split: str = "val",
        path: str | None = None,
        beam_size: int = BEAM_SIZE.default,
        progress: bool = False,
    ) -> dict[str, float]:
        """Scores of what the model outputs on a split (or file) when it decodes on its own,
        beside :meth:`evaluate`'s teacher-forced ones; none for tasks that do not decode."""
        return {}

    # -- inference ---------------------------------------------------------------------

    @property
    def decodes(self) -> bool:
        """Whether the task's models continue prompts, token by token (language models)."""
        return self.predicts is not None and self.predicts.decodes

    def predict(
        self, model: nn.Module, inputs: Sequence[Any], *, progress: bool = False, **options: Any
    ) -> list[Record]:
        """The model's output for each input, a record each (its fields are the server's
        JSON of it, its ``line()`` what the command prints). An input is a text or, for a
        prediction that reads fields, a tuple of their texts (``(question, context)``);
        ``options`` are those of :attr:`predicts`, each left out at its default.
        ``progress``: a progress bar on stderr."""
        if self.decodes:
            raise ValueError(
                f"{self.name} models continue prompts: scratchformer.inference.generate"
            )
        if self.predicts is None:
            raise ValueError(f"{self.name} models predict nothing from text")
        settings = self.predicts.settings(options)
        return self.records(model, list(inputs), progress=progress, **settings)

    def records(
        self, model: nn.Module, inputs: list[Any], *, progress: bool, **options: Any
    ) -> list[Record]:
        """:meth:`predict`'s records, given every option. An input refused is a
        :class:`~scratchformer.errors.LineError` that numbers it (:func:`per_line`)."""
        raise NotImplementedError(f"{self.name} declares a prediction but makes no records")

    def predict_lines(
        self, model: nn.Module, lines: Sequence[str], *, progress: bool = False, **options: Any
    ) -> list[str]:
        """The output for each line of text as the command line prints it (``options``:
        as :meth:`predict`'s). A line refused is a
        :class:`~scratchformer.errors.LineError` that numbers it; a line that asks nothing
        (an empty one, of a prediction that reads fields) gives an empty line."""
        if self.predicts is None or self.decodes:
            raise ValueError(f"{self.name} models do not predict line by line")
        read = per_line(lines, self.predicts.reads.read)
        asked = [number for number, found in enumerate(read, 1) if found is not None]
        inputs = [read[number - 1] for number in asked]
        try:
            records = self.predict(model, inputs, progress=progress, **options)
        except LineError as error:
            raise LineError(asked[error.number - 1], error.reason) from None
        outputs = [""] * len(lines)
        for number, record in zip(asked, records, strict=True):
            outputs[number - 1] = record.line()
        return outputs

    def example(self, text: str) -> Any:
        """An input of the task's prediction made from ``text``: what a compiled server
        warms up on."""
        return text

    def attention(
        self, model: nn.Module, text: str, target: str | None = None
    ) -> tuple[Attentions, TokenLabels]:
        """The attention weights of ``model`` on ``text`` encoded as in training (every
        layer and head), with the labels of the query and key tokens. ``target`` is for
        translation: the output the decoder reads."""
        if target is not None:
            raise ValueError(f"a target is for translation models, not for a {self.name} run")
        inputs, tokens = self.attention_inputs(text)
        device = model_device(model)
        return self.attend(model, {k: v.to(device) for k, v in inputs.items()}), tokens

    def attention_inputs(self, text: str) -> tuple[dict[str, Tensor], TokenLabels]:
        """The model inputs of ``text`` alone (a batch of one), and the labels of its tokens."""
        raise ValueError(f"attention pictures do not support {self.name} runs")

    def attend(self, model: nn.Module, inputs: dict[str, Tensor]) -> Attentions:
        """The model's attention weights on ``inputs``."""
        return model(**inputs, need_weights=True).attentions


TASKS: Registry[type[Task]] = Registry("task")
"""``Recipe.task`` -> the task class that runs it."""

TaskClass = TypeVar("TaskClass", bound=type[Task])


def register_task(cls: TaskClass) -> TaskClass:
    """Class decorator: ``cls`` is the task that its ``name`` names in a recipe."""
    TASKS.add(cls.name, cls)
    return cls


def rdrop_loss(first: Tensor, second: Tensor) -> Tensor:
    """R-Drop's term for two sets of logits ``(n, classes)`` of the same inputs: the mean
    over rows of ``(KL(p1 || p2) + KL(p2 || p1)) / 4``. With the mean of the two
    cross-entropies, that is the paper's loss halved, so ``train.rdrop`` is its alpha."""
    log_p, log_q = first.log_softmax(-1), second.log_softmax(-1)
    symmetric = ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1)
    return symmetric.mean() / 4


def per_line(lines: Sequence[str], read: Callable[[str], T]) -> list[T]:
    """``read(line)`` for each of ``lines``; a line it refuses (``ValueError``) is named by its
    number, from 1 (:class:`~scratchformer.errors.LineError`)."""
    results = []
    for number, line in enumerate(lines, 1):
        try:
            results.append(read(line))
        except ValueError as error:
            raise LineError(number, str(error)) from None
    return results


def progress_bar(total: int, shown: bool) -> tqdm:
    """A bar on stderr of ``total`` inputs done, if ``shown``."""
    return tqdm(total=total, disable=not shown, file=sys.stderr, unit="input")


def warn_cut(too_long: Sequence[int], limit: int) -> None:
    """Warn that the input lines numbered ``too_long`` (1-based) were cut to ``limit``
    tokens."""
    if too_long:
        shown = ", ".join(map(str, too_long[:5])) + (" ..." if len(too_long) > 5 else "")
        warnings.warn(
            f"{len(too_long)} line(s) longer than {limit} tokens were cut (line {shown})",
            stacklevel=3,
        )


def add(totals: dict[str, Any], **values: float) -> None:
    """Add ``values`` to the running sums in ``totals``."""
    for key, value in values.items():
        totals[key] = totals.get(key, 0.0) + value


class ExampleTask(Task):
    """A task over a list of examples (sentences, pairs): epochs of shuffled batches,
    by token budget (``train.max_tokens``) or by count (``train.batch_size``)."""

    def __init__(self, recipe: Recipe) -> None:
        super().__init__(recipe)
        self._encoded: dict[tuple[str, str | None], list[Any]] = {}
        self._epoch_cache: dict[tuple[int, int], list[list[int]]] = {}
        self._epoch_starts: dict[int, list[int]] = {}
        """By ``parts``: the index of the first batch of epochs 0, 1, ... as far as known."""

    @abstractmethod
    def read(self, split: str, path: str | None = None) -> list[Any]:
        """Raw examples of a split, or of a file in the split's format."""

    @abstractmethod
    def encode(self, raw: Sequence[Any]) -> list[Any]:
        """Token ids (and targets) of raw examples."""

    @abstractmethod
    def length(self, example: Any) -> int:
        """Tokens an example occupies in a padded batch (for token budgets)."""

    @abstractmethod
    def collate(self, examples: Sequence[Any]) -> Batch:
        """A padded batch of encoded examples."""

    def examples(self, split: str, path: str | None = None) -> list[Any]:
        """Encoded examples of a split (or file), read once."""
        key = (split, path)
        if key not in self._encoded:
            self._encoded[key] = self.encode(self.read(split, path))
        return self._encoded[key]

    def global_batch(self, index: int, parts: int) -> Batch:
        examples = self.examples("train")
        epoch, position = self._locate(index, parts)
        batch = self.collate([examples[i] for i in self._epoch_batches(epoch, parts)[position]])
        if self.train_config.token_dropout:
            batch.inputs["input_ids"] = self._drop_tokens(batch.inputs["input_ids"], index)
        return batch

    def _drop_tokens(self, ids: Tensor, index: int) -> Tensor:
        """``ids`` with each token that is not a special one (padding, ``[CLS]``, ...)
        replaced by the unknown token with chance ``train.token_dropout``. The draw depends
        on the seed and the batch index only, as the batches do."""
        tokenizer = self.tokenizer()
        if tokenizer.unk_id is None:
            raise ValueError("[train] token_dropout needs a tokenizer with an unknown token")
        generator = torch.Generator().manual_seed(self.train_config.seed + index)
        drop = torch.rand(ids.shape, generator=generator) < self.train_config.token_dropout
        drop &= ~torch.isin(ids, torch.tensor(tokenizer.special_ids))
        return ids.masked_fill(drop, tokenizer.unk_id)

    def _locate(self, index: int, parts: int) -> tuple[int, int]:
        """The epoch of training batch ``index`` and its position in that epoch. Epochs
        are counted once each (a token budget's count may vary with the shuffle), so a
        step costs the same in every epoch."""
        starts = self._epoch_starts.setdefault(parts, [0])
        while starts[-1] <= index:
            starts.append(starts[-1] + len(self._epoch_batches(len(starts) - 1, parts)))
        epoch = bisect.bisect_right(starts, index) - 1
        return epoch, index - starts[epoch]

    def _epoch_batches(self, epoch: int, parts: int) -> list[list[int]]:
        key = (epoch, parts)
        if key not in self._epoch_cache:
            self._epoch_cache = {key: self.batches(self.examples("train"), epoch, parts, True)}
        return self._epoch_cache[key]

    def batches(
        self, examples: Sequence[Any], epoch: int, parts: int, shuffle: bool
    ) -> list[list[int]]:
        """Example indices per batch of ``parts`` times the configured size."""
        train = self.train_config
        if train.max_tokens is not None:
            return token_budget_batches(
                [self.length(example) for example in examples],
                train.max_tokens * parts,
                shuffle=shuffle,
                seed=train.seed,
                epoch=epoch,
            )
        return fixed_size_batches(
            len(examples),
            train.batch_size * parts,
            shuffle=shuffle,
            seed=train.seed,
            epoch=epoch,
        )

    def eval_batches(self, split: str, path: str | None = None) -> Iterator[Batch]:
        examples = self.examples(split, path)
        for indices in self.batches(examples, 0, 1, shuffle=False):
            chosen = [examples[i] for i in indices]
            yield dataclasses.replace(self.collate(chosen), examples=chosen)

    @torch.no_grad()
    def forward_in_order(
        self,
        model: nn.Module,
        examples: Sequence[Any],
        batch_size: int = 64,
        progress: bool = False,
    ) -> Iterator[tuple[Tensor, Batch]]:
        """The model's logits (on the CPU) for encoded examples, batch by batch, in their
        order, each with its batch; ``progress``: a bar on stderr."""
        device = model_device(model)
        with progress_bar(len(examples), progress) as bar:
            for start in range(0, len(examples), batch_size):
                batch = self.collate(examples[start : start + batch_size]).to(device)
                yield self.logits(model, batch).float().cpu(), batch
                bar.update(len(batch.targets))
