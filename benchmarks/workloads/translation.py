"""The ``translate`` workload: beam search over Multi30k, with the KV cache and without."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from scratchformer import build_model
from scratchformer.config import Recipe
from scratchformer.data.readers import read_lines
from scratchformer.data.registry import dataset_file
from scratchformer.io import MODEL_FILE
from scratchformer.run import load_run
from scratchformer.tasks import build_task
from scratchformer.tasks.translation import TranslationTask
from timing import Step, interleaved
from workloads.report import OURS, Figure, Row, Settings, Target, print_row
from workloads.training import parameters

ROOT = Path(__file__).resolve().parents[2]
TRANSLATE_RUN = ROOT / "runs" / "multi30k-de-en"
TRANSLATE_RECIPE = ROOT / "recipes" / "multi30k-de-en.toml"
BEAM = 5
QUICK_SENTENCES = 50


def translation_model() -> tuple[TranslationTask, nn.Module, str]:
    """The trained ``multi30k-de-en`` run, or a random model of its recipe's shape (with a
    tokenizer learnt from the training data) if it has no weights; and which it is."""
    if (TRANSLATE_RUN / MODEL_FILE).exists():
        task, model = load_run(TRANSLATE_RUN)
        return task, model, f"trained run {TRANSLATE_RUN.relative_to(ROOT)}"
    task = build_task(Recipe.load(TRANSLATE_RECIPE))
    task.prepare()
    model = build_model(task.model_config()).eval()
    return task, model, f"random weights of {TRANSLATE_RECIPE.relative_to(ROOT)} (no trained run)"


def translation(settings: Settings) -> list[Row]:
    sentences = read_lines(dataset_file("multi30k", "test_2016_flickr", lang="de"))
    if settings.quick:
        sentences = sentences[:QUICK_SENTENCES]
    torch.manual_seed(0)
    task, model, which = translation_model()

    def run(use_cache: bool) -> Step:
        def step() -> list[str]:
            out = task.translate(model, sentences, beam_size=BEAM, use_cache=use_cache)
            if len(out) != len(sentences):
                raise RuntimeError(f"{len(sentences)} sentences gave {len(out)} translations")
            return out

        return step

    task.translate(model, sentences[:16], beam_size=BEAM)  # warm-up
    repeats = settings.repeats_or(3, quick=1)
    timings = interleaved([run(True), run(False)], [repeats, 1])  # without: minutes a run
    empty = sum(not line for line in timings[0].last)
    note = f"{len(sentences)} sentences, {empty} empty translations; {parameters(model)}"
    differ = sum(a != b for a, b in zip(timings[0].last, timings[1].last, strict=True))
    cached, uncached = f"{OURS}, KV cache", f"{OURS}, no cache"
    figures = [
        Figure(name, len(sentences) / timing.median_s, "sentences/s", timing, note=note)
        for name, timing in zip((cached, uncached), timings, strict=True)
    ]
    row = Row(
        "translate",
        f"beam {BEAM}",
        f"Multi30k test_2016_flickr German -> English, {which}, batches of 64 sorted by length",
        figures,
        [Target(uncached, 1.0)],
        ours=cached,
        remark=f"{differ} of {len(sentences)} translations differ with and without the cache "
        "(float rounding can flip a near-tie)",
    )
    print_row(row)
    return [row]
