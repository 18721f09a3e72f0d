"""LoRALinear: equal to its base at the start, merged equal to adapted, per-part adapters
of a fused projection equal to separate adapters of its parts; with its adapters disabled,
its base."""

from __future__ import annotations

import pytest
import torch

from scratchformer.nn import Linear, LoRALinear, adapters_disabled


def adapted(parts: tuple[int, ...] | None = None, rank: int = 3) -> LoRALinear:
    torch.manual_seed(0)
    layer = LoRALinear(Linear(8, 12), rank=rank, alpha=6.0, parts=parts)
    with torch.no_grad():
        layer.lora_B.normal_(std=0.1)  # as after some training
    return layer


def test_at_initialisation_the_adapted_map_is_its_base() -> None:
    base = Linear(8, 12)
    x = torch.randn(2, 5, 8)
    expected = base(x)
    layer = LoRALinear(base, rank=4, alpha=8.0, dropout=0.1)
    assert layer.weight is base.weight and layer.bias is base.bias
    assert torch.equal(layer(x), expected)  # B starts at zero
    assert torch.equal(layer.train()(x), expected)  # its dropout only feeds the zero update


def test_only_the_adapter_trains() -> None:
    layer = adapted()
    trained = {name for name, p in layer.named_parameters() if p.requires_grad}
    assert trained == {"lora_A", "lora_B"}
    assert layer.lora_A.shape == (3, 8) and layer.lora_B.shape == (12, 3)


def test_the_update_is_b_a_times_alpha_over_rank() -> None:
    layer = adapted()
    x = torch.randn(4, 8)
    expected = x @ (layer.weight + layer.lora_B @ layer.lora_A * 2.0).T + layer.bias
    torch.testing.assert_close(layer(x), expected)


@pytest.mark.parametrize("parts", [None, (4, 4, 4), (8, 2, 2)])
def test_merged_computes_what_the_adapted_map_computes(parts) -> None:
    layer = adapted(parts)
    merged = layer.merged()
    assert type(merged) is Linear
    x = torch.randn(3, 7, 8)
    assert (merged(x) - layer(x)).abs().max() < 1e-5
    assert not merged.weight.equal(layer.weight)


def test_a_fused_projection_is_adapted_part_by_part() -> None:
    """One adapter per part: the update of part i is B_i A_i, zero across parts, so that
    it equals separate rank-r adapters of the query, key and value maps."""
    layer = adapted((8, 2, 2), rank=2)
    x = torch.randn(5, 8)
    out = layer(x)
    starts = [0, 8, 10, 12]
    for i, (a, b) in enumerate(layer.adapters()):
        rows = slice(starts[i], starts[i + 1])
        part = Linear(8, starts[i + 1] - starts[i])
        with torch.no_grad():
            part.weight.copy_(layer.weight[rows])
            part.bias.copy_(layer.bias[rows])
        alone = LoRALinear(part, rank=2, alpha=6.0)
        with torch.no_grad():
            alone.lora_A.copy_(a)
            alone.lora_B.copy_(b)
        torch.testing.assert_close(out[:, rows], alone(x))


@pytest.mark.parametrize(
    ("rank", "parts", "message"),
    [(0, None, "rank=0"), (2, (4, 4), "parts=\\(4, 4\\)"), (2, (12, 0), "parts")],
)
def test_bad_settings_are_errors(rank, parts, message) -> None:
    with pytest.raises(ValueError, match=message):
        LoRALinear(Linear(8, 12), rank=rank, alpha=1.0, parts=parts)


def test_with_adapters_disabled_a_model_computes_as_its_base_until_the_block_ends() -> None:
    base = torch.nn.Sequential(Linear(8, 12), torch.nn.ReLU(), Linear(12, 8))
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        LoRALinear(base[0], rank=2, alpha=4.0, dropout=0.5), base[1], LoRALinear(base[2], 2, 4.0)
    )
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.lora_B.normal_(std=0.1)  # as after some training
    x = torch.randn(3, 8)
    adapted = model.eval()(x)
    model.train()  # the adapter's dropout: not drawn while disabled
    with adapters_disabled(model) as inside:
        assert inside is model
        assert torch.equal(model(x), base(x))
        with adapters_disabled(model):  # nested: leaving it restores the outer block's state
            pass
        assert torch.equal(model(x), base(x))
    assert torch.equal(model.eval()(x), adapted)
    with pytest.raises(RuntimeError, match="inside"), adapters_disabled(model):
        raise RuntimeError("inside")
    assert torch.equal(model(x), adapted)


def test_disabling_the_adapters_of_a_model_without_any_is_an_error() -> None:
    with pytest.raises(ValueError, match="no LoRA adapters"), adapters_disabled(Linear(2, 2)):
        pass
