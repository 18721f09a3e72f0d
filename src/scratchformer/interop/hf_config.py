"""Hugging Face ``config.json`` <-> :class:`ModelConfig`, for BERT and GPT-2.

A :class:`Family` is a table read one way to import and the other way to export: which of
our fields come from which Hugging Face keys (with the defaults Hugging Face assumes when
a key is absent), which of our fields the family fixes (a model whose fixed fields differ
cannot be exported), and the Hugging Face settings we can run only at their default value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import ModelConfig
from ..data.tokenizer import Tokenizer

ACTIVATIONS_FROM_HF = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}
ACTIVATIONS_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
HEAD_ARCHITECTURES = {"span": "BertForQuestionAnswering"}
"""Our encoder heads with a BERT counterpart: the class ``config.json`` names."""
_ALIASES = {"use_final_norm": "final_norm"}
"""Fixed properties of ours and the field that sets them."""


@dataclass(frozen=True)
class Family:
    """How a Hugging Face model family maps onto our configuration."""

    model_type: str
    architecture: str
    """The class ``config.json`` names for an exported model."""
    fields: dict[str, tuple[str, Any]]
    """Our field -> (Hugging Face key, its default in Hugging Face)."""
    fixed: dict[str, Any]
    """Our fields (or properties) and the only value the family has."""
    hf_fixed: dict[str, Any]
    """Hugging Face keys and the only value we run (their default there)."""


BERT = Family(
    model_type="bert",
    architecture="BertModel",
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
    },
    fixed={
        "arch": "encoder",
        "norm_first": False,
        "use_final_norm": False,
        "positional": "learned",
        "scale_embedding": False,
        "embedding_norm": True,
        "bias": True,
    },
    hf_fixed={
        "position_embedding_type": "absolute",
        "is_decoder": False,
        "add_cross_attention": False,
    },
)

GPT2 = Family(
    model_type="gpt2",
    architecture="GPT2LMHeadModel",
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
    },
    hf_fixed={
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "tie_word_embeddings": True,
        "add_cross_attention": False,
    },
)

FAMILIES = {family.model_type: family for family in (BERT, GPT2)}


def family_of(hf: dict[str, Any]) -> Family:
    """The family a ``config.json`` names in ``model_type``."""
    model_type = hf.get("model_type")
    if model_type not in FAMILIES:
        raise ValueError(
            f"model_type={model_type!r} is not supported; supported: {', '.join(FAMILIES)}"
        )
    return FAMILIES[model_type]


def model_config(hf: dict[str, Any]) -> ModelConfig:
    """Our configuration of the model a Hugging Face ``config.json`` describes (BERT with
    its pooler). Settings we cannot run raise ``ValueError`` naming them."""
    family = family_of(hf)
    for key, supported in family.hf_fixed.items():
        if hf.get(key, supported) != supported:
            raise ValueError(f"{key}={hf[key]!r} is not supported (only {supported!r})")
    values = {field: hf.get(key, default) for field, (key, default) in family.fields.items()}
    if values["d_ff"] is None:
        values["d_ff"] = 4 * values["d_model"]
    activation = values["activation"]
    if activation not in ACTIVATIONS_FROM_HF:
        key = family.fields["activation"][0]
        raise ValueError(
            f"{key}={activation!r} is not supported; supported: {', '.join(ACTIVATIONS_FROM_HF)}"
        )
    values["activation"] = ACTIVATIONS_FROM_HF[activation]
    fixed = {_ALIASES.get(name, name): value for name, value in family.fixed.items()}
    heads = {architecture: head for head, architecture in HEAD_ARCHITECTURES.items()}
    found = [heads[name] for name in hf.get("architectures") or [] if name in heads]
    head = found[0] if family is BERT and found else None
    return ModelConfig(**fixed, **values, pooler=family is BERT and head is None, head=head)


def family_for(config: ModelConfig) -> Family:
    """The family our model can be exported as; ``ValueError`` naming every field that
    differs from what it needs."""
    family = {"encoder": BERT, "decoder": GPT2}.get(config.arch)
    if family is None:
        raise ValueError(
            f"arch={config.arch!r} has no Hugging Face counterpart here: "
            "only encoder (BERT) and decoder (GPT-2) models can be exported"
        )
    differ = [
        f"{name}={getattr(config, name)!r} (needs {value!r})"
        for name, value in family.fixed.items()
        if getattr(config, name) != value
    ]
    if config.head is not None and not (family is BERT and config.head in HEAD_ARCHITECTURES):
        differ.append(f"head={config.head!r} (needs none or {', '.join(HEAD_ARCHITECTURES)})")
    if family is BERT and config.type_vocab_size < 1:
        differ.append("type_vocab_size=0 (needs segment embeddings, >= 1)")
    if differ:
        raise ValueError(f"cannot export as {family.model_type}: {', '.join(differ)}")
    return family


def hf_config(config: ModelConfig, tokenizer: Tokenizer | None = None) -> dict[str, Any]:
    """The Hugging Face ``config.json`` of our model (see :func:`family_for`); the special
    token ids come from the tokenizer, if given."""
    family = family_for(config)
    values = {key: getattr(config, field) for field, (key, _) in family.fields.items()}
    values[family.fields["activation"][0]] = ACTIVATIONS_TO_HF[config.activation]
    if family is GPT2:
        values["embd_pdrop"] = config.dropout
    specials = {} if tokenizer is None else tokenizer.specials
    return {
        "model_type": family.model_type,
        "architectures": [HEAD_ARCHITECTURES.get(config.head or "", family.architecture)],
        **values,
        **family.hf_fixed,
        **{f"{role}_token_id": specials.get(role) for role in ("pad", "bos", "eos")},
        "initializer_range": 0.02,
    }
