"""Hugging Face ``config.json`` <-> :class:`ModelConfig`, by the tables of each
:class:`~scratchformer.interop.families.Family`: read one way to import, the other way to
export. The Llama family's rotary settings live in one entry of their own
(``rope_parameters``; ``rope_theta`` and ``rope_scaling`` before ``transformers`` 5), read
and written apart.
"""

from __future__ import annotations

from typing import Any

from ..config import DECODER_STARTS, ModelConfig, check_type
from ..data.tokenizer import Tokenizer
from .families import family_for, family_of

ACTIVATIONS_FROM_HF = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
}
ACTIVATIONS_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}
_ALIASES = {"use_final_norm": "final_norm", "use_qkv_bias": "qkv_bias", "kv_heads": "n_kv_heads"}
"""Fixed properties of ours and the field that sets them."""
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


def model_config(hf: dict[str, Any]) -> ModelConfig:
    """Our configuration of the model a Hugging Face ``config.json`` describes (BERT with
    its pooler). Settings we cannot run raise ``ValueError`` naming them."""
    family = family_of(hf)
    if family.implied is not None:
        hf = family.implied(hf)
    for key, supported in family.hf_fixed.items():
        if hf.get(key, supported) != supported:
            raise ValueError(f"{key}={hf[key]!r} is not supported (only {supported!r})")
    values = {field: hf.get(key, default) for field, (key, default) in family.fields.items()}
    if values["d_ff"] is None and isinstance(values["d_model"], int):
        values["d_ff"] = 4 * values["d_model"]
    for field, (key, _) in family.fields.items():  # before any value is used
        check_type(ModelConfig, _ALIASES.get(field, field), values[field], key)
    activation = values["activation"]
    if activation not in ACTIVATIONS_FROM_HF:
        key = family.fields["activation"][0]
        raise ValueError(
            f"{key}={activation!r} is not supported; supported: {', '.join(ACTIVATIONS_FROM_HF)}"
        )
    values["activation"] = ACTIVATIONS_FROM_HF[activation]
    if family.rotary:
        values |= rope_from_hf(hf, values["max_len"])
    if family.decoder_start is not None:
        values["decoder_start"] = decoder_start_from_hf(hf, family.decoder_start)
    architectures = hf.get("architectures") or []
    if not isinstance(architectures, list):
        raise ValueError(f"architectures={architectures!r} must be a list of class names")
    head = family.head_of(architectures)
    fields = {_ALIASES.get(name, name): value for name, value in (family.fixed | values).items()}
    pooler = family.pooler and head is None
    config = ModelConfig(**fields, **family.imported, pooler=pooler, head=head)
    d_head = config.d_model // config.n_heads
    if family.head_dim is not None and hf.get(family.head_dim, d_head) not in (None, d_head):
        width, heads = family.fields["d_model"][0], family.fields["n_heads"][0]
        raise ValueError(
            f"{family.head_dim}={hf[family.head_dim]!r} is not supported (only {width} / "
            f"{heads} = {d_head})"
        )
    return config


def decoder_start_from_hf(hf: dict[str, Any], default: str) -> str:
    """The role of the token a ``config.json``'s ``decoder_start_token_id`` names: the
    first of :data:`DECODER_STARTS` whose ``<role>_token_id`` it is (``default`` when
    absent)."""
    start = hf.get("decoder_start_token_id")
    if start is None:
        return default
    roles = [role for role in DECODER_STARTS if hf.get(f"{role}_token_id") == start]
    if not roles:
        keys = " or ".join(f"{role}_token_id" for role in DECODER_STARTS)
        raise ValueError(f"decoder_start_token_id={start} is not supported (only the {keys})")
    return roles[0]


def rope_from_hf(hf: dict[str, Any], max_len: int) -> dict[str, Any]:
    """Our rotary fields of a ``config.json``: ``rope_parameters`` (``transformers`` 5) or
    the older ``rope_theta`` and ``rope_scaling``; Llama 3's scaling assumes the model was
    pre-trained at ``max_len`` unless it says otherwise."""
    parameters = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if not isinstance(parameters, dict):
        raise ValueError(f"rope_parameters={parameters!r} must be a table of settings")
    theta = parameters.get("rope_theta", hf.get("rope_theta", 10000.0))
    kind = parameters.get("rope_type", parameters.get("type", "default"))
    if not isinstance(kind, str):
        raise ValueError(f"rope_type={kind!r} must be a string")
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


def decoder_start_to_hf(config: ModelConfig, tokenizer: Tokenizer | None) -> int | None:
    """The ``decoder_start_token_id`` of our model: the id of its ``decoder_start`` token
    in ``tokenizer`` (``None`` without one); a tokenizer without it is an error."""
    if tokenizer is None:
        return None
    if config.decoder_start not in tokenizer.specials:
        raise ValueError(
            f"decoder_start={config.decoder_start!r}, but the tokenizer has no "
            f"{config.decoder_start} token to write as decoder_start_token_id"
        )
    return tokenizer.specials[config.decoder_start]


def hf_config(config: ModelConfig, tokenizer: Tokenizer | None = None) -> dict[str, Any]:
    """The Hugging Face ``config.json`` of our model (see :func:`family_for`); the special
    token ids come from the tokenizer, if given."""
    family = family_for(config)
    values = {key: getattr(config, field) for field, (key, _) in family.fields.items()}
    values[family.fields["activation"][0]] = ACTIVATIONS_TO_HF[config.activation]
    values |= {key: getattr(config, field) for key, field in family.exported.items()}
    if family.rotary:
        values |= rope_to_hf(config)
    if family.head_dim is not None:
        values[family.head_dim] = config.d_model // config.n_heads
    if family.implying is not None:
        values |= family.implying(values)
    specials = {} if tokenizer is None else tokenizer.specials
    if family.decoder_start is not None:
        values["decoder_start_token_id"] = decoder_start_to_hf(config, tokenizer)
    return {
        "model_type": family.model_type,
        "architectures": [
            family.heads[config.head].architecture if config.head else family.architecture
        ],
        **values,
        **family.hf_fixed,
        **{f"{role}_token_id": specials.get(role) for role in ("pad", "bos", "eos")},
        "initializer_range": 0.02,
    }
