"""A chat model asked through ``/v1/chat/completions``, as a user of ``scratchformer
serve`` asks it: the requests of each source task's validation split, in the first
phrasing of each kind (:func:`scratchformer.data.instructions.evaluation_prompts`),
answered greedily, scored by the task's own measure:

- ``sentiment`` (SST-2): accuracy, the answer's first word against ``positive`` /
  ``negative``;
- ``answer`` (SQuAD): exact match and F1 against every reference answer;
- ``to-german`` / ``to-english`` (Multi30k): BLEU, tokenized and lower-cased as the results
  table's translation rows, and cased sacreBLEU;
- ``people`` / ``places`` (CoNLL-2003): the F1 of the names listed against the sentence's
  PER / LOC entities (``none``: no name), over all the sentences' names.

A run without a chat template (a base language model) is asked in the default one
(:data:`scratchformer.data.chat.DEFAULT_TEMPLATE`), the template its chat fine-tunes learn.
A request longer than the model's context (a long SQuAD paragraph) is refused by the
server; it is counted (``too_long``) and left out of the scores.

    python benchmarks/chat_quality.py runs/results/chat-sft --limit 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai

from scratchformer.data.chat import DEFAULT_TEMPLATE
from scratchformer.data.instructions import (
    ANSWER_TOKENS,
    NONE,
    SOURCES,
    Instruction,
    evaluation_prompts,
)
from scratchformer.metrics import squad_scores, tokenized_bleu, translation_scores
from scratchformer.training.rundir import CHAT_TEMPLATE_FILE
from serve import served

CONCURRENCY = 16
"""Requests in flight at once: the server batches them."""


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def sentiment_accuracy(answers: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """How often the answer's first word is the gold sentiment."""
    right = sum(_words(a)[:1] == [g] for a, g in zip(answers, gold, strict=True))
    return {"accuracy": right / len(gold)}


def _names(text: str) -> set[str]:
    """The names of a comma-separated list (``none``: no name), compared without case."""
    names = {name.strip().strip(".").lower() for name in text.split(",")}
    return {name for name in names if name and name != NONE}


def list_f1(answers: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """Precision, recall and F1 of the names listed, over all the answers' names."""
    found = expected = right = 0
    for answer, reference in zip(answers, gold, strict=True):
        listed, true = _names(answer), _names(reference)
        found, expected, right = (
            found + len(listed),
            expected + len(true),
            right + len(listed & true),
        )
    precision = right / found if found else 0.0
    recall = right / expected if expected else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def scores(kind: str, answers: Sequence[str], prompts: Sequence[Instruction]) -> dict[str, float]:
    """The measure of ``kind`` of ``answers`` to ``prompts``."""
    first = [p.answers[0] for p in prompts]
    if kind == "sentiment":
        return sentiment_accuracy(answers, first)
    if kind == "answer":
        return squad_scores(answers, [p.answers for p in prompts])
    if kind in ("to-german", "to-english"):
        return translation_scores(answers, first) | {
            "bleu_tokenized_lc": tokenized_bleu(answers, first)
        }
    return list_f1(answers, first)


@contextmanager
def with_template(run_dir: Path) -> Iterator[Path]:
    """``run_dir``, or, if it has no chat template, a directory of links to its files with
    the default template beside them."""
    if (run_dir / CHAT_TEMPLATE_FILE).exists():
        yield run_dir
        return
    with tempfile.TemporaryDirectory() as linked:
        for path in run_dir.resolve().iterdir():
            (Path(linked) / path.name).symlink_to(path)
        (Path(linked) / CHAT_TEMPLATE_FILE).write_text(DEFAULT_TEMPLATE, encoding="utf-8")
        yield Path(linked)


async def _ask_all(url: str, prompts: Sequence[Instruction]) -> list[str | None]:
    """Each prompt's answer; None for one the server refuses as longer than the model's
    context (some SQuAD paragraphs), which is then left out of the scores."""
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    limit = asyncio.Semaphore(CONCURRENCY)

    async def ask(prompt: Instruction) -> str | None:
        async with limit:
            try:
                reply = await client.chat.completions.create(
                    model="chat",
                    messages=[{"role": "user", "content": prompt.prompt}],
                    max_tokens=ANSWER_TOKENS[prompt.kind],
                    temperature=0,
                )
            except openai.BadRequestError as error:
                if "context" not in str(error):
                    raise
                return None
        return (reply.choices[0].message.content or "").strip()

    answers = await asyncio.gather(*(ask(p) for p in prompts))
    await client.close()
    return list(answers)


def measure(
    run_dir: Path, limit: int | None = None, split: str = "val", threads: int = 2
) -> dict[str, Any]:
    """Each kind's scores (and how many requests it asked), the first ``limit`` requests of
    each kind of ``split``."""
    by_kind: dict[str, list[Instruction]] = defaultdict(list)
    for source in SOURCES:
        for prompt in evaluation_prompts(source, split):
            by_kind[prompt.kind].append(prompt)
    prompts = [p for kind in by_kind.values() for p in kind[:limit]]
    with with_template(run_dir) as served_dir, served(served_dir, CONCURRENCY, threads) as url:
        answers = asyncio.run(_ask_all(url, prompts))
    result: dict[str, Any] = {"split": split}
    for kind in by_kind:
        asked = [(a, p) for a, p in zip(answers, prompts, strict=True) if p.kind == kind]
        pairs = [(a, p) for a, p in asked if a is not None]
        kind_answers, kind_prompts = zip(*pairs, strict=True)
        result[kind] = {
            "requests": len(pairs),
            "too_long": len(asked) - len(pairs),
            **scores(kind, kind_answers, kind_prompts),
            "example": {"prompt": kind_prompts[0].prompt, "answer": kind_answers[0]},
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a language-model run directory")
    parser.add_argument("--limit", type=int, help="requests of each kind (default: all)")
    parser.add_argument("--split", default="val", help="the datasets' split (default: val)")
    parser.add_argument("--threads", type=int, default=2, help="the server's CPU threads")
    args = parser.parse_args()
    print(json.dumps(measure(args.run, args.limit, args.split, args.threads), indent=2))


if __name__ == "__main__":
    main()
