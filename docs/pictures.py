"""Regenerate the README's pictures from a trained translation run:

    python docs/pictures.py runs/multi30k-de-en "Ein Mann mit einem Hut spielt Gitarre."

writes ``docs/attention-de-en.png`` (cross-attention, every layer and head, through
``scratchformer attention``) and ``docs/viewer.png`` (a screenshot of the interactive
viewer in Debian's Chromium, driven by Playwright, a token hovered).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from scratchformer.cli import main

DOCS = Path(__file__).resolve().parent
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]


def screenshot(page: Path, out: Path, layer: str, hover: int) -> None:
    """The viewer's cross-attention of one layer, all heads, with query ``hover`` hovered."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        tab = browser.new_page(viewport={"width": 980, "height": 490})
        tab.goto(page.resolve().as_uri())
        tab.select_option("#kind", "cross")
        tab.select_option("#layer", layer)
        tab.hover(f'.token[data-side="query"][data-index="{hover}"]')
        tab.screenshot(path=str(out))
        browser.close()


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a translation run directory")
    parser.add_argument("text", help="the source sentence")
    parser.add_argument("--layer", default="2", help="the viewer's layer (default: 2)")
    parser.add_argument("--hover", type=int, default=2, help="the query token to hover")
    args = parser.parse_args()
    picture = DOCS / "attention-de-en.png"
    assert main(["attention", args.run, args.text, "--out", str(picture)]) == 0
    with tempfile.TemporaryDirectory() as temp:
        page = Path(temp) / "attention.html"
        assert main(["attention", args.run, args.text, "--out", str(page)]) == 0
        screenshot(page, DOCS / "viewer.png", args.layer, args.hover)


if __name__ == "__main__":
    run()
