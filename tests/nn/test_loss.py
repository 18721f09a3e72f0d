import pytest
import torch
import torch.nn.functional as F

from scratchformer.nn import linear_cross_entropy
from scratchformer.nn.loss import IGNORE_INDEX


def reference(hidden, weight, targets, label_smoothing=0.0, bias=None) -> torch.Tensor:
    logits = F.linear(hidden, weight, bias).flatten(0, -2)
    return F.cross_entropy(
        logits, targets.flatten(), ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing
    )


def leaves(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_() for t in tensors]


@pytest.mark.parametrize("shape", [(5,), (3, 100)])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("ignored", [False, True])
def test_matches_cross_entropy_of_the_logits(shape, label_smoothing, ignored) -> None:
    """Loss and both gradients equal ``F.cross_entropy(F.linear(...))``'s, over blocks of
    64 rows (300 rows: four full blocks and a partial one)."""
    torch.manual_seed(0)
    hidden, weight = torch.randn(*shape, 24), torch.randn(50, 24) * 0.3
    targets = torch.randint(0, 50, shape)
    if ignored:
        targets[..., ::3] = IGNORE_INDEX
    ours_h, ours_w = leaves(hidden, weight)
    ref_h, ref_w = leaves(hidden, weight)
    loss = linear_cross_entropy(ours_h, ours_w, targets, label_smoothing, chunk_rows=64)
    expected = reference(ref_h, ref_w, targets, label_smoothing)
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=1e-6)
    (2.5 * loss).backward()  # the upstream gradient scales both
    (2.5 * expected).backward()
    torch.testing.assert_close(ours_h.grad, ref_h.grad, atol=1e-7, rtol=1e-5)
    torch.testing.assert_close(ours_w.grad, ref_w.grad, atol=1e-7, rtol=1e-5)
    if ignored:
        assert torch.all(ours_h.grad[targets == IGNORE_INDEX] == 0)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_a_bias_matches_cross_entropy_of_the_biased_logits(label_smoothing) -> None:
    """With a bias (BERT's masked-LM decoder): loss and all three gradients as unfused."""
    torch.manual_seed(0)
    hidden, weight, bias = torch.randn(70, 24), torch.randn(50, 24) * 0.3, torch.randn(50)
    targets = torch.randint(0, 50, (70,))
    targets[::4] = IGNORE_INDEX
    ours, ref = leaves(hidden, weight, bias), leaves(hidden, weight, bias)
    loss = linear_cross_entropy(
        ours[0], ours[1], targets, label_smoothing, chunk_rows=32, bias=ours[2]
    )
    expected = reference(ref[0], ref[1], targets, label_smoothing, bias=ref[2])
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=1e-6)
    (2.5 * loss).backward()
    (2.5 * expected).backward()
    for mine, theirs in zip(ours, ref, strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-7, rtol=1e-5)


def test_gradcheck_in_double_precision() -> None:
    hidden = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 5, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(11, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0, 3, IGNORE_INDEX, 10, 2, 2, 7])
    torch.autograd.gradcheck(
        lambda h, w, b: linear_cross_entropy(h, w, targets, 0.2, chunk_rows=3, bias=b),
        (hidden, weight, bias),
    )


@pytest.mark.parametrize("grad_of", ["hidden", "weight"])
def test_gradient_of_one_input_only(grad_of: str) -> None:
    hidden, weight = torch.randn(9, 8), torch.randn(13, 8)
    targets = torch.randint(0, 13, (9,))
    ours, ref = leaves(hidden, weight), leaves(hidden, weight)
    index = 0 if grad_of == "hidden" else 1
    for inputs in (ours, ref):
        inputs[1 - index].requires_grad_(False)
    linear_cross_entropy(*ours, targets, chunk_rows=4).backward()
    reference(*ref, targets).backward()
    torch.testing.assert_close(ours[index].grad, ref[index].grad, atol=1e-7, rtol=1e-5)
    assert ours[1 - index].grad is None


def test_without_gradients_gives_the_loss() -> None:
    hidden, weight = torch.randn(2, 6, 8), torch.randn(13, 8)
    targets = torch.randint(0, 13, (2, 6))
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, targets, 0.1)
    torch.testing.assert_close(loss, reference(hidden, weight, targets, 0.1))


def test_under_autocast_it_is_the_two_steps() -> None:
    """bf16 autocast: the logits in bf16, the cross-entropy in fp32, as unfused."""
    hidden, weight = torch.randn(10, 8), torch.randn(13, 8)
    targets = torch.randint(0, 13, (10,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = linear_cross_entropy(hidden, weight, targets)
        expected = F.cross_entropy(F.linear(hidden, weight).float(), targets)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, expected, atol=0, rtol=0)


def test_no_counted_target_gives_nan_as_torch_does() -> None:
    hidden, weight = torch.randn(3, 8), torch.randn(13, 8)
    targets = torch.full((3,), IGNORE_INDEX)
    assert reference(hidden, weight, targets).isnan()
    assert linear_cross_entropy(hidden, weight, targets).isnan()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(label_smoothing=1.5), "label_smoothing=1.5"),
        (dict(chunk_rows=0), "chunk_rows=0"),
        (dict(targets=torch.zeros(4, dtype=torch.long)), "4 targets for 3 hidden states"),
    ],
)
def test_bad_arguments_are_named(kwargs, message) -> None:
    args = dict(hidden=torch.randn(3, 8), weight=torch.randn(13, 8), targets=torch.zeros(3).long())
    with pytest.raises(ValueError, match=message):
        linear_cross_entropy(**{**args, **kwargs})


def test_runs_under_torch_compile_with_symbolic_sizes() -> None:
    compiled = torch.compile(linear_cross_entropy, dynamic=True, backend="eager")
    weight = torch.randn(13, 8, requires_grad=True)
    for rows in (6, 9):
        hidden, targets = torch.randn(rows, 8), torch.randint(0, 13, (rows,))
        torch.testing.assert_close(
            compiled(hidden, weight, targets, 0.1, chunk_rows=4),
            reference(hidden, weight, targets, 0.1),
        )
