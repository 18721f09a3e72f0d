import torch

from scratchformer.nn import causal_mask, combine_masks, padding_mask


def test_causal_mask_is_lower_triangular() -> None:
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(3), expected)


def test_causal_mask_with_fewer_queries_than_keys_aligns_to_the_end() -> None:
    expected = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(2, 4), expected)


def test_sliding_window_keeps_the_last_window_keys_of_each_query() -> None:
    expected = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(causal_mask(4, window=2), expected)
    assert torch.equal(causal_mask(2, 4, window=2), expected[2:])  # fewer queries: the end
    assert torch.equal(causal_mask(4, window=4), causal_mask(4))  # a window as long: causal


def test_padding_mask_marks_real_keys_and_broadcasts() -> None:
    mask = padding_mask(torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert mask.shape == (2, 1, 1, 3) and mask.dtype == torch.bool
    assert mask[1, 0, 0].tolist() == [True, False, False]


def test_combining_is_logical_and() -> None:
    combined = combine_masks(padding_mask(torch.tensor([[1, 1, 0]])), causal_mask(3))
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    assert combined.shape == (1, 1, 3, 3)
    assert torch.equal(combined[0, 0], expected)
    assert combine_masks(None, None) is None
    assert torch.equal(combine_masks(None, causal_mask(2)), causal_mask(2))
