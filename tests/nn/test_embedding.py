import math

import pytest
import torch

from scratchformer.nn import (
    Embedding,
    LayerNorm,
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)


def test_pe_at_position_two_starts_with_sin2_cos2() -> None:
    table = sinusoidal_table(5, 8)
    torch.testing.assert_close(table[2, :2], torch.tensor([0.9093, -0.4161]), atol=1e-4, rtol=0)


def test_pe_matches_the_papers_formula_written_as_loops() -> None:
    d = 10
    table = sinusoidal_table(20, d)
    for pos in range(20):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_pe_with_odd_width() -> None:
    table = sinusoidal_table(4, 5)
    assert table.shape == (4, 5)
    assert table[3, 4].item() == pytest.approx(math.sin(3 / 10000 ** (4 / 5)), abs=1e-6)


def test_sinusoidal_encoding_adds_the_table_at_any_position() -> None:
    pe = SinusoidalPositionalEncoding(16).eval()
    x = torch.randn(2, 20, 16)
    torch.testing.assert_close(pe(x), x + sinusoidal_table(20, 16))
    positions = torch.tensor([[3, 4], [30, 31]])
    out = pe(torch.zeros(2, 2, 16), positions)
    torch.testing.assert_close(out, sinusoidal_table(32, 16)[positions])
    assert "table" not in pe.state_dict()


def test_dropout_applies_in_training_only() -> None:
    pe = SinusoidalPositionalEncoding(16, dropout=0.5)
    x = torch.ones(1, 50, 16)
    assert (pe(x) == 0).any()
    pe.eval()
    assert not (pe(x) == 0).any()


def test_token_embedding_is_scaled_by_sqrt_d_model() -> None:
    embedding = TokenEmbedding(11, 16)
    ids = torch.tensor([[1, 5, 10]])
    torch.testing.assert_close(embedding(ids), embedding.weight[ids] * 4.0)
    assert TokenEmbedding(11, 16, scale=False)(ids).abs().mean() < 1


def test_learned_positions_add_rows_and_refuse_too_long_input() -> None:
    learned = LearnedPositionalEmbedding(8, max_len=6)
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(learned(x), x + learned.weight[None])
    with pytest.raises(ValueError, match="max_len=6"):
        learned(torch.randn(1, 7, 8))
    x = torch.randn(1, 2, 8)
    torch.testing.assert_close(learned(x, torch.tensor([[4, 5]])), x + learned.weight[4:])
    with pytest.raises(ValueError, match="position 6 is beyond max_len=6"):
        learned(x, torch.tensor([[4, 6]]))


def test_embedding_composes_tokens_and_positions() -> None:
    embedding = Embedding(TokenEmbedding(30, 8), SinusoidalPositionalEncoding(8)).eval()
    ids = torch.tensor([[4, 2, 9]])
    expected = embedding.tokens.weight[ids] * math.sqrt(8) + sinusoidal_table(3, 8)
    torch.testing.assert_close(embedding(ids), expected)


def test_without_positions_the_tokens_alone() -> None:
    """Schemes that position attention (rotary, ALiBi) add nothing to the embeddings."""
    embedding = Embedding(TokenEmbedding(30, 8, scale=False)).eval()
    ids = torch.tensor([[4, 2, 9]])
    torch.testing.assert_close(embedding(ids), embedding.tokens.weight[ids])


def test_segment_embeddings_are_added_per_token() -> None:
    embedding = Embedding(
        TokenEmbedding(30, 8),
        SinusoidalPositionalEncoding(8),
        segments=TokenEmbedding(2, 8, scale=False),
    ).eval()
    ids, segments = torch.tensor([[4, 2, 9]]), torch.tensor([[0, 1, 1]])
    expected = (
        embedding.tokens.weight[ids] * math.sqrt(8)
        + embedding.segments.weight[segments]
        + sinusoidal_table(3, 8)
    )
    torch.testing.assert_close(embedding(ids, segments=segments), expected)
    torch.testing.assert_close(embedding(ids), embedding(ids, segments=torch.zeros_like(ids)))
    with pytest.raises(ValueError, match="without segments"):
        Embedding(TokenEmbedding(30, 8))(ids, segments=segments)


def test_embedding_norm_comes_before_dropout() -> None:
    """BERT: LayerNorm(tokens + segments + positions), then dropout."""
    embedding = Embedding(
        TokenEmbedding(30, 8, scale=False),
        LearnedPositionalEmbedding(8),
        segments=TokenEmbedding(2, 8, scale=False),
        norm=LayerNorm(8),
        dropout=0.5,
    )
    ids, segments = torch.tensor([[4, 2, 9, 1]]), torch.tensor([[0, 0, 1, 1]])
    summed = embedding.tokens.weight[ids] + embedding.segments.weight[segments]
    normed = torch.nn.functional.layer_norm(summed + embedding.positions.weight[:4], (8,))
    torch.testing.assert_close(embedding.eval()(ids, segments=segments), normed)
    dropped = embedding.train()(ids, segments=segments)
    kept = dropped != 0
    assert 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(dropped[kept], 2 * normed[kept])
