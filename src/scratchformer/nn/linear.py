"""The linear map of the building blocks: ``torch.nn.Linear`` itself (the same parameters,
state dict and product). Decoding may multiply a few rows in the other orientation by
giving an instance a ``forward`` of its own while it runs
(``scratchformer.inference.kernels``); the class stays plain."""

from torch import nn

Linear = nn.Linear
