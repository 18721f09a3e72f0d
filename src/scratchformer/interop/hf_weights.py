"""Tensor names of Hugging Face BERT, GPT-2, Llama-family and T5 checkpoints <-> ours.

A table maps each of our tensors to its source in the checkpoint: one tensor, or the
separate query, key and value of BERT and Llama concatenated into our fused projection
(Llama's keys and values have fewer rows than its queries with grouped-query attention).
GPT-2 stores its linear maps as ``Conv1D`` weights, ``(in, out)``: the transpose of
``nn.Linear``'s. The same table converts both ways, and tells which names and shapes a
checkpoint must have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

from ..config import ModelConfig


@dataclass(frozen=True)
class Source:
    """The checkpoint tensors that make one of ours: concatenated along the first
    dimension, each transposed first if ``transposed``."""

    names: tuple[str, ...]
    transposed: bool = False
    rows: tuple[int, ...] | None = None
    """The rows each name contributes, when they differ (else equal parts)."""
    copies: bool = False
    """Each name holds the whole tensor (a tied copy that the checkpoint keeps apart): read
    from the first name, written to every one."""

    def split(self, tensor: Tensor) -> tuple[Tensor, ...]:
        """Our tensor cut into the checkpoint's parts."""
        if self.copies:
            return (tensor,) * len(self.names)
        if self.rows is None:
            return tensor.chunk(len(self.names))
        return tensor.split(self.rows)


Table = dict[str, Source]


def linear(ours: str, theirs: str, transposed: bool = False) -> Table:
    """A linear map or a LayerNorm: weight and bias."""
    return {
        f"{ours}.weight": Source((f"{theirs}.weight",), transposed),
        f"{ours}.bias": Source((f"{theirs}.bias",)),
    }


def bert_table(config: ModelConfig) -> Table:
    table = {
        "embedding.tokens.weight": Source(("embeddings.word_embeddings.weight",)),
        "embedding.positions.weight": Source(("embeddings.position_embeddings.weight",)),
        **linear("embedding.norm", "embeddings.LayerNorm"),
    }
    if config.type_vocab_size:
        table["embedding.segments.weight"] = Source(("embeddings.token_type_embeddings.weight",))
    for i in range(config.n_layers):
        ours, theirs = f"encoder.layers.{i}", f"encoder.layer.{i}"
        qkv = [f"{theirs}.attention.self.{part}" for part in ("query", "key", "value")]
        table |= {
            f"{ours}.self_attn.qkv_proj.weight": Source(tuple(f"{n}.weight" for n in qkv)),
            f"{ours}.self_attn.qkv_proj.bias": Source(tuple(f"{n}.bias" for n in qkv)),
            **linear(f"{ours}.self_attn.out_proj", f"{theirs}.attention.output.dense"),
            **linear(f"{ours}.self_attn_norm", f"{theirs}.attention.output.LayerNorm"),
            **linear(f"{ours}.feed_forward.w1", f"{theirs}.intermediate.dense"),
            **linear(f"{ours}.feed_forward.w2", f"{theirs}.output.dense"),
            **linear(f"{ours}.feed_forward_norm", f"{theirs}.output.LayerNorm"),
        }
    if config.pooler:
        table |= linear("pooler.dense", "pooler.dense")
    return table


def gpt2_table(config: ModelConfig) -> Table:
    """The LM head is tied to ``wte``: not a tensor of its own."""
    table = {
        "embedding.tokens.weight": Source(("wte.weight",)),
        "embedding.positions.weight": Source(("wpe.weight",)),
        **linear("decoder.norm", "ln_f"),
    }
    for i in range(config.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"h.{i}"
        table |= {
            **linear(f"{ours}.self_attn_norm", f"{theirs}.ln_1"),
            **linear(f"{ours}.self_attn.qkv_proj", f"{theirs}.attn.c_attn", transposed=True),
            **linear(f"{ours}.self_attn.out_proj", f"{theirs}.attn.c_proj", transposed=True),
            **linear(f"{ours}.feed_forward_norm", f"{theirs}.ln_2"),
            **linear(f"{ours}.feed_forward.w1", f"{theirs}.mlp.c_fc", transposed=True),
            **linear(f"{ours}.feed_forward.w2", f"{theirs}.mlp.c_proj", transposed=True),
        }
    return table


def llama_table(config: ModelConfig) -> Table:
    """Llama, Qwen2 and Mistral (``LlamaForCausalLM``, ...); Qwen2's query, key and value
    projections have biases. A tied LM head is not a tensor of its own."""
    table = {
        "embedding.tokens.weight": Source(("model.embed_tokens.weight",)),
        "decoder.norm.weight": Source(("model.norm.weight",)),
    }
    if not config.tie_output:
        table["lm_head.weight"] = Source(("lm_head.weight",))
    d_head = config.d_model // config.n_heads
    rows = (config.d_model, config.kv_heads * d_head, config.kv_heads * d_head)
    for i in range(config.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"model.layers.{i}"
        qkv = [f"{theirs}.self_attn.{part}_proj" for part in "qkv"]
        table |= {
            f"{ours}.self_attn_norm.weight": Source((f"{theirs}.input_layernorm.weight",)),
            f"{ours}.self_attn.qkv_proj.weight": Source(
                tuple(f"{n}.weight" for n in qkv), rows=rows
            ),
            f"{ours}.self_attn.out_proj.weight": Source((f"{theirs}.self_attn.o_proj.weight",)),
            f"{ours}.feed_forward_norm.weight": Source(
                (f"{theirs}.post_attention_layernorm.weight",)
            ),
            f"{ours}.feed_forward.w1.weight": Source((f"{theirs}.mlp.gate_proj.weight",)),
            f"{ours}.feed_forward.w3.weight": Source((f"{theirs}.mlp.up_proj.weight",)),
            f"{ours}.feed_forward.w2.weight": Source((f"{theirs}.mlp.down_proj.weight",)),
        }
        if config.use_qkv_bias:
            bias = Source(tuple(f"{n}.bias" for n in qkv), rows=rows)
            table[f"{ours}.self_attn.qkv_proj.bias"] = bias
    return table


def t5_attention(ours: str, theirs: str, cross: bool) -> Table:
    """T5's query, key, value and output projections (no biases), into our fused ones:
    queries, keys and values of self-attention; keys and values of cross-attention."""
    weights = {part: f"{theirs}.{part}.weight" for part in "qkvo"}
    fused = {f"{ours}.qkv_proj.weight": Source((weights["q"], weights["k"], weights["v"]))}
    if cross:
        fused = {
            f"{ours}.q_proj.weight": Source((weights["q"],)),
            f"{ours}.kv_proj.weight": Source((weights["k"], weights["v"])),
        }
    return fused | {f"{ours}.out_proj.weight": Source((weights["o"],))}


def t5_feed_forward(ours: str, theirs: str, gated: bool) -> Table:
    """T5's ``wi`` and ``wo`` (v1.0), or ``wi_0``, ``wi_1`` and ``wo`` (v1.1, gated)."""
    inner = {"w1": "wi_0", "w3": "wi_1"} if gated else {"w1": "wi"}
    return {
        f"{ours}.{name}.weight": Source((f"{theirs}.{part}.weight",))
        for name, part in (inner | {"w2": "wo"}).items()
    }


def t5_norm(sublayer: str) -> Source:
    """The RMS norm (a weight, no bias) before a T5 sub-layer."""
    return Source((f"{sublayer}.layer_norm.weight",))


def t5_table(config: ModelConfig) -> Table:
    """``T5ForConditionalGeneration``: one embedding table (``shared``) for both stacks,
    pre-LN blocks of numbered sub-layers (``layer.0`` self-attention, ``layer.1``
    cross-attention in the decoder, then the feed-forward), RMS norms, no biases. Each
    stack's relative bias table sits in its first block. A tied LM head is not a tensor
    of its own."""
    table = {"src_embedding.tokens.weight": Source(("shared.weight",))}
    if not config.tie_output:
        table["lm_head.weight"] = Source(("lm_head.weight",))
    stacks = (("encoder", config.n_layers), ("decoder", config.decoder_layers))
    for stack, n_layers in stacks:
        first = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        table[f"{stack}.positional.weight"] = Source((first,))
        table[f"{stack}.norm.weight"] = Source((f"{stack}.final_layer_norm.weight",))
        for i in range(n_layers):
            ours, theirs = f"{stack}.layers.{i}", f"{stack}.block.{i}.layer"
            sublayers = [("self_attn", "SelfAttention")]
            if stack == "decoder":
                sublayers.append(("cross_attn", "EncDecAttention"))
            for j, (name, part) in enumerate(sublayers):
                cross = name == "cross_attn"
                table |= t5_attention(f"{ours}.{name}", f"{theirs}.{j}.{part}", cross)
                table[f"{ours}.{name}_norm.weight"] = t5_norm(f"{theirs}.{j}")
            last = f"{theirs}.{len(sublayers)}"
            table |= t5_feed_forward(f"{ours}.feed_forward", f"{last}.DenseReluDense", config.gated)
            table[f"{ours}.feed_forward_norm.weight"] = t5_norm(last)
    return table
