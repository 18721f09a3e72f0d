import pytest
import torch

from scratchformer.nn import Dropout, dropout


def test_identity_when_not_training_or_p_zero() -> None:
    x = torch.randn(4, 5)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    module = Dropout(0.5).eval()
    assert module(x) is x


def test_drop_rate_and_scale_of_kept_values() -> None:
    """About ``p`` of a million elements are zeroed; every kept one is ``x / (1 - p)``, with
    ``p`` rounded to a multiple of 1/65536."""
    torch.manual_seed(0)
    x = torch.rand(1000, 1000) + 1.0  # never zero, so zeros mark dropped elements
    y = dropout(x, 0.1)
    dropped = y == 0
    assert abs(dropped.float().mean().item() - 0.1) < 0.002  # 6 standard deviations
    kept_rate = 1 - round(0.1 * 65536) / 65536
    torch.testing.assert_close(y[~dropped], x[~dropped] / kept_rate, rtol=1e-6, atol=0)


def test_expectation_is_preserved_for_an_uneven_p() -> None:
    """p = 1/3 is not a multiple of 1/65536; the scale uses the rounded rate, so the mean
    of many draws of a constant stays at the constant."""
    torch.manual_seed(1)
    y = dropout(torch.ones(2_000_000), 1 / 3)
    assert abs(y.mean().item() - 1.0) < 0.003  # 6 standard deviations


def test_gradient_is_the_mask_times_the_scale() -> None:
    torch.manual_seed(2)
    x = torch.randn(64, 32, requires_grad=True)
    y = dropout(x, 0.25)
    y.backward(torch.ones_like(y))
    expected = (y != 0).float() / 0.75
    torch.testing.assert_close(x.grad, expected)


def test_same_seed_same_mask_and_no_mask_reuse() -> None:
    x = torch.ones(8, 16)
    torch.manual_seed(3)
    a, b = dropout(x, 0.5), dropout(x, 0.5)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.5), a)
    assert not torch.equal(a, b)


def test_odd_sizes_views_and_bf16() -> None:
    """Element counts not divisible by four, non-contiguous inputs and bf16 all work and
    keep shape and dtype."""
    torch.manual_seed(4)
    x = torch.randn(7, 3, 5).transpose(0, 2)
    y = dropout(x, 0.3)
    assert y.shape == x.shape and ((y == 0) | torch.isclose(y, x / 0.7)).all()
    h = torch.randn(3, 5, dtype=torch.bfloat16)
    assert dropout(h, 0.3).dtype == torch.bfloat16


def test_p_one_drops_everything_and_bad_p_is_rejected() -> None:
    assert torch.equal(dropout(torch.ones(3, 3), 1.0), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)


def test_bf16_keeps_values_scaled_one_by_one() -> None:
    """In bf16 each kept value is its own product with the scale, rounded once, never a
    product with a bf16-rounded scale."""
    torch.manual_seed(5)
    x = torch.randn(4096, dtype=torch.bfloat16)
    y = dropout(x, 0.1)
    kept = y != 0
    kept_rate = 1 - round(0.1 * 65536) / 65536
    assert torch.equal(y[kept], (x[kept].float() / kept_rate).to(torch.bfloat16))
