"""Hugging Face ``config.json`` <-> :class:`ModelConfig`, for BERT, GPT-2 and the Llama
family (Llama, Qwen2, Mistral).

A :class:`Family` is a table read one way to import and the other way to export: which of
our fields come from which Hugging Face keys (with the defaults Hugging Face assumes when
a key is absent), which of our fields the family fixes (a model whose fixed fields differ
cannot be exported), and the Hugging Face settings we can run only at their default value.
The Llama family's rotary settings live in one entry of their own (``rope_parameters``;
``rope_theta`` and ``rope_scaling`` before ``transformers`` 5), read and written apart.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..config import ModelConfig
from ..data.tokenizer import Tokenizer

ACTIVATIONS_FROM_HF = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
}
ACTIVATIONS_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}
HEAD_ARCHITECTURES = {"span": "BertForQuestionAnswering"}
"""Our encoder heads with a BERT counterpart: the class ``config.json`` names."""
_ALIASES = {"use_final_norm": "final_norm", "use_qkv_bias": "qkv_bias", "kv_heads": "n_kv_heads"}
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
    imported: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Our training settings the family has no key for, set so on import (any value
    exports)."""
    rotary: bool = False
    """Whether the rotary settings are read and written (:func:`rope_from_hf`)."""


LAYER_NORM_LAYERS = {"norm": "layer", "gated": False, "n_kv_heads": None, "use_qkv_bias": True}
"""The layers of BERT and GPT-2: LayerNorm, the paper's feed-forward, one key/value head per
query head, biases everywhere."""

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
        **LAYER_NORM_LAYERS,
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
        "sliding_window": None,
        **LAYER_NORM_LAYERS,
    },
    hf_fixed={
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "tie_word_embeddings": True,
        "add_cross_attention": False,
    },
)

LLAMA = Family(
    model_type="llama",
    architecture="LlamaForCausalLM",
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
        "positional": "rotary",
        "scale_embedding": False,
        "embedding_norm": False,
        "bias": False,
        "use_qkv_bias": False,
        "type_vocab_size": 0,
        "sliding_window": None,
    },
    hf_fixed={"attention_bias": False, "mlp_bias": False},
    imported={"dropout": 0.0},
    rotary=True,
)

QWEN2 = dataclasses.replace(
    LLAMA,
    model_type="qwen2",
    architecture="Qwen2ForCausalLM",
    fixed=LLAMA.fixed | {"use_qkv_bias": True},  # biases in q, k and v alone
    hf_fixed={"use_sliding_window": False},
)

MISTRAL = dataclasses.replace(
    LLAMA,
    model_type="mistral",
    architecture="MistralForCausalLM",
    fields=LLAMA.fields
    | {"kv_heads": ("num_key_value_heads", 8), "sliding_window": ("sliding_window", 4096)},
    fixed={name: value for name, value in LLAMA.fixed.items() if name != "sliding_window"},
    hf_fixed={},
)

FAMILIES = {family.model_type: family for family in (BERT, GPT2, LLAMA, QWEN2, MISTRAL)}
EXPORTED_AS = {"encoder": (BERT,), "decoder": (GPT2, LLAMA, QWEN2, MISTRAL)}
"""The families a model of each ``arch`` may be exported as, the first that fits."""
ROPE_SCALINGS = {
    "linear": {"factor": "rope_factor"},
    "llama3": {
        "factor": "rope_factor",
        "low_freq_factor": "rope_low_freq_factor",
        "high_freq_factor": "rope_high_freq_factor",
        "original_max_position_embeddings": "rope_original_max_len",
    },
}
"""Hugging Face's ``rope_type`` -> its keys and our fields."""


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
    if family.rotary:
        values |= rope_from_hf(hf, values["max_len"])
        d_head = values["d_model"] // values["n_heads"]
        if hf.get("head_dim", d_head) not in (None, d_head):
            raise ValueError(
                f"head_dim={hf['head_dim']} is not supported (only hidden_size / "
                f"num_attention_heads = {d_head})"
            )
    heads = {architecture: head for head, architecture in HEAD_ARCHITECTURES.items()}
    found = [heads[name] for name in hf.get("architectures") or [] if name in heads]
    head = found[0] if family is BERT and found else None
    fields = {_ALIASES.get(name, name): value for name, value in (family.fixed | values).items()}
    pooler = family is BERT and head is None
    return ModelConfig(**fields, **family.imported, pooler=pooler, head=head)


def rope_from_hf(hf: dict[str, Any], max_len: int) -> dict[str, Any]:
    """Our rotary fields of a ``config.json``: ``rope_parameters`` (``transformers`` 5) or
    the older ``rope_theta`` and ``rope_scaling``; Llama 3's scaling assumes the model was
    pre-trained at ``max_len`` unless it says otherwise."""
    parameters = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    theta = parameters.get("rope_theta", hf.get("rope_theta", 10000.0))
    kind = parameters.get("rope_type", parameters.get("type", "default"))
    if parameters.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(
            f"partial_rotary_factor={parameters['partial_rotary_factor']} is not supported "
            "(only 1.0)"
        )
    if kind == "default":
        return {"rope_theta": theta}
    if kind not in ROPE_SCALINGS:
        raise ValueError(
            f"rope_type={kind!r} is not supported; supported: default, {', '.join(ROPE_SCALINGS)}"
        )
    defaults = {"original_max_position_embeddings": max_len}
    missing = [key for key in ROPE_SCALINGS[kind] if key not in parameters | defaults]
    if missing:
        raise ValueError(f"rope_type={kind!r} needs {', '.join(missing)}")
    scaling = {field: (defaults | parameters)[key] for key, field in ROPE_SCALINGS[kind].items()}
    return {"rope_theta": theta, "rope_scaling": kind, **scaling}


def rope_to_hf(config: ModelConfig) -> dict[str, Any]:
    """The rotary entries of our model's ``config.json``, in the older form (``rope_theta``,
    ``rope_scaling``), which ``transformers`` 4 reads and 5 converts."""
    scaling = None
    if config.rope_scaling is not None:
        fields = ROPE_SCALINGS[config.rope_scaling]
        scaling = {"rope_type": config.rope_scaling}
        scaling |= {key: getattr(config, field) for key, field in fields.items()}
    return {"rope_theta": config.rope_theta, "rope_scaling": scaling}


def family_for(config: ModelConfig) -> Family:
    """The first family our model can be exported as; ``ValueError`` naming every field
    that differs from what the nearest family needs."""
    families = EXPORTED_AS.get(config.arch)
    if families is None:
        raise ValueError(
            f"arch={config.arch!r} has no Hugging Face counterpart here: only encoder (BERT) "
            "and decoder (GPT-2, Llama, Qwen2, Mistral) models can be exported"
        )
    differences = [_differences(config, family) for family in families]
    nearest = min(range(len(families)), key=lambda i: len(differences[i]))
    if differences[nearest]:
        family = families[nearest]
        raise ValueError(f"cannot export as {family.model_type}: {', '.join(differences[nearest])}")
    return families[nearest]


def _differences(config: ModelConfig, family: Family) -> list[str]:
    """Our fields that differ from what ``family`` needs, each with the value it needs."""
    differ = [
        f"{name}={getattr(config, name)!r} (needs {value!r})"
        for name, value in family.fixed.items()
        if getattr(config, name) != value
    ]
    if config.head is not None and not (family is BERT and config.head in HEAD_ARCHITECTURES):
        differ.append(f"head={config.head!r} (needs none or {', '.join(HEAD_ARCHITECTURES)})")
    if family is BERT and config.type_vocab_size < 1:
        differ.append("type_vocab_size=0 (needs segment embeddings, >= 1)")
    return differ


def hf_config(config: ModelConfig, tokenizer: Tokenizer | None = None) -> dict[str, Any]:
    """The Hugging Face ``config.json`` of our model (see :func:`family_for`); the special
    token ids come from the tokenizer, if given."""
    family = family_for(config)
    values = {key: getattr(config, field) for field, (key, _) in family.fields.items()}
    values[family.fields["activation"][0]] = ACTIVATIONS_TO_HF[config.activation]
    if family is GPT2:
        values["embd_pdrop"] = config.dropout
    if family.rotary:
        values |= rope_to_hf(config)
    specials = {} if tokenizer is None else tokenizer.specials
    return {
        "model_type": family.model_type,
        "architectures": [HEAD_ARCHITECTURES.get(config.head or "", family.architecture)],
        **values,
        **family.hf_fixed,
        **{f"{role}_token_id": specials.get(role) for role in ("pad", "bos", "eos")},
        "initializer_range": 0.02,
    }
