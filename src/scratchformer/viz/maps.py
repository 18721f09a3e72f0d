"""The attention weights of one example, with the tokens they connect: what the pictures
and the viewer draw."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..config import ATTENTION_KINDS as KINDS


@dataclass
class AttentionMaps:
    """Per kind of attention, the weights ``(layers, heads, queries, keys)`` (every row sums
    to one) and the token strings of the queries and of the keys."""

    weights: dict[str, Tensor]
    queries: dict[str, list[str]]
    keys: dict[str, list[str]]

    def __post_init__(self) -> None:
        for kind, weights in self.weights.items():
            if kind not in KINDS:
                raise ValueError(f"attention kind {kind!r} must be one of {', '.join(KINDS)}")
            if weights.dim() != 4:
                raise ValueError(
                    f"{kind} weights must be (layers, heads, queries, keys), "
                    f"not of shape {tuple(weights.shape)}"
                )
            shape = (len(self.queries[kind]), len(self.keys[kind]))
            if tuple(weights.shape[2:]) != shape:
                raise ValueError(
                    f"{kind} weights of shape {tuple(weights.shape)} do not fit "
                    f"{shape[0]} query and {shape[1]} key tokens"
                )

    @property
    def kinds(self) -> list[str]:
        """The kinds present, in the order of :data:`KINDS`."""
        return [kind for kind in KINDS if kind in self.weights]

    def select(self, kind: str, layer: int, head: int) -> Tensor:
        """The ``(queries, keys)`` weights of one head of one layer (0-based)."""
        if kind not in self.weights:
            raise ValueError(f"this model has no {kind} attention; it has {', '.join(self.kinds)}")
        layers, heads = self.weights[kind].shape[:2]
        if not 0 <= layer < layers:
            raise ValueError(f"layer={layer} is out of range: the model has {layers} layers")
        if not 0 <= head < heads:
            raise ValueError(f"head={head} is out of range: the model has {heads} heads")
        return self.weights[kind][layer, head]
