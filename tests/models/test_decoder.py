import torch

from scratchformer import DecoderLM, ModelConfig


def config(**overrides) -> ModelConfig:
    values = dict(arch="decoder", vocab_size=30, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    return ModelConfig(**{**values, **overrides})


def test_lm_logits_and_weights() -> None:
    model = DecoderLM(config()).eval()
    out = model(torch.randint(0, 30, (2, 7)), need_weights=True)
    assert out.logits.shape == (2, 7, 30)
    weights = out.attentions["decoder"]
    assert len(weights) == 2 and weights[0].shape == (2, 2, 7, 7)
    assert torch.all(weights[0].triu(diagonal=1) == 0), "a position attends to the future"


def test_tied_head_shares_the_embedding() -> None:
    model = DecoderLM(config())
    assert model.lm_head.weight is model.embedding.tokens.weight
    assert DecoderLM(config(tie_output=False)).lm_head.weight is not None


def test_gpt2_style_pre_ln_with_learned_positions() -> None:
    model = DecoderLM(config(norm_first=True, positional="learned", activation="gelu_tanh"))
    assert model.decoder.norm is not None
    assert model(torch.randint(0, 30, (1, 4))).logits.shape == (1, 4, 30)
