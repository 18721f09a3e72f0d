"""Drawings of the guide too long for its snippets: Figure 1 of the paper (the whole
encoder-decoder) and the pretraining curve, which ``python docs/build.py`` saves as
``docs/pictures/figure1.png`` and ``docs/pictures/pretraining-curve.png``, and the tree of a
beam search, which a snippet of the guide draws."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
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
SHAPE_INK = "#555555"
BOX_WIDTH, BOX_HEIGHT = 3.2, 0.95
"""Of a block, in the units of Figure 1's axes (12 wide)."""
STEP = 1.35
"""From the centre of a block to the centre of the next one up."""
ENCODER_X, DECODER_X = 3.2, 8.8
"""The centres of the two columns."""
FIRST = 4.0
"""The height of the first sub-layer of each stack."""
SOURCE = "(batch, src_len, d_model)"
TARGET = "(batch, tgt_len, d_model)"


def _box(axes: Axes, x: float, y: float, lines: tuple[str, str, str], kind: str) -> None:
    """A block of ``kind`` centred at ``(x, y)``: the paper's name of it, our module (in
    code type) and the shape of the tensor that flows out of it."""
    corner = (x - BOX_WIDTH / 2, y - BOX_HEIGHT / 2)
    style = "round,pad=0.02,rounding_size=0.12"
    axes.add_patch(FancyBboxPatch(corner, BOX_WIDTH, BOX_HEIGHT, style, fc=COLOURS[kind], ec=INK))
    name, module, shape = lines
    axes.text(x, y + 0.26, name, ha="center", va="center", fontsize=9.5)
    axes.text(x, y, module, ha="center", va="center", fontsize=8.5, family="monospace")
    axes.text(x, y - 0.26, shape, ha="center", va="center", fontsize=8, color=SHAPE_INK)


def _arrow(axes: Axes, *points: tuple[float, float]) -> None:
    """A line through ``points`` with an arrowhead at the last one."""
    if len(points) > 2:
        axes.plot(*zip(*points[:-1], strict=True), color=INK, lw=1.2)
    head = FancyArrowPatch(*points[-2:], arrowstyle="-|>", mutation_scale=10, color=INK, lw=1.2)
    axes.add_patch(head)


def _up(axes: Axes, x: float, bottom: float, top: float) -> None:
    """An arrow from the top of the block centred at ``bottom`` to the block at ``top``."""
    _arrow(axes, (x, bottom + BOX_HEIGHT / 2), (x, top - BOX_HEIGHT / 2))


def _sublayer(
    axes: Axes, x: float, y: float, lines: tuple[str, str, str], kind: str, side: int
) -> float:
    """A sub-layer at height ``y``, its Add & Norm above it and the residual connection
    around both on ``side`` (-1 left, 1 right); returns the height of the Add & Norm."""
    shape = lines[2]
    _box(axes, x, y, lines, kind)
    _box(axes, x, y + STEP, ("Add & Norm", "Residual, LayerNorm", shape), "norm")
    _up(axes, x, y, y + STEP)
    edge, below = x + side * (BOX_WIDTH / 2 + 0.35), y - BOX_HEIGHT / 2 - 0.2
    _arrow(axes, (x, below), (edge, below), (edge, y + STEP), (x + side * BOX_WIDTH / 2, y + STEP))
    return y + STEP


def _stack(axes: Axes, x: float, top: float, side: int, layer: str) -> float:
    """The grey frame of the ``N x`` repeated layers ``layer``, from below the first
    sub-layer to above the block at height ``top``, with "N×" on ``side``; returns the
    height of the frame's top."""
    bottom, ceiling = FIRST - BOX_HEIGHT / 2 - 0.4, top + BOX_HEIGHT / 2 + 0.55
    width = BOX_WIDTH + 1.2
    style = "round,pad=0,rounding_size=0.25"
    frame = FancyBboxPatch(
        (x - width / 2, bottom),
        width,
        ceiling - bottom,
        style,
        fc=COLOURS["stack"],
        ec="#555",
        zorder=0.5,  # under the blocks, drawn before it
    )
    axes.add_patch(frame)
    corner = (x - width / 2 + 0.2, ceiling - 0.25)  # clear of the arrow up the middle
    axes.text(*corner, layer, ha="left", va="center", fontsize=9, family="monospace")
    axes.text(x + side * (width / 2 + 0.35), (bottom + ceiling) / 2, "N×", ha="center", fontsize=12)
    return ceiling


def _inputs(axes: Axes, x: float, side: int, words: str, ids: str, shape: str) -> None:
    """The ids at the bottom of a column, their embedding, and the positions added."""
    axes.text(x, -0.05, f"{words}\n{ids} {shape}", ha="center", va="center", fontsize=9)
    name = "Input Embedding" if side < 0 else "Output Embedding"
    width = shape.replace("_len)", "_len, d_model)")
    _box(axes, x, 1.3, (name, "TokenEmbedding", width), "embedding")
    _arrow(axes, (x, 0.45), (x, 1.3 - BOX_HEIGHT / 2))
    plus = 2.65
    axes.add_patch(Circle((x, plus), 0.2, fc="white", ec=INK))
    axes.text(x, plus, "+", ha="center", va="center", fontsize=12)
    _arrow(axes, (x, 1.3 + BOX_HEIGHT / 2), (x, plus - 0.2))
    align = "right" if side < 0 else "left"
    axes.text(x + side * 0.35, plus + 0.2, "Positional Encoding", ha=align, va="center", fontsize=9)
    axes.text(
        x + side * 0.35,
        plus - 0.1,
        "SinusoidalPositionalEncoding",
        ha=align,
        va="center",
        fontsize=8,
        family="monospace",
    )
    _arrow(axes, (x, plus + 0.2), (x, FIRST - BOX_HEIGHT / 2))


def figure1() -> Figure:
    """The Transformer as Figure 1 of "Attention Is All You Need" draws it: the encoder's
    stack on the left, the decoder's on the right, the encoder's output feeding the keys and
    values of every decoder layer's cross-attention. Each block is labelled with our module
    and the shape of the tensor that flows out of it."""
    figure = Figure(figsize=(10, 12.5))
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, 12)
    axes.set_ylim(-0.6, 16.9)
    axes.axis("off")
    _inputs(axes, ENCODER_X, -1, "Inputs", "src_ids", "(batch, src_len)")
    _inputs(axes, DECODER_X, 1, "Outputs (shifted right)", "tgt_ids", "(batch, tgt_len)")
    attention = ("Multi-Head Attention", "MultiHeadAttention", SOURCE)
    y = _sublayer(axes, ENCODER_X, FIRST, attention, "attention", side=-1)
    _up(axes, ENCODER_X, y, y + STEP)
    feed_forward = ("Feed Forward", "FeedForward", SOURCE)
    encoded = _sublayer(axes, ENCODER_X, y + STEP, feed_forward, "feed_forward", side=-1)
    encoder_top = _stack(axes, ENCODER_X, encoded, side=-1, layer="EncoderLayer")
    masked = ("Masked Multi-Head Attention", "MultiHeadAttention", TARGET)
    y = _sublayer(axes, DECODER_X, FIRST, masked, "attention", side=1)
    cross_y = y + STEP
    _up(axes, DECODER_X, y, cross_y)
    q_y = cross_y - BOX_HEIGHT / 2 - 0.2
    axes.text(DECODER_X - 0.12, q_y, "Q", ha="right", va="center", fontsize=9)
    cross = ("Multi-Head Attention", "MultiHeadAttention(cross=True)", TARGET)
    y = _sublayer(axes, DECODER_X, cross_y, cross, "attention", side=1)
    _up(axes, DECODER_X, y, y + STEP)
    feed_forward = ("Feed Forward", "FeedForward", TARGET)
    decoded = _sublayer(axes, DECODER_X, y + STEP, feed_forward, "feed_forward", side=1)
    _stack(axes, DECODER_X, decoded, side=1, layer="DecoderLayer")
    middle, over = (ENCODER_X + DECODER_X) / 2, encoder_top + 0.4
    left = (DECODER_X - BOX_WIDTH / 2, cross_y)
    _arrow(
        axes,
        (ENCODER_X, encoded + BOX_HEIGHT / 2),
        (ENCODER_X, over),
        (middle, over),
        (middle, cross_y),
        left,
    )
    memory = f"the memory\n{SOURCE}"
    axes.text(ENCODER_X + 0.12, over + 0.1, memory, ha="left", va="bottom", fontsize=8.5)
    axes.text(middle + 0.1, cross_y + 0.12, "K, V", ha="left", va="bottom", fontsize=9)
    linear = decoded + 2 * STEP
    _arrow(axes, (DECODER_X, decoded + BOX_HEIGHT / 2), (DECODER_X, linear - BOX_HEIGHT / 2))
    _box(axes, DECODER_X, linear, ("Linear", "LMHead", "logits (batch, tgt_len, vocab)"), "linear")
    softmax = linear + STEP
    _up(axes, DECODER_X, linear, softmax)
    lines = ("Softmax", "in the loss, or in decoding", "(batch, tgt_len, vocab)")
    _box(axes, DECODER_X, softmax, lines, "softmax")
    _arrow(axes, (DECODER_X, softmax + BOX_HEIGHT / 2), (DECODER_X, softmax + 0.9))
    axes.text(DECODER_X, softmax + 1.2, "Output Probabilities", ha="center", fontsize=9.5)
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


# -- What pretraining buys ---------------------------------------------------------------

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as a module, imported as it imports its
    neighbours: with its folder on the path."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def pretraining_curve() -> Figure:
    """Each fine-tune's score against the minutes of pretraining it started from: the
    points that ``benchmarks/pretraining_curve.py`` measured."""
    return benchmark("pretraining_curve").figure()
