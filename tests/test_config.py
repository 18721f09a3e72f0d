import dataclasses

import pytest

from scratchformer import ModelConfig, build_model, count_parameters


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(d_model=300, n_heads=8), "d_model=300 is not divisible by n_heads=8"),
        (dict(n_layers=0), "n_layers=0 must be a positive integer"),
        (dict(vocab_size=-5), "vocab_size=-5 must be a positive integer"),
        (dict(d_ff=2.5), "d_ff=2.5 must be a positive integer"),
        (dict(dropout=1.0), r"dropout=1.0 must be in \[0, 1\)"),
        (dict(attention_dropout=-0.1), r"attention_dropout=-0.1 must be in \[0, 1\)"),
        (dict(activation="tanh"), "activation='tanh' must be one of relu, gelu, gelu_tanh"),
        (dict(arch="rnn"), "arch='rnn' must be one of"),
        (dict(positional="rope"), "positional='rope' must be one of"),
        (dict(head="classification"), "head='classification' needs arch='encoder'"),
        (dict(arch="encoder", head="ner"), "head='ner' must be one of"),
        (dict(share_embeddings=True, tgt_vocab_size=7), "tgt_vocab_size=7 equal to vocab_size"),
        (dict(n_decoder_layers=0), "n_decoder_layers=0 must be a positive integer"),
        (dict(layer_norm_eps=0), "layer_norm_eps=0 must be > 0"),
    ],
)
def test_bad_values_name_the_field(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        ModelConfig(**overrides)


def test_json_round_trip(tmp_path) -> None:
    config = ModelConfig(arch="encoder", vocab_size=99, head="regression", num_labels=1)
    assert ModelConfig.from_json(config.to_json()) == config
    config.save(tmp_path / "config.json")
    assert ModelConfig.load(tmp_path / "config.json") == config


def test_unknown_field_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown ModelConfig field.*: d_modle"):
        ModelConfig.from_dict({"d_modle": 3})


def test_defaults_are_the_papers_base_model() -> None:
    config = ModelConfig(vocab_size=37000, share_embeddings=True)
    assert (config.d_model, config.n_heads, config.n_layers, config.d_ff) == (512, 8, 6, 2048)
    assert (config.dropout, config.norm_first, config.activation) == (0.1, False, "relu")
    # paper, table 3: 65M parameters for the base model with a shared 37k vocabulary
    assert 60e6 < count_parameters(build_model(config)) < 66e6


def test_parameter_count_by_hand() -> None:
    d, ff, vocab = 16, 32, 30
    config = ModelConfig(
        arch="decoder", vocab_size=vocab, d_model=d, n_heads=2, n_layers=3, d_ff=ff
    )
    attention = 4 * d * d + 4 * d
    feed_forward = 2 * d * ff + ff + d
    layer = attention + feed_forward + 2 * 2 * d
    assert count_parameters(build_model(config)) == vocab * d + 3 * layer  # tied head
    untied = dataclasses.replace(config, tie_output=False)
    assert count_parameters(build_model(untied)) == 2 * vocab * d + 3 * layer
