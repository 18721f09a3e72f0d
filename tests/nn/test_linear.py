import importlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from scratchformer.nn import Linear, linear
from scratchformer.nn.linear import FEW_ROWS, TRANSPOSED_ROWS, transposed_rows

linear_module = importlib.import_module("scratchformer.nn.linear")  # ``nn.linear``: the function

BOTH_ROUTES = range(2, 33)
"""A row range under which the shapes below take both routes, whatever the CPU at hand."""


@pytest.mark.parametrize("shape", [(1, 48), (2, 48), (8, 1, 48), (4, 8, 48), (33, 48), (3, 40, 48)])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_torch_linear_values_and_gradients(
    shape: tuple[int, ...], bias: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(linear_module, "FEW_ROWS", BOTH_ROUTES)
    theirs = nn.Linear(48, 80, bias=bias)
    ours = Linear(48, 80, bias=bias)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(shape, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    out, expected = ours(x), theirs(x_ref)
    assert out.shape == expected.shape and out.is_contiguous()
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    grad = torch.randn(expected.shape)
    out.backward(grad)
    expected.backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    for mine, reference in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, reference.grad, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("few", [BOTH_ROUTES, range(2, 13), range(0)])
def test_few_rows_take_the_transposed_product(few: range, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows in ``FEW_ROWS`` go through ``weight @ x.T`` (addmm with the weight first),
    the others through ``torch.nn.functional.linear``; an empty range sends all there."""
    calls: list[str] = []
    addmm, functional_linear = torch.addmm, F.linear

    def spy_addmm(*args: torch.Tensor) -> torch.Tensor:
        calls.append("addmm")
        return addmm(*args)

    def spy_linear(*args: torch.Tensor | None) -> torch.Tensor:
        calls.append("linear")
        return functional_linear(*args)

    monkeypatch.setattr(linear_module, "FEW_ROWS", few)
    monkeypatch.setattr(torch, "addmm", spy_addmm)
    monkeypatch.setattr(F, "linear", spy_linear)
    weight, bias = torch.randn(16, 8), torch.randn(16)
    for rows in (1, 2, 8, 12, 13, 32, 33):
        calls.clear()
        linear(torch.randn(rows, 8), weight, bias)
        assert calls == ["addmm" if rows in few else "linear"], rows


def test_the_rows_are_looked_up_by_instruction_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each measured instruction set has its range; one not measured has none (plain
    ``F.linear``); ``FEW_ROWS`` is the range of the CPU at hand."""
    capability = torch.backends.cpu.get_cpu_capability()
    assert TRANSPOSED_ROWS.get(capability, range(0)) == FEW_ROWS, capability
    for capability, rows in [*TRANSPOSED_ROWS.items(), ("SVE256", range(0)), ("DEFAULT", range(0))]:
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        assert transposed_rows() == rows, capability


def test_state_dict_is_torch_linears() -> None:
    """Checkpoints and Hugging Face weights load as into ``torch.nn.Linear``."""
    ours, theirs = Linear(4, 3), nn.Linear(4, 3)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert isinstance(ours, nn.Linear)


def test_traces_with_symbolic_sizes() -> None:
    """``torch.compile`` with dynamic shapes traces the row count as a symbol; the choice
    of route must still trace (dynamo only: the backend does not matter here)."""
    compiled = torch.compile(linear, dynamic=True, backend="eager", fullgraph=True)
    weight, bias = torch.randn(80, 48), torch.randn(80)
    for rows in (4, 40):
        x = torch.randn(rows, 48)
        torch.testing.assert_close(compiled(x, weight, bias), F.linear(x, weight, bias))
