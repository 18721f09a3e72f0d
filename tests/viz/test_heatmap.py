import matplotlib.image
import pytest
import torch

from scratchformer.viz import AttentionMaps, attention_grid, attention_heatmap


def test_heatmap_png_shows_the_weights(tmp_path) -> None:
    weights = torch.softmax(torch.randn(4, 6), dim=-1)
    figure = attention_heatmap(weights, list("abcd"), list("uvwxyz"), title="t")
    path = tmp_path / "attn.png"
    figure.savefig(path, dpi=50)
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 150
    assert pixels[..., :3].std() > 0.05, "not a blank picture"
    shown = figure.axes[0].images[0].get_array()
    torch.testing.assert_close(torch.as_tensor(shown), weights)


def test_labels_must_fit_the_weights() -> None:
    with pytest.raises(ValueError, match=r"shape \(2, 3\) do not fit 3 query and 3 key labels"):
        attention_heatmap(torch.rand(2, 3), list("abc"), list("xyz"))


def random_maps(layers: int = 2, heads: int = 3, queries: int = 4, keys: int = 5):
    weights = torch.softmax(torch.randn(layers, heads, queries, keys), dim=-1)
    return AttentionMaps(
        {"cross": weights},
        queries={"cross": [f"q{i}" for i in range(queries)]},
        keys={"cross": [f"k{i}" for i in range(keys)]},
    )


def test_grid_has_a_panel_per_layer_and_head_showing_its_weights(tmp_path) -> None:
    maps = random_maps()
    figure = attention_grid(maps, "cross")
    panels = [axes for axes in figure.axes if axes.images]
    assert len(panels) == 6
    for index, axes in enumerate(panels):
        layer, head = divmod(index, 3)
        shown = torch.as_tensor(axes.images[0].get_array())
        torch.testing.assert_close(shown, maps.weights["cross"][layer, head])
    assert panels[0].get_title() == "head 0" and panels[3].get_ylabel() == "layer 1"
    assert [t.get_text() for t in panels[3].get_yticklabels()] == ["q0", "q1", "q2", "q3"]
    assert [t.get_text() for t in panels[5].get_xticklabels()] == [f"k{i}" for i in range(5)]
    outer = [
        (a.xaxis.get_tick_params()["labelbottom"], a.yaxis.get_tick_params()["labelleft"])
        for a in panels
    ]
    assert outer == [
        (False, True),
        (False, False),
        (False, False),
        (True, True),
        (True, False),
        (True, False),
    ]
    path = tmp_path / "grid.png"
    figure.savefig(path, dpi=60)
    pixels = matplotlib.image.imread(path)
    assert pixels[..., :3].std() > 0.05


def test_grid_narrows_to_a_layer_a_head_or_one_picture() -> None:
    maps = random_maps()
    assert len([a for a in attention_grid(maps, "cross", layer=1).axes if a.images]) == 3
    assert len([a for a in attention_grid(maps, "cross", head=2).axes if a.images]) == 2
    single = attention_grid(maps, "cross", layer=1, head=2)
    (axes,) = [a for a in single.axes if a.images]
    torch.testing.assert_close(
        torch.as_tensor(axes.images[0].get_array()), maps.weights["cross"][1, 2]
    )
    assert axes.get_title().endswith("layer 1, head 2")
    with pytest.raises(ValueError, match="head=3 is out of range: the model has 3 heads"):
        attention_grid(maps, "cross", head=3)
    with pytest.raises(ValueError, match="no encoder attention; it has cross"):
        attention_grid(maps, "encoder")


def test_long_inputs_get_thinned_labels_and_a_warning() -> None:
    maps = random_maps(1, 2, 120, 120)
    with pytest.warns(
        UserWarning, match="120 tokens are too many to label: the picture labels one in 3"
    ):
        figure = attention_grid(maps, "cross")
    labels = figure.axes[0].get_yticklabels()
    assert [t.get_text() for t in labels[:3]] == ["q0", "q3", "q6"] and len(labels) == 40


def test_maps_check_their_shapes() -> None:
    with pytest.raises(ValueError, match=r"do not fit 3 query and 5 key tokens"):
        AttentionMaps({"cross": torch.rand(1, 1, 4, 5)}, {"cross": ["a"] * 3}, {"cross": ["b"] * 5})
    with pytest.raises(ValueError, match="attention kind 'self' must be one of"):
        AttentionMaps({"self": torch.rand(1, 1, 1, 1)}, {"self": ["a"]}, {"self": ["a"]})
