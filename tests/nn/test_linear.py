from torch import nn

from scratchformer.nn import Linear


def test_linear_is_torch_s_own_class() -> None:
    """Not a subclass: checkpoints and Hugging Face weights load as into ``torch.nn.Linear``,
    and decoding's kernels and quantization find the building blocks' linear maps by that
    class (``inference.kernels.linear_kernels`` asks for the exact type)."""
    assert Linear is nn.Linear
