"""Decoder-only language models and their byte-level BPE tokenizers as GGUF files, the
format of llama.cpp (and of what runs on it: llama-cpp-python, Ollama, LM Studio).

A :class:`DecoderModel` is written as one of llama.cpp's architectures, chosen by its norm
(:data:`ARCHITECTURES`): ``gpt2`` (LayerNorm, positions added to the embeddings, the
paper's feed-forward with GELU's tanh approximation) or ``llama`` (RMSNorm, rotary
positions, SwiGLU, grouped-query attention). Settings llama.cpp has no place for are
folded into the weights, exactly: the token embedding's sqrt(d_model) scale (and a
decoder's segment embedding, always segment 0) into ``token_embd``, with the head written
apart when they no longer share a tensor; unscaled attention scores into the queries; the
output scale into the head; sinusoidal positions into a ``max_len``-row table; biases a
``gpt2`` needs but the model has none of, as zeros. Everything else that llama.cpp cannot
compute as we do is refused, naming the config field (:func:`check_model`).

Rotary layout: our rotation pairs dimension ``i`` of a head with ``i + d_head / 2``
(GPT-NeoX's layout); llama.cpp's ``llama`` pairs ``2i`` with ``2i + 1``. The rows of each
head's query and key projections are interleaved (:func:`interleave_heads`), so that the
rotation llama.cpp applies to its dimensions ``2i, 2i + 1`` is ours of ``i, i + d_head / 2``;
queries and keys are permuted alike, so their products, and attention, are unchanged.

The tokenizer is written as llama.cpp's ``gpt2`` tokenizer model (vocabulary, token types,
merges, special token ids) with the pre-tokenizer ``gpt-2``: GPT-2's regex, the one our
byte-level BPE's ``ByteLevel`` pre-tokenizer splits text with, so that llama.cpp encodes a
text into our ids (:func:`check_tokenizer` refuses other tokenizers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from torch import Tensor

from ..config import GGUF_TYPES, ModelConfig
from ..data.tokenizer import Tokenizer
from ..io import atomic_write_gguf
from ..models import DecoderModel
from ..nn import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from ..nn.embedding import inverse_frequencies, sinusoidal_table

QUANTIZATION = {
    "f32": gguf.GGMLQuantizationType.F32,
    "f16": gguf.GGMLQuantizationType.F16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
}
"""A ``--type`` -> the type of the file's weight matrices."""
FILE_TYPES = {
    "f32": gguf.LlamaFileType.ALL_F32,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
}
assert QUANTIZATION.keys() == FILE_TYPES.keys() == set(GGUF_TYPES)

KEPT_F32 = ("position_embd.weight", "rope_freqs.weight")
"""Tensors kept in float32 whatever the type, besides vectors and norms (as llama.cpp's
own converter keeps them)."""
TOKENIZER_MODEL = "gpt2"
PRE_TOKENIZER = "gpt-2"
"""llama.cpp's name of the pre-tokenizer that splits text by GPT-2's regex, the regex of
the ``ByteLevel`` pre-tokenizer of ``tokenizers`` (``use_regex=True``)."""


@dataclass(frozen=True)
class Architecture:
    """One of llama.cpp's architectures, as our :class:`ModelConfig` must be to run on it."""

    name: str
    """llama.cpp's (``general.architecture``)."""
    summary: str
    """What our model must be, in words, for messages."""
    needs: dict[str, tuple[Any, ...]]
    """Our fields (or properties) and the values the architecture computes as we do."""
    rotary: bool
    """Rotary positions (the queries and keys interleaved, :func:`interleave_heads`); else
    positions added to the embeddings, ``position_embd``."""
    fused_qkv: bool
    """One ``attn_qkv`` tensor (queries, keys, values stacked), else three."""
    all_biases: bool
    """Every linear map and norm has a bias (zeros where ours has none); else only those
    that ours has are written."""
    eps_key: Callable[[gguf.GGUFWriter, float], None]
    """Writes the norms' eps under the architecture's key."""


SHARED: dict[str, tuple[Any, ...]] = {
    "norm_first": (True,),
    "use_final_norm": (True,),
    "embedding_norm": (False,),
    "sliding_window": (None,),
    "attention": ("multi_head",),
}
"""What both architectures need: pre-LN layers with a final norm, no norm of the
embeddings, attention to every earlier position."""

ARCHITECTURES = {
    "layer": Architecture(
        name="gpt2",
        summary="LayerNorm, positions added to the embeddings, GELU (tanh); rotary positions "
        "run as llama, with norm='rms'",
        needs={
            **SHARED,
            "positional": ("learned", "sinusoidal"),
            "gated": (False,),
            "activation": ("gelu_tanh",),
        },
        rotary=False,
        fused_qkv=True,
        all_biases=True,
        eps_key=gguf.GGUFWriter.add_layer_norm_eps,
    ),
    "rms": Architecture(
        name="llama",
        summary="RMSNorm, rotary positions, SwiGLU (gated=true, activation='silu')",
        needs={**SHARED, "positional": ("rotary",), "gated": (True,), "activation": ("silu",)},
        rotary=True,
        fused_qkv=False,
        all_biases=False,
        eps_key=gguf.GGUFWriter.add_layer_norm_rms_eps,
    ),
}
"""llama.cpp's architecture of a decoder, by its ``ModelConfig.norm``."""

FIELDS = {"use_final_norm": "final_norm"}
"""The recipe key of a property that :attr:`Architecture.needs` names."""
WHY = {
    "gelu": "llama.cpp's gpt2 computes GELU's tanh approximation",
    "sliding_window": "llama.cpp's gpt2 and llama attend to every earlier position",
    "norm_first": "llama.cpp's layers are pre-LN",
    "use_final_norm": "llama.cpp normalises the last layer's output (None: as norm_first)",
    "attention": "llama.cpp's gpt2 and llama compute multi-head (grouped-query) attention",
}
"""Why a value is refused, where the architecture's name alone does not say."""


def architecture(config: ModelConfig) -> Architecture:
    """llama.cpp's architecture for ``config`` (by its norm; whether it fits is
    :func:`check_model`'s)."""
    return ARCHITECTURES[config.norm]


def check_model(config: ModelConfig) -> list[str]:
    """What in ``config`` llama.cpp cannot compute as our model does, one phrase a field
    (``model.FIELD=VALUE (...)``); empty if it can."""
    if config.arch != "decoder":
        return [
            f"model.arch={config.arch!r} (llama.cpp runs decoder-only language models, "
            "arch='decoder'; export-hf writes encoders and encoder-decoders)"
        ]
    arch = architecture(config)
    problems = []
    for field, values in arch.needs.items():
        value = getattr(config, field)
        if value not in values:
            wanted = " or ".join(repr(v) for v in values)
            why = (
                WHY.get(field) or WHY.get(str(value)) or f"llama.cpp's {arch.name}: {arch.summary}"
            )
            field = FIELDS.get(field, field)
            problems.append(f"model.{field}={value!r} (needs {wanted}: {why})")
    return problems


def check_tokenizer(tokenizer: Tokenizer | None) -> list[str]:
    """What keeps llama.cpp's ``gpt2`` tokenizer from encoding texts into ``tokenizer``'s
    ids exactly, one phrase a reason; empty if nothing does."""
    train = "train with data.tokenizer=bpe (byte-level BPE, which llama.cpp reads)"
    if tokenizer is None:
        return [f"the run has no tokenizer; {train}"]
    spec = json.loads(tokenizer.backend.to_str())
    model = spec.get("model") or {}
    kind = model.get("type")
    if kind == "WordLevel":
        return [f"data.tokenizer='char' (llama.cpp has no character-level tokenizer): {train}"]
    if kind == "WordPiece":
        return [f"data.tokenizer='wordpiece' (llama.cpp has no WordPiece for decoders): {train}"]
    if kind != "BPE":
        return [f"the run's tokenizer is {kind}, not byte-level BPE: {train}"]
    problems = []
    normalizer = spec.get("normalizer")
    if normalizer is not None:
        lowercase = normalizer.get("type") == "Lowercase"
        problems.append(
            "data.lowercase=true (llama.cpp's gpt2 tokenizer does not lower-case text)"
            if lowercase
            else f"the tokenizer's {normalizer.get('type')} normalizer (llama.cpp has none)"
        )
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        problems.append(
            f"the tokenizer's pre-tokenizer {pre.get('type')} (llama.cpp's gpt-2 splits text "
            f"as ByteLevel does): {train}"
        )
    elif pre.get("add_prefix_space"):
        problems.append("the tokenizer's add_prefix_space (llama.cpp adds no space)")
    decoder = spec.get("decoder") or {}
    if decoder.get("type") != "ByteLevel":
        problems.append(f"the tokenizer's decoder {decoder.get('type')} (needs ByteLevel)")
    special = {
        "dropout": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "byte_fallback": False,
        "ignore_merges": False,
    }
    for key, value in special.items():
        if model.get(key, value) not in (value, ""):
            problems.append(f"the tokenizer's BPE {key}={model[key]!r} (llama.cpp has none)")
    if tokenizer.eos_id is None:
        problems.append("the tokenizer has no eos token (llama.cpp's gpt2 would take id 11)")
    return problems


def interleave_heads(weight: Tensor, heads: int) -> Tensor:
    """The rows (or, for a bias, entries) of a query or key projection reordered head by
    head from our rotary layout, dimension ``i`` paired with ``i + d_head / 2``, to
    llama.cpp's, ``2i`` with ``2i + 1``: row ``2i`` of a head is our row ``i``, row
    ``2i + 1`` our row ``i + d_head / 2``."""
    rows = weight.shape[0]
    halves = weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
    return halves.transpose(1, 2).reshape(weight.shape)


def model_tensors(model: DecoderModel) -> dict[str, Tensor]:
    """The GGUF tensors of ``model`` (float32, our ``(out, in)`` layout, which is
    llama.cpp's ``{in, out}``), by llama.cpp's names."""
    config = model.config
    arch = architecture(config)
    d_head = config.d_model // config.n_heads
    embedding = model.embedding
    tokens = embedding.tokens.weight * embedding.tokens.scale
    if embedding.segments is not None:  # a decoder reads segment 0 at every token
        tokens = tokens + embedding.segments.weight[0]
    head = model.lm_head.weight * model.output_scale
    found: dict[str, Tensor] = {"token_embd.weight": tokens}
    if not torch.equal(head, tokens):  # else llama.cpp's head is the token embedding
        found["output.weight"] = head
    if isinstance(embedding.positions, LearnedPositionalEmbedding):
        found["position_embd.weight"] = embedding.positions.weight
    elif isinstance(embedding.positions, SinusoidalPositionalEncoding):
        found["position_embd.weight"] = sinusoidal_table(config.max_len, config.d_model)
    if arch.rotary:
        factors = rope_factors(model)
        if factors is not None:
            found["rope_freqs.weight"] = factors
    for i, layer in enumerate(model.decoder.layers):
        found |= {f"blk.{i}.{name}": t for name, t in layer_tensors(layer, config, d_head).items()}
    found |= norm_tensors("output_norm", model.decoder.norm, arch)
    return found


def layer_tensors(layer: torch.nn.Module, config: ModelConfig, d_head: int) -> dict[str, Tensor]:
    """A decoder layer's tensors, by llama.cpp's names within its block."""
    arch = architecture(config)
    attention, ffn = layer.self_attn, layer.feed_forward
    q_rows, kv_rows = config.d_model, config.kv_heads * d_head
    qkv = attention.qkv_proj
    weight = qkv.weight
    bias = qkv.bias if qkv.bias is not None or not arch.all_biases else torch.zeros(len(weight))
    if not config.scale_attention:  # llama.cpp divides scores by sqrt(d_head): undo it in q
        scale = torch.ones(len(weight))
        scale[:q_rows] = math.sqrt(d_head)
        weight = weight * scale[:, None]
        bias = None if bias is None else bias * scale
    found: dict[str, Tensor] = {}
    if arch.fused_qkv:
        found["attn_qkv.weight"] = weight
        if bias is not None:
            found["attn_qkv.bias"] = bias
    else:
        sizes, heads = (q_rows, kv_rows, kv_rows), (config.n_heads, config.kv_heads, None)
        for kind, tensor in (("weight", weight), ("bias", bias)):
            if tensor is None:
                continue
            for part, rows, count in zip("qkv", tensor.split(sizes), heads, strict=True):
                # queries and keys interleaved for llama.cpp's rotary pairs; values as they are
                found[f"attn_{part}.{kind}"] = (
                    rows if count is None else interleave_heads(rows, count)
                )
    maps = {"attn_output": attention.out_proj, "ffn_down": ffn.w2}
    maps |= {"ffn_gate": ffn.w1, "ffn_up": ffn.w3} if config.gated else {"ffn_up": ffn.w1}
    for name, linear in maps.items():
        found[f"{name}.weight"] = linear.weight
        if linear.bias is not None:
            found[f"{name}.bias"] = linear.bias
        elif arch.all_biases:
            found[f"{name}.bias"] = torch.zeros(linear.weight.shape[0])
    found |= norm_tensors("attn_norm", layer.self_attn_norm, arch)
    found |= norm_tensors("ffn_norm", layer.feed_forward_norm, arch)
    return found


def norm_tensors(name: str, norm: torch.nn.Module, arch: Architecture) -> dict[str, Tensor]:
    """A norm's gain, and its bias if it has one (a ``gpt2``'s LayerNorm always does:
    zeros where ours has none)."""
    found = {f"{name}.weight": norm.weight}
    if norm.bias is not None:
        found[f"{name}.bias"] = norm.bias
    elif arch.all_biases:
        found[f"{name}.bias"] = torch.zeros_like(norm.weight)
    return found


def rope_factors(model: DecoderModel) -> Tensor | None:
    """llama.cpp's ``rope_freqs``: what each rotary frequency is divided by, for a scaling
    it has no key of (``llama3``, as its own converter writes Llama 3.1's); ``None`` for
    unscaled and linearly scaled frequencies, which are keys."""
    config = model.config
    if config.rope_scaling in (None, "linear"):
        return None
    unscaled = inverse_frequencies(config.d_model // config.n_heads, config.rope_theta)
    return (unscaled / model.decoder.positional.inv_freq.double()).float()


def tokenizer_vocabulary(tokenizer: Tokenizer, size: int) -> tuple[list[str], list[int]]:
    """The token strings of ids ``0 .. size - 1`` and their llama.cpp token types: special
    tokens are control tokens (never produced from text, as ours), other added tokens
    user-defined, the rest normal; ids past the tokenizer's, which the model's embedding
    may have, unused ``[PAD<id>]`` tokens."""
    vocab = tokenizer.backend.get_vocab(with_added_tokens=True)
    strings: dict[int, str] = {i: token for token, i in vocab.items()}
    added = tokenizer.backend.get_added_tokens_decoder()
    tokens, types = [], []
    for i in range(size):
        if i not in strings:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(strings[i])
            types.append(
                gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED
            )
        else:
            tokens.append(strings[i])
            types.append(gguf.TokenType.NORMAL)
    return tokens, [int(t) for t in types]


def merges(tokenizer: Tokenizer) -> list[str]:
    """The BPE merges, in rank order, as llama.cpp reads them: ``"left right"``."""
    found = json.loads(tokenizer.backend.to_str())["model"]["merges"]
    return [" ".join(merge) if isinstance(merge, list) else merge for merge in found]


def encoded(name: str, tensor: Tensor, type: str) -> tuple[np.ndarray, gguf.GGMLQuantizationType]:
    """``tensor`` in the file's ``type``: vectors, norms, positions and rotary factors stay
    float32, as llama.cpp's converter keeps them; a matrix whose rows do not fill q8_0's
    blocks of 32 falls back to f16, as there."""
    data = tensor.detach().to("cpu", torch.float32).contiguous().numpy()
    quantization = QUANTIZATION[type]
    if data.ndim < 2 or name.endswith("_norm.weight") or name in KEPT_F32:
        quantization = gguf.GGMLQuantizationType.F32
    try:
        return gguf.quants.quantize(data, quantization), quantization
    except gguf.QuantError:
        return gguf.quants.quantize(
            data, gguf.GGMLQuantizationType.F16
        ), gguf.GGMLQuantizationType.F16


def save_gguf(
    model: DecoderModel,
    tokenizer: Tokenizer | None,
    path: str | Path,
    type: str,
    name: str,
    chat_template: str | None = None,
) -> str:
    """Write ``model`` and ``tokenizer`` as a GGUF file at ``path`` (atomically), its
    weight matrices in ``type`` (``f32``, ``f16`` or ``q8_0``); ``name`` is the model's
    ``general.name``, the ``chat_template`` its ``tokenizer.chat_template`` (which
    llama.cpp formats chats with). Returns llama.cpp's architecture. A model or tokenizer
    that llama.cpp cannot run as ours is a ``ValueError`` naming every field that stands in
    the way, before anything is written."""
    if type not in QUANTIZATION:
        raise ValueError(f"type={type!r} must be one of {', '.join(QUANTIZATION)}")
    config = model.config
    problems = check_model(config)
    if config.arch == "decoder":
        problems += check_tokenizer(tokenizer)
    if problems:
        raise ValueError("llama.cpp cannot run it as ours: " + "; ".join(problems))
    assert tokenizer is not None
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocab_size} tokens, more than the model's "
            f"vocab_size={config.vocab_size}"
        )
    arch = architecture(config)
    writer = gguf.GGUFWriter(None, arch.name)
    write_settings(writer, config, arch, type, name)
    write_tokenizer(writer, tokenizer, config.vocab_size)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    with torch.no_grad():
        for tensor_name, tensor in model_tensors(model).items():
            data, quantization = encoded(tensor_name, tensor, type)
            writer.add_tensor(tensor_name, data, raw_dtype=quantization)
    atomic_write_gguf(path, writer)
    return arch.name


def write_settings(
    writer: gguf.GGUFWriter, config: ModelConfig, arch: Architecture, type: str, name: str
) -> None:
    """The model's keys: its name and file type, sizes, norms' eps, rotary settings."""
    writer.add_name(name)
    writer.add_file_type(FILE_TYPES[type])
    if type == "q8_0":
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_context_length(config.max_len)
    writer.add_embedding_length(config.d_model)
    writer.add_block_count(config.n_layers)
    writer.add_feed_forward_length(config.d_ff)
    writer.add_head_count(config.n_heads)
    writer.add_head_count_kv(config.kv_heads)
    arch.eps_key(writer, config.layer_norm_eps)
    if arch.rotary:
        writer.add_vocab_size(config.vocab_size)
        writer.add_rope_dimension_count(config.d_model // config.n_heads)
        writer.add_rope_freq_base(config.rope_theta)
        if config.rope_scaling == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(config.rope_factor)


def write_tokenizer(writer: gguf.GGUFWriter, tokenizer: Tokenizer, size: int) -> None:
    """The tokenizer as llama.cpp's ``gpt2`` model: ``size`` tokens, the merges, and the
    special ids; no bos or eos added to texts (our language models read none)."""
    tokens, types = tokenizer_vocabulary(tokenizer, size)
    writer.add_tokenizer_model(TOKENIZER_MODEL)
    writer.add_tokenizer_pre(PRE_TOKENIZER)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges(tokenizer))
    eos = tokenizer.eos_id
    assert eos is not None
    writer.add_eos_token_id(eos)
    # without a bos of its own, GPT-2's convention: one token ends a text and starts one
    writer.add_bos_token_id(eos if tokenizer.bos_id is None else tokenizer.bos_id)
    if tokenizer.unk_id is not None:
        writer.add_unk_token_id(tokenizer.unk_id)
    if tokenizer.pad_id is not None:
        writer.add_pad_token_id(tokenizer.pad_id)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
