from torch import nn

from scratchformer.nn import Linear


def test_state_dict_is_torch_linears() -> None:
    """Checkpoints and Hugging Face weights load as into ``torch.nn.Linear``."""
    ours, theirs = Linear(4, 3), nn.Linear(4, 3)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert isinstance(ours, nn.Linear)
