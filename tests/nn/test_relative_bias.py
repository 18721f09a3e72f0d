"""T5's relative position bias: the buckets by hand, the bias looked up, aligned to the last
keys of a cache; attention with T5's unscaled scores on every path."""

import math

import pytest
import torch

from scratchformer.inference.kernels import few_query_attention
from scratchformer.nn import MultiHeadAttention, scaled_dot_product_attention
from scratchformer.nn.relative_bias import RelativePositionBias, relative_bucket

TOL = 1e-6

# key - query -> bucket, with 32 buckets and max_distance 128, worked out from T5's rule:
# of the n buckets of a direction, a distance d < n / 2 has bucket d, a larger one
# n / 2 + floor(log(d / (n / 2)) / log(128 / (n / 2)) * n / 2), at most n - 1
BIDIRECTIONAL = {
    0: 0,
    -3: 3,  # keys before the query: the lower 16 buckets, 8 of them exact
    3: 16 + 3,  # keys after it: the upper 16
    -7: 7,
    -8: 8,  # 8 + floor(log(8 / 8) / log(16) * 8)
    -20: 10,  # 8 + floor(log(2.5) / log(16) * 8) = 8 + floor(2.64)
    20: 16 + 10,
    -127: 15,  # 8 + floor(log(15.875) / log(16) * 8) = 8 + floor(7.98)
    -128: 15,  # 8 + 8, capped at 15
    500: 16 + 15,  # beyond max_distance: the last bucket
}
CAUSAL = {
    5: 0,  # keys after the query share bucket 0 (they are masked anyway)
    0: 0,
    -5: 5,
    -15: 15,
    -16: 16,
    -20: 17,  # 16 + floor(log(1.25) / log(8) * 16) = 16 + floor(1.72)
    -100: 30,  # 16 + floor(log(6.25) / log(8) * 16) = 16 + floor(14.10)
    -1000: 31,  # beyond max_distance
}


@pytest.mark.parametrize(("bidirectional", "expected"), [(True, BIDIRECTIONAL), (False, CAUSAL)])
def test_buckets_by_hand(bidirectional: bool, expected: dict[int, int]) -> None:
    distance = torch.tensor(list(expected))
    buckets = relative_bucket(distance, 32, 128, bidirectional)
    assert buckets.tolist() == list(expected.values())


def test_buckets_follow_the_formula_at_every_distance() -> None:
    """Every distance up to past max_distance, against the rule in plain Python."""

    def bucket(d: int, n: int, max_distance: int) -> int:
        exact = n // 2
        if d < exact:
            return d
        far = math.log(d / exact) / math.log(max_distance / exact) * (n - exact)
        return min(n - 1, exact + int(far))

    distances = range(-300, 301)
    both = relative_bucket(torch.tensor(distances), 32, 128, True).tolist()
    causal = relative_bucket(torch.tensor(distances), 32, 128, False).tolist()
    assert both == [(16 if d > 0 else 0) + bucket(abs(d), 16, 128) for d in distances]
    assert causal == [bucket(max(-d, 0), 32, 128) for d in distances]


def test_bias_is_the_table_at_each_bucket_and_aligned_to_the_last_keys() -> None:
    torch.manual_seed(0)
    for bidirectional in (True, False):
        bias = RelativePositionBias(3, 8, 20, bidirectional)
        torch.nn.init.normal_(bias.weight)
        full = bias(6, 6)
        assert full.shape == (1, 3, 6, 6)
        distance = torch.arange(6) - torch.arange(6)[:, None]
        buckets = relative_bucket(distance, 8, 20, bidirectional)
        for h in range(3):
            expected = torch.tensor([[bias.weight[b, h].item() for b in row] for row in buckets])
            torch.testing.assert_close(full[0, h], expected, atol=0, rtol=0)
        # one new query (position 5) against a cache's 6 keys; two new queries
        torch.testing.assert_close(bias(1, 6), full[:, :, 5:], atol=0, rtol=0)
        torch.testing.assert_close(bias(2, 6), full[:, :, 4:], atol=0, rtol=0)
        positioning = bias.positioning(torch.arange(4, 6), 6)
        assert positioning.rotation is None
        torch.testing.assert_close(positioning.bias, full[:, :, 4:], atol=0, rtol=0)
    assert list(bias.state_dict()) == ["weight"]


def test_unscaled_scores_by_hand() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    out, weights = scaled_dot_product_attention(q, k, v, scale=1.0)
    expected = (q @ k.transpose(1, 2)).softmax(-1)
    torch.testing.assert_close(weights, expected, atol=TOL, rtol=0)
    torch.testing.assert_close(out, expected @ v, atol=TOL, rtol=0)
    scaled, _ = scaled_dot_product_attention(q * 2, k, v)  # divided by sqrt(4)
    torch.testing.assert_close(scaled, out, atol=TOL, rtol=0)
    torch.testing.assert_close(few_query_attention(q, k, v, scale=1.0), out, atol=TOL, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_unscaled_attention_with_a_bias_is_the_same_fused_and_written_out(causal: bool) -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4, bias=False, scale=1.0).eval()
    bias = RelativePositionBias(4, 8, 20, bidirectional=not causal)
    torch.nn.init.normal_(bias.weight)
    x = torch.randn(2, 7, 16)
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., 5:] = False
    fused, _ = attention(x, mask=mask, is_causal=causal, bias=bias(7, 7))
    written, weights = attention(x, mask=mask, is_causal=causal, bias=bias(7, 7), need_weights=True)
    torch.testing.assert_close(fused, written, atol=TOL, rtol=0)
    # the weights by hand: unscaled scores plus the bias, masked
    q, k, _ = attention.project(x)
    scores = q @ k.transpose(-2, -1) + bias(7, 7)
    allowed = mask & (torch.ones(7, 7).tril().bool() if causal else True)
    expected = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    torch.testing.assert_close(weights, expected, atol=TOL, rtol=0)
