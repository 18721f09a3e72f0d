"""Drawings of the guide too long for its snippets: Figure 1 of the paper (the whole
encoder-decoder), which ``python docs/build.py`` saves as ``docs/pictures/figure1.png``, and
the tree of a beam search, which a snippet of the guide draws."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Patch
from torch import Tensor, nn

from scratchformer.inference import Hypothesis, beam_search

# -- Figure 1 ----------------------------------------------------------------------------

COLOURS = {
    "embedding": "#f8cecc",
    "attention": "#fcd9a8",
    "norm": "#f3f3b0",
    "feed_forward": "#c5e3f6",
    "linear": "#dcd3f0",
    "softmax": "#cde8c9",
    "stack": "#efefef",
}
INK = "#333333"
BOX_WIDTH, BOX_HEIGHT = 2.6, 0.55
"""Of a block, in the units of Figure 1's axes (10 wide)."""
ENCODER_X, DECODER_X = 3.0, 7.0
"""The centres of the two columns."""


def _box(axes: Axes, x: float, y: float, text: str, kind: str) -> None:
    """A block of ``kind`` centred at ``(x, y)``."""
    corner = (x - BOX_WIDTH / 2, y - BOX_HEIGHT / 2)
    style = "round,pad=0.02,rounding_size=0.12"
    axes.add_patch(FancyBboxPatch(corner, BOX_WIDTH, BOX_HEIGHT, style, fc=COLOURS[kind], ec=INK))
    axes.text(x, y, text, ha="center", va="center", fontsize=9)


def _arrow(axes: Axes, *points: tuple[float, float]) -> None:
    """A line through ``points`` with an arrowhead at the last one."""
    if len(points) > 2:
        axes.plot(*zip(*points[:-1], strict=True), color=INK, lw=1.2)
    head = FancyArrowPatch(*points[-2:], arrowstyle="-|>", mutation_scale=10, color=INK, lw=1.2)
    axes.add_patch(head)


def _sublayer(axes: Axes, x: float, y: float, text: str, kind: str, side: int) -> float:
    """A sub-layer at height ``y``, its Add & Norm above it and the residual connection
    around both on ``side`` (-1 left, 1 right); returns the top of the Add & Norm."""
    _box(axes, x, y, text, kind)
    _box(axes, x, y + 1, "Add & Norm", "norm")
    _arrow(axes, (x, y + BOX_HEIGHT / 2), (x, y + 1 - BOX_HEIGHT / 2))
    edge = x + side * (BOX_WIDTH / 2 + 0.35)
    _arrow(axes, (x, y - 0.6), (edge, y - 0.6), (edge, y + 1), (x + side * BOX_WIDTH / 2, y + 1))
    return y + 1 + BOX_HEIGHT / 2


def _stack(axes: Axes, x: float, top: float, side: int) -> None:
    """The grey frame of the ``N x`` repeated layers, from the bottom of the stacks to
    ``top``, with "N×" on ``side``."""
    style = "round,pad=0,rounding_size=0.25"
    frame = FancyBboxPatch((x - 1.9, 2.85), 3.8, top - 2.85, style, fc=COLOURS["stack"], ec="#555")
    axes.add_patch(frame)
    axes.text(x + side * 2.1, (top + 2.85) / 2, "N×", ha="center", va="center", fontsize=12)


def figure1() -> Figure:
    """The Transformer as Figure 1 of "Attention Is All You Need" draws it: the encoder's
    stack on the left, the decoder's on the right, the encoder's output feeding the keys and
    values of every decoder layer's cross-attention."""
    figure = Figure(figsize=(7, 8))
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, 10)
    axes.set_ylim(-0.4, 12.9)
    axes.axis("off")
    _stack(axes, ENCODER_X, 7.4, side=-1)
    _stack(axes, DECODER_X, 9.4, side=1)
    for x, side, name in ((ENCODER_X, -1, "Input"), (DECODER_X, 1, "Output")):
        below = "Inputs" if side < 0 else "Outputs\n(shifted right)"
        axes.text(x, 0.0, below, ha="center", va="center", fontsize=9)
        _box(axes, x, 1.0, f"{name} Embedding", "embedding")
        _arrow(axes, (x, 0.35), (x, 1.0 - BOX_HEIGHT / 2))
        axes.add_patch(Circle((x, 2.1), 0.18, fc="white", ec=INK))
        axes.text(x, 2.1, "+", ha="center", va="center", fontsize=12)
        _arrow(axes, (x, 1.0 + BOX_HEIGHT / 2), (x, 2.1 - 0.18))
        align = "right" if side < 0 else "left"
        axes.text(x + side * 0.35, 2.1, "Positional\nEncoding", ha=align, va="center", fontsize=8)
        _arrow(axes, (x, 2.1 + 0.18), (x, 3.5 - BOX_HEIGHT / 2))
    top = _sublayer(axes, ENCODER_X, 3.5, "Multi-Head\nAttention", "attention", side=-1)
    _arrow(axes, (ENCODER_X, top), (ENCODER_X, 5.5 - BOX_HEIGHT / 2))
    encoded = _sublayer(axes, ENCODER_X, 5.5, "Feed Forward", "feed_forward", side=-1)
    top = _sublayer(axes, DECODER_X, 3.5, "Masked Multi-Head\nAttention", "attention", side=1)
    _arrow(axes, (DECODER_X, top), (DECODER_X, 5.5 - BOX_HEIGHT / 2))
    axes.text(DECODER_X + 0.1, 5.05, "Q", ha="left", va="center", fontsize=8)
    top = _sublayer(axes, DECODER_X, 5.5, "Multi-Head\nAttention", "attention", side=1)
    cross = (DECODER_X - BOX_WIDTH / 2, 5.5)
    _arrow(axes, (ENCODER_X, encoded), (ENCODER_X, 7.9), (5.0, 7.9), (5.0, 5.5), cross)
    axes.text(5.1, 5.62, "K, V", ha="left", va="bottom", fontsize=8)
    _arrow(axes, (DECODER_X, top), (DECODER_X, 7.5 - BOX_HEIGHT / 2))
    top = _sublayer(axes, DECODER_X, 7.5, "Feed Forward", "feed_forward", side=1)
    _arrow(axes, (DECODER_X, top), (DECODER_X, 10.4 - BOX_HEIGHT / 2))
    _box(axes, DECODER_X, 10.4, "Linear", "linear")
    _arrow(axes, (DECODER_X, 10.4 + BOX_HEIGHT / 2), (DECODER_X, 11.4 - BOX_HEIGHT / 2))
    _box(axes, DECODER_X, 11.4, "Softmax", "softmax")
    _arrow(axes, (DECODER_X, 11.4 + BOX_HEIGHT / 2), (DECODER_X, 12.2))
    axes.text(DECODER_X, 12.5, "Output\nProbabilities", ha="center", va="center", fontsize=9)
    return figure


# -- a beam search's tree ----------------------------------------------------------------

KEPT, FINISHED, DROPPED = "#dbe9f6", "#d9f2d9", "white"
"""Fill colours of the tree's nodes."""
KEPT_EDGE, FINISHED_EDGE, DROPPED_EDGE = "#2b6cb0", "#2f855a", "#c8c8c8"
Step = tuple[list[tuple[int, ...]], list[list[float]]]
"""What a step of the search fed the decoder, a prefix a row, and the log-probabilities of
the next token that it got back."""


def recorded_search(
    model: nn.Module, source: Tensor, *, bos_id: int, eos_id: int, beam_size: int, max_len: int
) -> tuple[list[Step], list[Hypothesis]]:
    """``beam_search`` of the one sentence of ``source`` ``(1, src_len)``, without the cache
    so that each step feeds the decoder every beam's whole prefix; returns what each step
    fed and got back, and the ``beam_size`` hypotheses found, best first."""
    steps: list[Step] = []
    decode = model.decode

    def recording_decode(tokens: Tensor, *args: Any, **kwargs: Any) -> Any:
        out = decode(tokens, *args, **kwargs)
        log_probs = out[0][:, -1].log_softmax(dim=-1).tolist()
        steps.append(([tuple(prefix) for prefix in tokens.tolist()], log_probs))
        return out

    model.decode = recording_decode
    try:
        found = beam_search(
            model,
            source,
            bos_id=bos_id,
            eos_id=eos_id,
            beam_size=beam_size,
            max_len=max_len,
            n_best=beam_size,
            use_cache=False,
        )
    finally:
        del model.decode
    return steps, found[0]


def beam_tree(
    model: nn.Module,
    source: Tensor,
    words: Sequence[str],
    *,
    bos_id: int,
    eos_id: int,
    beam_size: int,
    max_len: int,
) -> tuple[Figure, list[Hypothesis]]:
    """Beam search of one sentence ``source`` ``(1, src_len)`` and the tree it explored:
    at every step the ``2 * beam_size`` best extensions of the beams, each with its summed
    log-probability; the beams kept (the prefixes fed to the decoder at the next step), the
    hypotheses returned (with their scores) and the best one's path. Returns the figure and
    the hypotheses, best first."""
    steps, found = recorded_search(
        model, source, bos_id=bos_id, eos_id=eos_id, beam_size=beam_size, max_len=max_len
    )
    ends = {  # the node where each hypothesis ends: its eos, unless it reached max_len
        (bos_id, *h.tokens, eos_id) if len(h.tokens) < max_len else (bos_id, *h.tokens): h
        for h in found
    }
    best = next(iter(ends))
    figure = Figure(figsize=(8, 4.4), layout="constrained")
    axes = figure.add_subplot()
    root = (bos_id,)
    log_prob, place = {root: 0.0}, {root: (0, beam_size - 0.5)}
    axes.text(*place[root], words[bos_id], ha="center", va="center", bbox=_node(KEPT, KEPT_EDGE))
    live = {root}
    for step, (prefixes, rows) in enumerate(steps, 1):
        candidates = {
            (*prefix, token): log_prob[prefix] + value
            for prefix, row in zip(prefixes, rows, strict=True)
            if prefix in live  # not a dead beam, which fills a row when fewer are alive
            for token, value in enumerate(row)
        }
        ranked = sorted(candidates, key=candidates.__getitem__, reverse=True)[: 2 * beam_size]
        fed_next = set(steps[step][0]) if step < len(steps) else set()
        live = {node for node in ranked if node in fed_next}
        for rank, node in enumerate(ranked):
            log_prob[node], place[node] = candidates[node], (step, rank)
            label = f"{words[node[-1]]}  {candidates[node]:.2f}"
            colour, fill, edge = "black", KEPT, KEPT_EDGE
            if node in ends:
                label += f"\nscore {ends[node].score:.2f}"
                fill, edge = FINISHED, FINISHED_EDGE
            elif node not in live:
                colour, fill, edge = "#777777", DROPPED, DROPPED_EDGE
            on_best = best[: len(node)] == node
            (x0, y0), (x1, y1) = place[node[:-1]], place[node]
            line = {"color": FINISHED_EDGE, "lw": 2.5} if on_best else {"color": edge, "lw": 0.8}
            axes.plot([x0, x1], [y0, y1], zorder=0, **line)
            box = _node(fill, edge, 2.0 if node == best else 1.0)
            axes.text(x1, y1, label, ha="center", va="center", fontsize=8, color=colour, bbox=box)
    for end, hypothesis in ends.items():
        assert abs(log_prob[end] - hypothesis.log_prob) < 1e-4, "the tree is not the search's"
    _tree_axes(axes, len(steps), beam_size)
    return figure, found


def _node(fill: str, edge: str, width: float = 1.0) -> dict[str, Any]:
    """The box of a node of the tree."""
    return {"boxstyle": "round", "fc": fill, "ec": edge, "lw": width}


def _tree_axes(axes: Axes, steps: int, beam_size: int) -> None:
    """Steps across, the ranks of each step's extensions down, and the legend."""
    axes.set_xlim(-0.5, steps + 0.5)
    axes.set_ylim(2 * beam_size - 0.5, -0.5)
    axes.set_xticks(range(steps + 1))
    axes.set_xlabel("step")
    axes.set_yticks([])
    for side in ("left", "right", "top"):
        axes.spines[side].set_visible(False)
    legend = [
        Patch(fc=KEPT, ec=KEPT_EDGE, label="kept beam"),
        Patch(fc=FINISHED, ec=FINISHED_EDGE, label="returned: score = log-prob / lp(length)"),
        Line2D([], [], color=FINISHED_EDGE, lw=2.5, label="the best"),
        Line2D([], [], color=DROPPED_EDGE, label="dropped"),
    ]
    axes.legend(handles=legend, loc="lower left", bbox_to_anchor=(0, 1), ncols=4, frameon=False)
