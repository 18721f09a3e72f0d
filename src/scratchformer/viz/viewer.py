"""The interactive attention viewer: one self-contained HTML page that draws attention as
lines between tokens (like bertviz's head view) or as a heatmap.

The page works offline and can be mailed or opened from disk: its script, its style and the
weights are all inlined, and a Content-Security-Policy forbids every network request.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources

import torch
from torch import Tensor

from .maps import AttentionMaps

MIN_LINE_WEIGHT = 0.01
"""The lines view skips weights below this: such lines are invisible anyway, and drawing
them all would make long inputs slow. The page reads it from its data."""

DECIMALS = 4
"""Weights are written with this many decimals: enough to read, small enough to embed."""


def attention_page(maps: AttentionMaps, title: str = "") -> str:
    """One HTML document showing ``maps``: pick the kind of attention, the layer and the
    head (or all heads), then hover a token to see what it attends to. Write it to a file
    and open it in a browser."""
    if not maps.kinds:
        raise ValueError("there is no attention to show: the maps hold no weights")
    for kind in maps.kinds:
        if 0 in maps.weights[kind].shape[:2]:
            raise ValueError(
                f"{kind} weights of shape {tuple(maps.weights[kind].shape)} have no head"
            )
    data = {
        "minLineWeight": MIN_LINE_WEIGHT,
        "kinds": maps.kinds,
        "attention": {
            kind: {
                "queries": [str(token) for token in maps.queries[kind]],
                "keys": [str(token) for token in maps.keys[kind]],
                "weights": _rounded(maps.weights[kind]),
            }
            for kind in maps.kinds
        },
    }
    parts = {
        "title": html.escape(title or "Attention"),
        "style": _asset("viewer.css"),
        "script": _asset("viewer.js"),
        "data": _script_json(data),
    }
    # One pass over the template only: text put in is never searched for placeholders.
    return re.sub(r"\{\{(\w+)\}\}", lambda match: parts[match[1]], _asset("viewer.html"))


def _rounded(weights: Tensor) -> list:
    """Nested lists ``[layer][head][query][key]`` of weights with :data:`DECIMALS` decimals
    (rounded in double precision so that they print short, e.g. ``0.1234``)."""
    weights = torch.nan_to_num(weights.detach().cpu().double(), nan=0.0)
    return torch.round(weights, decimals=DECIMALS).tolist()


def _script_json(data: dict) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element: ``<``, ``>`` and ``&``
    are written as ``\\u003c`` etc., so a token like ``</script>`` or ``<!--`` cannot end or
    change the element, and ``JSON.parse`` still reads the same strings."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _asset(name: str) -> str:
    """The text of one of the page's files shipped next to this module."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
