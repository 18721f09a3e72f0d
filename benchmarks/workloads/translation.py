"""The ``translate`` workload: beam search over Multi30k, with the KV cache and without;
and against Hugging Face's Marian, both decoding to the same length."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import Tensor, nn

from scratchformer import build_model
from scratchformer.config import Recipe
from scratchformer.data.batching import pad_batch
from scratchformer.data.readers import read_lines
from scratchformer.data.registry import dataset_file
from scratchformer.device import CPU, bf16_autocast, native_bf16
from scratchformer.inference import CompiledModel, beam_search, quantize
from scratchformer.run import load_run
from scratchformer.tasks import build_task
from scratchformer.tasks.translation import TranslationTask
from scratchformer.training.rundir import MODEL_FILE
from timing import Step, interleaved
from workloads.flops import beam_translation_flops, per_second
from workloads.report import (
    BF16_COMPILED,
    COMPILED,
    INT8_COMPILED,
    MARIAN,
    OURS,
    Figure,
    Row,
    Settings,
    Target,
    precision_of,
    print_row,
)
from workloads.seq2seq_train import Seq2SeqShape, marian_model
from workloads.training import parameters

ROOT = Path(__file__).resolve().parents[2]
TRANSLATE_RUN = ROOT / "runs" / "multi30k-de-en"
TRANSLATE_RECIPE = ROOT / "recipes" / "multi30k-de-en.toml"
BEAM = 5
QUICK_SENTENCES = 50
BATCH = 64
NEW_TOKENS = 48
"""Target tokens every hypothesis runs to in the comparison with Marian: neither may stop
early (random weights), so both do the same number of decoder steps."""
NEVER = -1
"""An eos id no step produces: our beam search then runs every hypothesis to its limit."""
MARIAN_TARGET = 2.0


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
    """The two rows: translating with and without the cache, and against Marian."""
    sentences = read_lines(dataset_file("multi30k", "test_2016_flickr", lang="de"))
    if settings.quick:
        sentences = sentences[:QUICK_SENTENCES]
    torch.manual_seed(0)
    task, model, which = translation_model()
    return [
        cache_row(settings, task, model, which, sentences),
        marian_row(settings, task, sentences),
    ]


def cache_row(
    settings: Settings, task: TranslationTask, model: nn.Module, which: str, sentences: list[str]
) -> Row:
    """Sentences/s of ``scratchformer translate``'s beam search with the KV cache and
    without it (every beam's prefix recomputed each step, timed once)."""

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
    target = task.target_tokenizer()
    steps = [len(ids) + 1 for ids in target.encode_batch(timings[0].last)]  # eos included
    flops = translation_flops(model, source_lengths(task, sentences), steps)
    figures = [
        Figure(name, len(sentences) / t.median_s, "sentences/s", t, per_second(flops, t), note=note)
        for name, t in zip((cached, uncached), timings, strict=True)
    ]
    row = Row(
        "translate",
        f"beam {BEAM}",
        f"Multi30k test_2016_flickr German -> English, {which}, batches of 64 sorted by length",
        figures,
        [Target(uncached, 1.0)],
        ours=cached,
        remark=f"{differ} of {len(sentences)} translations differ with and without the cache "
        "(float rounding can flip a near-tie); GFLOP/s counts the best hypotheses' steps "
        "only (a floor)",
        machine=settings.machine,
    )
    print_row(row)
    return row


def source_batches(task: TranslationTask, sentences: list[str]) -> list[tuple[Tensor, Tensor]]:
    """The sentences' token ids and masks as ``translate`` encodes them (eos added), sorted
    by length, in batches of ``BATCH``."""
    source = task.source_tokenizer()
    encoded = sorted(source.encode_batch(sentences, add_eos=True), key=len)
    return [pad_batch(encoded[i : i + BATCH], source.pad_id) for i in range(0, len(encoded), BATCH)]


def source_lengths(task: TranslationTask, sentences: list[str]) -> list[int]:
    return [len(ids) for ids in task.source_tokenizer().encode_batch(sentences, add_eos=True)]


def translation_flops(model: nn.Module, sources: list[int], steps: list[int]) -> float:
    """:func:`beam_translation_flops` of ``model``'s shape."""
    c = model.config
    return beam_translation_flops(c.n_layers, c.d_model, c.d_ff, c.vocab_size, sources, steps, BEAM)


def marian_row(settings: Settings, task: TranslationTask, sentences: list[str]) -> Row:
    """Beam search by ours and by Hugging Face's ``MarianMTModel.generate``, both with
    random weights of the ``multi30k-de-en`` recipe's shape, on the same source batches,
    every hypothesis run to ``NEW_TOKENS`` target tokens (ours: an eos no step produces;
    Marian: ``min_new_tokens``). Ours also through ``CompiledModel``, unless compiling is
    off: in fp32, in bf16 autocast (CPUs with native bf16) and with int8 weights
    (``quantize``; in bf16 on those CPUs); the compiled fp32 search must give the eager
    one's tokens."""
    source, target = task.source_tokenizer(), task.target_tokenizer()
    ours = build_model(task.model_config()).eval()
    c = ours.config
    shape = Seq2SeqShape(
        vocab=c.vocab_size,
        layers=c.n_layers,
        d_model=c.d_model,
        heads=c.n_heads,
        d_ff=c.d_ff,
        dropout=0.0,
    )
    marian = marian_model(shape, c.max_len + NEW_TOKENS, source.pad_id, target.bos_id)
    batches = source_batches(task, sentences)

    def run(model: nn.Module, bf16: bool = False) -> Step:
        def search() -> list[list[int]]:
            with bf16_autocast(CPU, bf16):
                return [
                    hypotheses[0].tokens
                    for ids, mask in batches
                    for hypotheses in beam_search(
                        model,
                        ids,
                        mask,
                        bos_id=target.bos_id,
                        eos_id=NEVER,
                        beam_size=BEAM,
                        max_len=NEW_TOKENS,
                    )
                ]

        return search

    def run_marian() -> list[list[int]]:
        outputs = []
        for ids, mask in batches:
            out = marian.generate(
                input_ids=ids,
                attention_mask=mask.long(),
                num_beams=BEAM,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                length_penalty=0.6,
                early_stopping=True,
                eos_token_id=target.eos_id,
            )
            outputs += out[:, 1:].tolist()
        return outputs

    candidates = {OURS: run(ours), MARIAN: run_marian}
    bf16 = native_bf16(CPU)
    if settings.compile:
        candidates[COMPILED] = run(CompiledModel(ours))
        if bf16:
            candidates[BF16_COMPILED] = run(CompiledModel(ours), bf16=True)
        candidates[INT8_COMPILED] = run(CompiledModel(quantize(copy.deepcopy(ours))), bf16=bf16)
    steps = [checked(step, name, len(sentences)) for name, step in candidates.items()]
    timings = interleaved(steps, settings.repeats_or(3, quick=1), warmup=1)
    if settings.compile and timings[2].last != timings[0].last:
        raise RuntimeError(f"{COMPILED} gave other translations than {OURS}")
    sources = [int(row.sum()) for _, mask in batches for row in mask]
    flops = translation_flops(ours, sources, [NEW_TOKENS] * len(sources))
    note = f"{len(sentences)} sentences x {NEW_TOKENS} target tokens"
    figures = [
        Figure(
            name,
            len(sentences) / t.median_s,
            "sentences/s",
            t,
            per_second(flops, t),
            note=note,
            precision=precision_of(name, bf16),
        )
        for name, t in zip(candidates, timings, strict=True)
    ]
    row = Row(
        "translate",
        f"beam {BEAM} vs Marian",
        f"Multi30k test_2016_flickr German sources, random weights of the multi30k-de-en "
        f"recipe's shape ({parameters(ours)}; Marian {parameters(marian)}), batches of "
        f"{BATCH} sorted by length, every hypothesis {NEW_TOKENS} tokens",
        figures,
        [Target(MARIAN, MARIAN_TARGET)],
        variants=tuple(candidates)[2:],
        machine=settings.machine,
    )
    print_row(row)
    return row


def checked(run: Step, name: str, sentences: int) -> Step:
    """``run``, raising unless it gave every sentence ``NEW_TOKENS`` tokens."""

    def step() -> list[list[int]]:
        out = run()
        if len(out) != sentences or any(len(tokens) != NEW_TOKENS for tokens in out):
            raise RuntimeError(f"{name}: expected {sentences} x {NEW_TOKENS} tokens")
        return out

    return step
