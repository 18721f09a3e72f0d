"""The Hugging Face model families we read and write, one :class:`Family` each, and their
registry, :data:`FAMILIES`.

A family is data: how its ``config.json`` maps onto our :class:`ModelConfig` (read one way
to import and the other way to export: which of our fields come from which keys, with the
defaults Hugging Face assumes when a key is absent; which of our fields the family fixes;
the settings we run only at their default), how its tensors are named (a table, the prefix
of models with a task head, the entries we drop), and the task heads it has. Whatever
differs between families is one of these values, never a test of which family it is.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import ModelConfig
from .hf_weights import Source, Table, bert_table, gpt2_table, linear, llama_table, t5_table

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class Head:
    """A task head of ours that a family's checkpoints have too."""

    architecture: str
    """The class ``config.json`` names for a model with this head."""
    table: Table
    """The head's tensors: ours -> the checkpoint's (outside the family's prefix)."""
    untied: Table = dataclasses.field(default_factory=dict)
    """The head's tensors when ``tie_output`` is off, besides or in place of :attr:`table`'s
    (tied, an output weight is the token embedding, no tensor of its own)."""

    def tensors(self, config: ModelConfig) -> Table:
        """The head's tensors of a model with ``config``."""
        return self.table | ({} if config.tie_output else self.untied)


@dataclass(frozen=True)
class Family:
    """How a Hugging Face model family maps onto our configuration and tensors."""

    name: str
    """As people write it (``GPT-2``), for messages."""
    model_type: str
    architecture: str
    """The class ``config.json`` names for an exported model without a task head."""
    summary: str
    """What our model must be to be exported as this family, in words."""
    fields: dict[str, tuple[str, Any]]
    """Our field -> (Hugging Face key, its default in Hugging Face)."""
    fixed: dict[str, Any]
    """Our fields (or properties) and the only value the family has."""
    hf_fixed: dict[str, Any]
    """Hugging Face keys and the only value we run (their default there)."""
    base_table: Callable[[ModelConfig], Table]
    """Our tensors of the base model (no task head) -> the checkpoint's."""
    prefix: str
    """What the base model's tensor names carry in a model with a task head."""
    ignored: re.Pattern[str]
    """Checkpoint entries that are none of our tensors: buffers, tied copies, pre-training
    heads (kept where a model's table reads them: its task head's, BERT's pooler)."""
    at_least: dict[str, int] = dataclasses.field(default_factory=dict)
    """Our fields and the least value the family has."""
    heads: dict[str, Head] = dataclasses.field(default_factory=dict)
    """Our heads that the family's checkpoints have, by name."""
    pooler: bool = False
    """Whether a model without a task head has a pooler (BERT's)."""
    imported: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Our training settings the family has no key for, set so on import (any value
    exports)."""
    exported: dict[str, str] = dataclasses.field(default_factory=dict)
    """Hugging Face keys written on export besides :attr:`fields`, and our field each
    takes its value from."""
    rotary: bool = False
    """Whether the rotary settings are read and written (``rope_theta``, ``rope_scaling``)."""
    head_dim: str | None = None
    """The key of an attention head's width, which must be ``d_model / n_heads`` here (may
    be absent)."""
    decoder_start: str | None = None
    """For encoder-decoders: the role of the token the decoder starts from when
    ``config.json`` has no ``decoder_start_token_id`` (``ModelConfig.decoder_start``, read
    from and written to that key)."""
    implied: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """A ``config.json`` with the keys it leaves out that its other keys imply, as the
    family's config class derives them, before :attr:`fields` are read."""
    implying: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """Keys written on export besides :attr:`fields`, computed from their values: those
    that older versions of the family's config class read in their place."""

    def table(self, config: ModelConfig) -> Table:
        """Our tensors -> the checkpoint's, the head's included."""
        table = self.base_table(config)
        if config.head is not None:
            table |= self.heads[config.head].tensors(config)
        return table

    def head_of(self, architectures: list[str]) -> str | None:
        """Our head of a checkpoint whose ``config.json`` names ``architectures``."""
        heads = {head.architecture: name for name, head in self.heads.items()}
        found = [heads[name] for name in architectures if isinstance(name, str) and name in heads]
        return found[0] if found else None

    def base_names(self, tensors: Mapping[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
        """A checkpoint's tensors under the base model's names: prefix stripped, the
        ``gamma`` and ``beta`` of old BERT LayerNorms renamed ``weight`` and ``bias``,
        ignored ones dropped unless the model of ``config`` reads them (its head's)."""
        read = {name for source in self.table(config).values() for name in source.names}
        kept = {}
        for name, tensor in tensors.items():
            name = name.removeprefix(self.prefix)
            name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", name)
            name = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name)
            if name in read or not self.ignored.fullmatch(name):
                kept[name] = tensor
        return kept

    def headed_names(self, tensors: Mapping[str, Tensor], head: str) -> dict[str, Tensor]:
        """A model-with-head checkpoint's tensors from the table's names: all but the
        head's under the family's prefix, as ``transformers`` saves them."""
        tables = (self.heads[head].table, self.heads[head].untied)
        own = {name for table in tables for source in table.values() for name in source.names}
        return {name if name in own else self.prefix + name: t for name, t in tensors.items()}

    def differences(self, config: ModelConfig) -> list[str]:
        """Our fields that differ from what the family needs, each with what it needs."""
        differ = [
            f"{name}={getattr(config, name)!r} (needs {value!r})"
            for name, value in self.fixed.items()
            if getattr(config, name) != value
        ]
        differ += [
            f"{name}={getattr(config, name)!r} (needs >= {least})"
            for name, least in self.at_least.items()
            if getattr(config, name) < least
        ]
        sharing: dict[str, list[str]] = {}
        for name, (key, _) in self.fields.items():
            sharing.setdefault(key, []).append(name)
        differ += [
            f"{' and '.join(f'{name}={getattr(config, name)!r}' for name in names)} "
            f"(need one value: {key})"
            for key, names in sharing.items()
            if len({getattr(config, name) for name in names}) > 1
        ]
        if config.head is not None and config.head not in self.heads:
            differ.append(f"head={config.head!r} (needs {' or '.join(['none', *self.heads])})")
        return differ


LAYER_NORM_LAYERS = {
    "norm": "layer",
    "gated": False,
    "attention": "multi_head",
    "n_kv_heads": None,
    "use_qkv_bias": True,
}
"""The layers of BERT and GPT-2: LayerNorm, the paper's feed-forward, multi-head attention
with one key/value head per query head, biases everywhere."""

BERT = Family(
    name="BERT",
    model_type="bert",
    architecture="BertModel",
    summary="an encoder: post-LN, learned positions, embedding LayerNorm, segments; no head, "
    "the span head of question answering or the masked-LM head",
    fields={
        "vocab_size": ("vocab_size", 30522),
        "d_model": ("hidden_size", 768),
        "n_layers": ("num_hidden_layers", 12),
        "n_heads": ("num_attention_heads", 12),
        "d_ff": ("intermediate_size", 3072),
        "activation": ("hidden_act", "gelu"),
        "dropout": ("hidden_dropout_prob", 0.1),
        "attention_dropout": ("attention_probs_dropout_prob", 0.1),
        "max_len": ("max_position_embeddings", 512),
        "type_vocab_size": ("type_vocab_size", 2),
        "layer_norm_eps": ("layer_norm_eps", 1e-12),
        "tie_output": ("tie_word_embeddings", True),
    },
    fixed={
        "arch": "encoder",
        "norm_first": False,
        "use_final_norm": False,
        "positional": "learned",
        "scale_embedding": False,
        "embedding_norm": True,
        "bias": True,
        **LAYER_NORM_LAYERS,
    },
    hf_fixed={
        "position_embedding_type": "absolute",
        "is_decoder": False,
        "add_cross_attention": False,
    },
    base_table=bert_table,
    prefix="bert.",
    # a model with a head has no pooler: a checkpoint may keep the pre-trained one, unused
    ignored=re.compile(r"embeddings\.position_ids|pooler\..*|cls\..*"),
    at_least={"type_vocab_size": 1},  # BERT always has segment embeddings
    heads={
        "span": Head("BertForQuestionAnswering", linear("head.proj", "qa_outputs")),
        "mlm": Head(
            "BertForMaskedLM",
            {
                **linear("head.dense", "cls.predictions.transform.dense"),
                **linear("head.norm", "cls.predictions.transform.LayerNorm"),
                "head.bias": Source(("cls.predictions.bias",)),  # tied to the decoder's
            },
            untied={  # transformers 5 unties the decoder's bias too, and keeps both
                "head.weight": Source(("cls.predictions.decoder.weight",)),
                "head.bias": Source(
                    ("cls.predictions.decoder.bias", "cls.predictions.bias"), copies=True
                ),
            },
        ),
    },
    pooler=True,
)

GPT2 = Family(
    name="GPT-2",
    model_type="gpt2",
    architecture="GPT2LMHeadModel",
    summary="a decoder: pre-LN, learned positions, final LayerNorm, tied LM head",
    fields={
        "vocab_size": ("vocab_size", 50257),
        "d_model": ("n_embd", 768),
        "n_layers": ("n_layer", 12),
        "n_heads": ("n_head", 12),
        "d_ff": ("n_inner", None),  # None: 4 * n_embd
        "activation": ("activation_function", "gelu_new"),
        "dropout": ("resid_pdrop", 0.1),
        "attention_dropout": ("attn_pdrop", 0.1),
        "max_len": ("n_positions", 1024),
        "layer_norm_eps": ("layer_norm_epsilon", 1e-5),
    },
    fixed={
        "arch": "decoder",
        "norm_first": True,
        "use_final_norm": True,
        "positional": "learned",
        "scale_embedding": False,
        "embedding_norm": False,
        "bias": True,
        "tie_output": True,
        "type_vocab_size": 0,
        "sliding_window": None,
        **LAYER_NORM_LAYERS,
    },
    hf_fixed={
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "tie_word_embeddings": True,
        "add_cross_attention": False,
    },
    base_table=gpt2_table,
    prefix="transformer.",
    ignored=re.compile(r"lm_head\.weight|h\.\d+\.attn\.(masked_)?bias"),
    exported={"embd_pdrop": "dropout"},
)

LLAMA = Family(
    name="Llama",
    model_type="llama",
    architecture="LlamaForCausalLM",
    summary="a decoder: RMSNorm, SwiGLU, rotary positions, no biases",
    fields={
        "vocab_size": ("vocab_size", 32000),
        "d_model": ("hidden_size", 4096),
        "n_layers": ("num_hidden_layers", 32),
        "n_heads": ("num_attention_heads", 32),
        "kv_heads": ("num_key_value_heads", None),  # None: num_attention_heads
        "d_ff": ("intermediate_size", 11008),
        "activation": ("hidden_act", "silu"),
        "attention_dropout": ("attention_dropout", 0.0),
        "max_len": ("max_position_embeddings", 2048),
        "layer_norm_eps": ("rms_norm_eps", 1e-6),
        "tie_output": ("tie_word_embeddings", False),
    },
    fixed={
        "arch": "decoder",
        "norm_first": True,
        "use_final_norm": True,
        "norm": "rms",
        "gated": True,
        "attention": "multi_head",
        "positional": "rotary",
        "scale_embedding": False,
        "embedding_norm": False,
        "bias": False,
        "use_qkv_bias": False,
        "type_vocab_size": 0,
        "sliding_window": None,
    },
    hf_fixed={"attention_bias": False, "mlp_bias": False},
    base_table=llama_table,
    prefix="",  # our full names are the causal LM's
    ignored=re.compile(r"model\.(layers\.\d+\.self_attn\.)?rotary_emb\..*"),  # old frequencies
    imported={"dropout": 0.0},
    rotary=True,
    head_dim="head_dim",
)

QWEN2 = dataclasses.replace(
    LLAMA,
    name="Qwen2",
    model_type="qwen2",
    architecture="Qwen2ForCausalLM",
    summary="Llama's, with biases in the query, key and value projections",
    fixed=LLAMA.fixed | {"use_qkv_bias": True},
    hf_fixed={"use_sliding_window": False},
)

MISTRAL = dataclasses.replace(
    LLAMA,
    name="Mistral",
    model_type="mistral",
    architecture="MistralForCausalLM",
    summary="Llama's, with a sliding window",
    fields=LLAMA.fields
    | {"kv_heads": ("num_key_value_heads", 8), "sliding_window": ("sliding_window", 4096)},
    fixed={name: value for name, value in LLAMA.fixed.items() if name != "sliding_window"},
    hf_fixed={},
)


def t5_implied(hf: dict[str, Any]) -> dict[str, Any]:
    """A T5 ``config.json`` with what ``T5Config`` derives: the activation and gating from
    ``feed_forward_proj`` (``gated-gelu`` is ``gelu_new``), and the scaling of the output
    from ``tie_word_embeddings`` (``transformers`` 4 scales exactly when tied)."""
    projection = hf.get("feed_forward_proj", "relu")
    if not isinstance(projection, str):
        raise ValueError(f"feed_forward_proj={projection!r} must be a string")
    activation = "gelu_new" if projection == "gated-gelu" else projection.split("-")[-1]
    derived = {
        "dense_act_fn": activation,
        "is_gated_act": projection.startswith("gated-"),
        "scale_decoder_outputs": hf.get("tie_word_embeddings", True),
    }
    return derived | hf


def t5_implying(hf: dict[str, Any]) -> dict[str, Any]:
    """``feed_forward_proj`` of the activation and gating written (``transformers`` 4)."""
    return {"feed_forward_proj": ("gated-" if hf["is_gated_act"] else "") + hf["dense_act_fn"]}


T5 = Family(
    name="T5",
    model_type="t5",
    architecture="T5ForConditionalGeneration",
    summary="an encoder-decoder: pre-LN with RMS norms, relative position bias, unscaled "
    "attention, no biases, one embedding table; ReLU (v1.0) or gated GELU (v1.1)",
    fields={
        "vocab_size": ("vocab_size", 32128),
        "d_model": ("d_model", 512),
        "n_layers": ("num_layers", 6),
        "n_decoder_layers": ("num_decoder_layers", None),  # None: num_layers
        "n_heads": ("num_heads", 8),
        "d_ff": ("d_ff", 2048),
        "activation": ("dense_act_fn", "relu"),
        "gated": ("is_gated_act", False),
        "dropout": ("dropout_rate", 0.1),
        "attention_dropout": ("dropout_rate", 0.1),
        "layer_norm_eps": ("layer_norm_epsilon", 1e-6),
        "relative_buckets": ("relative_attention_num_buckets", 32),
        "relative_max_distance": ("relative_attention_max_distance", 128),
        "tie_output": ("tie_word_embeddings", True),
        "scale_output": ("scale_decoder_outputs", True),
    },
    fixed={
        "arch": "seq2seq",
        "norm_first": True,
        "use_final_norm": True,
        "norm": "rms",
        "attention": "multi_head",
        "positional": "relative",
        "scale_attention": False,
        "scale_embedding": False,
        "embedding_norm": False,
        "share_embeddings": True,
        "final_dropout": True,
        "bias": False,
        "use_qkv_bias": False,
        "n_kv_heads": None,
        "type_vocab_size": 0,
    },
    hf_fixed={"is_encoder_decoder": True},
    base_table=t5_table,
    prefix="",  # our full names are the conditional generation model's
    ignored=re.compile(
        r"(encoder|decoder)\.embed_tokens\.weight"  # copies of the shared table
        r"|decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight"
    ),
    head_dim="d_kv",
    decoder_start="pad",
    implied=t5_implied,
    implying=t5_implying,
)

FAMILIES = {family.model_type: family for family in (BERT, GPT2, LLAMA, QWEN2, MISTRAL, T5)}
"""Every family by its ``model_type``; a model is exported as the first that fits it."""


def family_names(arch: str | None = None) -> str:
    """The families' names (of those whose models have ``arch``, if given), for messages."""
    return ", ".join(f.name for f in FAMILIES.values() if arch in (None, f.fixed["arch"]))


def family_of(hf: dict[str, Any]) -> Family:
    """The family a ``config.json`` names in ``model_type``."""
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise ValueError(
            f"model_type={model_type!r} is not supported; supported: {', '.join(FAMILIES)}"
        )
    return FAMILIES[model_type]


def family_for(config: ModelConfig) -> Family:
    """The first family our model can be exported as; ``ValueError`` naming every field
    that differs from what the nearest family needs."""
    families = [family for family in FAMILIES.values() if family.fixed["arch"] == config.arch]
    if not families:
        kinds = {family.fixed["arch"]: None for family in FAMILIES.values()}
        exported = " and ".join(f"{arch} ({family_names(arch)})" for arch in kinds)
        raise ValueError(
            f"arch={config.arch!r} has no Hugging Face counterpart here: only {exported} "
            "models can be exported"
        )
    differences = [family.differences(config) for family in families]
    nearest = min(range(len(families)), key=lambda i: len(differences[i]))
    if differences[nearest]:
        raise ValueError(
            f"cannot export as {families[nearest].model_type}: {', '.join(differences[nearest])}"
        )
    return families[nearest]
