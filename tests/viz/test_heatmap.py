import matplotlib.image
import pytest
import torch

from scratchformer.viz import attention_heatmap


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
