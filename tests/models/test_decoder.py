import torch

from helpers import tiny_config
from scratchformer import DecoderModel, ModelConfig
from scratchformer.nn import LayerNorm


def config(**overrides) -> ModelConfig:
    return tiny_config(**{"arch": "decoder", "vocab_size": 30, **overrides})


def test_lm_logits_and_weights() -> None:
    model = DecoderModel(config()).eval()
    out = model(torch.randint(0, 30, (2, 7)), need_weights=True)
    assert out.logits.shape == (2, 7, 30)
    weights = out.attentions["decoder"]
    assert len(weights) == 2 and weights[0].shape == (2, model.config.n_heads, 7, 7)
    assert torch.all(weights[0].triu(diagonal=1) == 0), "a position attends to the future"


def test_tied_head_shares_the_embedding() -> None:
    model = DecoderModel(config())
    assert model.lm_head.weight is model.embedding.tokens.weight
    untied = DecoderModel(config(tie_output=False))
    assert untied.lm_head.weight is not untied.embedding.tokens.weight
    assert untied.lm_head.weight.shape == untied.embedding.tokens.weight.shape


def test_gpt2_style_pre_ln_with_learned_positions() -> None:
    model = DecoderModel(config(norm_first=True, positional="learned", activation="gelu_tanh"))
    assert isinstance(model.decoder.norm, LayerNorm)  # the final norm of pre-LN stacks
    assert DecoderModel(config(norm_first=False)).decoder.norm is None
    assert model(torch.randint(0, 30, (1, 4))).logits.shape == (1, 4, 30)


def neox_weights(neox: torch.nn.Module, n_heads: int) -> dict[str, torch.Tensor]:
    """A GPT-NeoX state dict renamed for ``DecoderModel``. NeoX's fused projection is laid
    out head by head (q, k, v of head 0, then of head 1, ...); ours part by part."""
    source = neox.state_dict()
    d_model = source["gpt_neox.embed_in.weight"].shape[1]
    d_head = d_model // n_heads
    weights = {
        "embedding.tokens.weight": source["gpt_neox.embed_in.weight"],
        "decoder.norm.weight": source["gpt_neox.final_layer_norm.weight"],
        "decoder.norm.bias": source["gpt_neox.final_layer_norm.bias"],
        "lm_head.weight": source["lm_head.weight"],
    }
    names = {
        "self_attn.qkv_proj": "attention.query_key_value",
        "self_attn.out_proj": "attention.dense",
        "self_attn_norm": "input_layernorm",
        "feed_forward.w1": "mlp.dense_h_to_4h",
        "feed_forward.w2": "mlp.dense_4h_to_h",
        "feed_forward_norm": "post_attention_layernorm",
    }
    for key, value in source.items():
        if not key.startswith("gpt_neox.layers."):
            continue
        layer, rest = key.removeprefix("gpt_neox.layers.").split(".", 1)
        module, kind = rest.rsplit(".", 1)
        ours = next(o for o, theirs in names.items() if theirs == module)
        if module == "attention.query_key_value":  # (heads, 3, d_head) -> (3, heads, d_head)
            shape = value.shape[1:]
            value = value.view(n_heads, 3, d_head, *shape).transpose(0, 1).reshape(-1, *shape)
        weights[f"decoder.layers.{layer}.{ours}.{kind}"] = value
    return weights


def test_rotary_lm_matches_hugging_face_gpt_neox() -> None:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    ours = config(
        dropout=0.0,
        activation="gelu",
        norm_first=True,
        positional="rotary",
        scale_embedding=False,
        tie_output=False,
    )
    torch.manual_seed(0)
    neox = GPTNeoXForCausalLM(
        GPTNeoXConfig(
            vocab_size=ours.vocab_size,
            hidden_size=ours.d_model,
            num_attention_heads=ours.n_heads,
            num_hidden_layers=ours.n_layers,
            intermediate_size=ours.d_ff,
            hidden_act="gelu",
            rotary_pct=1.0,
            use_parallel_residual=False,
            attention_dropout=0.0,
            hidden_dropout=0.0,
        )
    ).eval()
    model = DecoderModel(ours).eval()
    model.load_state_dict(neox_weights(neox, n_heads=ours.n_heads))
    ids = torch.randint(0, 30, (2, 9))
    with torch.no_grad():
        expected = neox(ids).logits
        torch.testing.assert_close(model(ids).logits, expected, atol=1e-5, rtol=1e-4)
        # written-out attention (weights requested) gives the same numbers
        out = model(ids, need_weights=True)
        torch.testing.assert_close(out.logits, expected, atol=1e-5, rtol=1e-4)
