"""The HTML attention viewer: a self-contained page, checked as text and in a real browser
(Debian's Chromium driven by Playwright; skipped when either is missing, unless
SCRATCHFORMER_REQUIRE_BROWSER=1)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from scratchformer.viz.maps import AttentionMaps
from scratchformer.viz.viewer import MIN_LINE_WEIGHT, attention_page

TRICKY = ["</script><b>x</b>", "<!--", "a & b", '"q"', " "]


def random_maps(layers: int = 2, heads: int = 3, source: int = 7, target: int = 5) -> AttentionMaps:
    """Encoder, causal decoder and cross attention of random softmaxed scores, some of
    them under the lines' threshold."""
    generator = torch.Generator().manual_seed(1)

    def softmax(queries: int, keys: int, causal: bool = False) -> torch.Tensor:
        scores = 2.5 * torch.randn(layers, heads, queries, keys, generator=generator)
        if causal:
            future = torch.ones(queries, keys, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        return scores.softmax(dim=-1)

    source_tokens = [*TRICKY, *(f"s{i}" for i in range(len(TRICKY), source))][:source]
    target_tokens = [f"t{i}" for i in range(target)]
    maps = AttentionMaps(
        weights={
            "encoder": softmax(source, source),
            "decoder": softmax(target, target, causal=True),
            "cross": softmax(target, source),
        },
        queries={"encoder": source_tokens, "decoder": target_tokens, "cross": target_tokens},
        keys={"encoder": source_tokens, "decoder": target_tokens, "cross": source_tokens},
    )
    for weights in maps.weights.values():
        assert ((weights > 0) & (weights < MIN_LINE_WEIGHT)).any(), "some lines must be skipped"
    return maps


class _Page(HTMLParser):
    """What a browser's tokenizer sees: script contents by id, script tags, URL attributes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.script_text: dict[str | None, str] = {}
        self.urls: list[str] = []
        self._script: str | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value or "" for name, value in attrs if name in ("src", "href")]
        if tag == "script":
            self.scripts.append(dict(attrs))
            self._script = dict(attrs).get("id") or f"script {len(self.scripts)}"
            self.script_text[self._script] = ""

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self.script_text[self._script] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script = None


def embedded_data(page: str) -> dict:
    return json.loads(_Page(page).script_text["attention-data"])


def test_page_needs_no_network() -> None:
    page = attention_page(random_maps(), title="t")
    parsed = _Page(page)
    assert all(not re.match(r"\s*(https?:)?//", url) for url in parsed.urls), parsed.urls
    assert "<link" not in page.lower()
    assert all("src" not in attrs for attrs in parsed.scripts)
    assert not re.search(r"@import|url\(|https?://", page)
    assert "default-src 'none'" in page, "the page forbids itself any request"


def test_embedded_weights_and_tokens_round_trip() -> None:
    maps = random_maps()
    data = embedded_data(attention_page(maps))
    assert data["kinds"] == maps.kinds == ["encoder", "decoder", "cross"]
    assert data["minLineWeight"] == MIN_LINE_WEIGHT
    for kind in maps.kinds:
        shown = data["attention"][kind]
        assert shown["queries"] == maps.queries[kind]
        assert shown["keys"] == maps.keys[kind]
        torch.testing.assert_close(
            torch.tensor(shown["weights"]), maps.weights[kind], atol=1e-4, rtol=0
        )


def test_tokens_cannot_break_out_of_the_data() -> None:
    maps = random_maps()
    page = attention_page(maps, title="</script><script>alert(1)</script> & <b>")
    assert page.count("<script") == page.count("</script>") == 2, "only the page's own scripts"
    assert "<!--" not in page
    assert "</script><b>" not in page
    assert (
        "<title>&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;</title>"
        in page
    )
    assert embedded_data(page)["attention"]["encoder"]["queries"][: len(TRICKY)] == TRICKY


def test_maps_without_heads_are_refused() -> None:
    with pytest.raises(ValueError, match="no attention to show"):
        attention_page(AttentionMaps(weights={}, queries={}, keys={}))
    no_layers = AttentionMaps(
        {"encoder": torch.zeros(0, 2, 1, 1)}, {"encoder": ["a"]}, {"encoder": ["a"]}
    )
    with pytest.raises(ValueError, match=r"shape \(0, 2, 1, 1\) have no head"):
        attention_page(no_layers)


# --- in a real browser ------------------------------------------------------------------


@pytest.fixture(scope="module")
def maps() -> AttentionMaps:
    return random_maps()


@pytest.fixture(scope="module")
def page_file(maps, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("viewer") / "attention.html"
    path.write_text(attention_page(maps, title="Random <attention>"), encoding="utf-8")
    return path


@pytest.fixture
def page(browser, page_file):
    """The viewer open in a fresh tab; ``page.errors`` collects console and page errors,
    and must be empty when the test ends."""
    tab = browser.new_page(viewport={"width": 1100, "height": 800})
    errors: list[str] = []
    tab.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.goto(page_file.as_uri())
    tab.errors = errors
    yield tab
    tab.close()
    assert errors == [], "console or page errors"


def expected_lines(maps: AttentionMaps, kind: str, layer: int, heads: list[int]) -> dict:
    """``{(head, query, key): weight}`` of the lines that should be drawn: those whose
    weight, rounded as in the page, reaches the threshold."""
    lines = {}
    for head in heads:
        for (query, key), weight in _rounded(maps.select(kind, layer, head)).items():
            if weight >= MIN_LINE_WEIGHT:
                lines[head, query, key] = weight
    return lines


def _rounded(weights: torch.Tensor) -> dict:
    """``{(query, key): weight}`` with the page's 4 decimals."""
    rows = weights.tolist()
    return {(q, k): round(w, 4) for q, row in enumerate(rows) for k, w in enumerate(row)}


def shown_lines(page) -> dict:
    """``{(head, query, key): (weight, visible)}`` of the line elements in the DOM."""
    rows = page.eval_on_selector_all(
        "#lines line",
        "lines => lines.map(l => [l.dataset.head, l.dataset.query, l.dataset.key,"
        " l.dataset.weight, getComputedStyle(l).display !== 'none'])",
    )
    return {(int(h), int(q), int(k)): (float(w), visible) for h, q, k, w, visible in rows}


def assert_weights(shown: dict, expected: dict) -> None:
    assert shown.keys() == expected.keys()
    for where, weight in expected.items():
        assert shown[where] == pytest.approx(weight, abs=1e-4), where


def highlighted(page, side: str) -> dict[int, float]:
    rows = page.eval_on_selector_all(
        f'.token.highlighted[data-side="{side}"]',
        "tokens => tokens.map(t => [t.dataset.index, t.dataset.strength])",
    )
    return {int(index): float(strength) for index, strength in rows}


def test_page_loads_with_controls_and_tokens(page, maps) -> None:
    state = page.evaluate("window.attentionViewer.state()")
    assert state == {"kind": "encoder", "layer": 0, "head": "all", "view": "lines"}
    kinds = page.eval_on_selector_all("#kind option", "os => os.map(o => [o.value, o.text])")
    assert kinds == [
        ["encoder", "encoder self-attention"],
        ["decoder", "decoder self-attention"],
        ["cross", "cross-attention"],
    ]
    heads = page.eval_on_selector_all("#head option", "os => os.map(o => o.value)")
    assert heads == ["all", "0", "1", "2"]
    assert page.eval_on_selector_all("#layer option", "os => os.map(o => o.text)") == [
        "layer 0",
        "layer 1",
    ]
    words = page.eval_on_selector_all(
        '.token[data-side="query"]', "ts => ts.map(t => t.textContent)"
    )
    assert words == maps.queries["encoder"], "tokens are text, never HTML"
    assert page.locator(".token b").count() == 0
    assert page.locator("#legend .legend-item").count() == 3
    assert page.title() == "Random <attention>"


def test_lines_show_the_chosen_layer_and_head(page, maps) -> None:
    lines = shown_lines(page)
    assert all(visible for _, visible in lines.values())
    weights = {where: weight for where, (weight, _) in lines.items()}
    assert_weights(weights, expected_lines(maps, "encoder", 0, [0, 1, 2]))

    page.select_option("#kind", "cross")
    page.select_option("#layer", "1")
    page.select_option("#head", "2")
    state = page.evaluate("window.attentionViewer.state()")
    assert state == {"kind": "cross", "layer": 1, "head": 2, "view": "lines"}
    weights = {where: weight for where, (weight, _) in shown_lines(page).items()}
    assert_weights(weights, expected_lines(maps, "cross", 1, [2]))
    assert page.locator("#legend").is_hidden()

    page.select_option("#layer", "0")
    weights = {where: weight for where, (weight, _) in shown_lines(page).items()}
    assert_weights(weights, expected_lines(maps, "cross", 0, [2]))

    page.select_option("#kind", "decoder")
    lines = shown_lines(page)
    assert lines and all(key <= query for _, query, key in lines), "causal: no future keys"


def test_hovering_a_token_isolates_its_lines(page, maps) -> None:
    page.select_option("#kind", "cross")
    page.select_option("#layer", "1")
    page.select_option("#head", "1")
    query = 3
    weights = maps.select("cross", 1, 1)[query]
    page.hover(f'.token[data-side="query"][data-index="{query}"]')
    visible = [where for where, (_, shown) in shown_lines(page).items() if shown]
    assert visible and {q for _, q, _ in visible} == {query}
    expected = {k: round(float(w), 4) for k, w in enumerate(weights) if w >= MIN_LINE_WEIGHT}
    assert len(visible) == len(expected)
    strengths = highlighted(page, "key")
    assert strengths.keys() == expected.keys()
    assert strengths == pytest.approx(expected, abs=1e-4)
    assert highlighted(page, "query") == {}
    assert "attends to" in page.text_content("#readout")

    page.mouse.move(1, 1)
    assert all(shown for _, shown in shown_lines(page).values()), "leaving restores all lines"
    assert page.locator(".token.highlighted").count() == 0

    # The converse, over all heads: who attends to key token 2, summed over the heads.
    page.select_option("#head", "all")
    key = 2
    page.hover(f'.token[data-side="key"][data-index="{key}"]')
    visible = [where for where, (_, shown) in shown_lines(page).items() if shown]
    assert {k for _, _, k in visible} == {key}
    column = maps.weights["cross"][1, :, :, key]  # (heads, queries)
    drawn = (column.double().mul(1e4).round().div(1e4) >= MIN_LINE_WEIGHT).any(dim=0)
    sums = column.double().sum(dim=0)
    expected = {q: float(sums[q]) for q in range(len(sums)) if drawn[q]}
    strengths = highlighted(page, "query")
    assert strengths.keys() == expected.keys()
    assert strengths == pytest.approx(expected, abs=3e-4)


def test_heatmap_shows_the_head_or_the_mean(page, maps) -> None:
    page.select_option("#view", "heatmap")
    page.select_option("#layer", "1")
    page.select_option("#head", "0")
    assert page.evaluate("window.attentionViewer.state()")["view"] == "heatmap"
    assert page.locator("#lines line").count() == 0 and page.locator(".token").count() == 0

    def cells() -> dict:
        rows = page.eval_on_selector_all(
            ".cell", "cs => cs.map(c => [c.dataset.query, c.dataset.key, c.dataset.weight])"
        )
        return {(int(q), int(k)): float(w) for q, k, w in rows}

    assert_weights(cells(), _rounded(maps.select("encoder", 1, 0)))
    page.select_option("#head", "all")
    mean = _rounded(maps.weights["encoder"][1].mean(dim=0))
    shown = cells()
    assert shown.keys() == mean.keys()
    assert all(shown[where] == pytest.approx(mean[where], abs=2e-4) for where in mean)
    labels = page.eval_on_selector_all(
        '.axis-label[data-side="key"]', "ls => ls.map(l => l.textContent)"
    )
    assert labels == maps.keys["encoder"]
    page.hover('.cell[data-query="1"][data-key="4"]')
    assert page.text_content("#readout").endswith(f": {shown[1, 4]}")


def test_long_inputs_scroll(browser, tmp_path) -> None:
    n = 120
    tokens = [f"token{i}" for i in range(n)]
    weights = torch.randn(2, 4, n, n).softmax(dim=-1)
    maps = AttentionMaps({"encoder": weights}, {"encoder": tokens}, {"encoder": tokens})
    path = tmp_path / "long.html"
    path.write_text(attention_page(maps), encoding="utf-8")
    tab = browser.new_page(viewport={"width": 1100, "height": 800})
    tab.set_default_timeout(5_000)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.goto(path.as_uri())
    for view in ("#lines-view", "#heatmap-view"):
        if view == "#heatmap-view":
            tab.select_option("#view", "heatmap")
        scrolls = tab.eval_on_selector(view, "v => v.scrollHeight > v.clientHeight + 100")
        assert scrolls, f"{view} scrolls rather than squeezing {n} tokens"
    heights = tab.eval_on_selector_all(".cell", "cs => cs.map(c => c.offsetHeight)")
    assert len(heights) == n * n and min(heights) >= 12, "cells stay readable"
    tab.close()
    assert errors == []


def test_screenshot(page, tmp_path) -> None:
    page.select_option("#kind", "cross")
    page.hover('.token[data-side="query"][data-index="2"]')
    path = tmp_path / "attention-viewer.png"
    page.screenshot(path=path, full_page=True)
    print(f"\nviewer screenshot: {path}")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000
