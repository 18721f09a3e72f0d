"""A compiled server: every task's model compiled before the first request, so that
requests of any number of inputs and lengths compile nothing more and answer as eager
ones; and the default, which compiles once a server of the run did work enough here.
(Dynamo and AOTAutograd with eager kernels: Inductor's are checked in tests/inference.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import compile_without_inductor, compiled_graphs, http, live
from scratchformer.inference import compile_choice

CLASSIFY = ("/v1/classify", [["good fun"], ["bad", "dull dull good fun fun", "fun"], ["good"] * 4])
TRANSLATE = ("/v1/translate", [["3 4 5"], ["7 7 1 2", "1", "9 8 7 6 5 4"], ["2 2"]])
GREEDY = {"beam_size": 1}
"""Translation's requests are also sent greedy, which calls the model with other shapes."""
FILL_MASK = ("/v1/fill-mask", [["the [MASK] sat"], ["a [MASK] .", "the cat sat on [MASK] mat"]])
"""For a run of each kind: its endpoint, and the inputs of requests, a request each."""


def leaves(value: Any) -> list[Any]:
    """The strings and numbers of a JSON value, in order."""
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in [key, *leaves(value[key])]]
    if isinstance(value, list):
        return [leaf for item in value for leaf in leaves(item)]
    return [value]


def answers(url: str, path: str, batches: list[list[str]], **fields: Any) -> list[dict]:
    """The data of a request of each batch of inputs, with ``fields`` in every body."""
    outputs = []
    for inputs in batches:
        status, answer = http(f"{url}{path}", {"input": inputs, **fields})
        assert status == 200, answer
        outputs.append(answer["data"])
    return outputs


def compiled_server_answers_as_eager(
    run_dir: Path, path: str, batches: list[list[str]], *variants: dict[str, Any]
) -> None:
    """``run_dir`` served eagerly, then compiled (Dynamo and AOTAutograd already patched
    in): the compiled server compiles before it answers, then answers ``batches`` (sent
    once plain and once with each of ``variants``' fields) as the eager one does without
    compiling anything more."""

    def all_answers(url: str) -> list[dict]:
        return [answers(url, path, batches, **f) for f in ({}, *variants)]

    with live(run_dir, max_batch=4, compile="never") as url:
        expected = all_answers(url)
    before = compiled_graphs()
    with live(run_dir, max_batch=4, compile="always") as url:
        started = compiled_graphs()
        got = all_answers(url)
        assert compiled_graphs() == started > before
    assert leaves(got) == pytest.approx(leaves(expected), abs=1e-5)


def test_a_compiled_translation_server_or_masked_lm_answers_as_eager(
    copy_run: Path, mlm_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compile_without_inductor(monkeypatch)
    compiled_server_answers_as_eager(copy_run, *TRANSLATE, GREEDY)
    compiled_server_answers_as_eager(mlm_run, *FILL_MASK)


def test_the_default_compiles_once_a_server_did_work_enough(
    classification_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first server of a run serves eagerly and records its work; the next compiles
    only if that work would have repaid the compilation measured here, before it answers,
    and then answers as the eager one did."""
    path, batches = CLASSIFY
    compile_without_inductor(monkeypatch)
    before = compiled_graphs()
    with live(classification_run, max_batch=4) as url:
        expected = answers(url, path, batches)
    assert compiled_graphs() == before
    [(key, costs)] = compile_choice.read_ledger().items()
    units = sum(len(inputs) for inputs in batches)
    assert costs.last_units == units
    assert costs.eager_per_unit > 0 and costs.compiled_per_unit is None

    slow = costs.eager_per_unit * units  # compiling costs all of the work
    compile_choice.remember(key, compiled_per_unit=costs.eager_per_unit / 2, compile_warm=slow)
    with live(classification_run, max_batch=4):
        pass
    assert compiled_graphs() == before
    cheap = slow / 4  # compiling, then half the work's time: 3/4 of eager
    compile_choice.remember(key, compile_warm=cheap)
    with live(classification_run, max_batch=4) as url:
        started = compiled_graphs()
        got = answers(url, path, batches)
        assert compiled_graphs() == started > before
    assert leaves(got) == pytest.approx(leaves(expected), abs=1e-5)
    costs = compile_choice.read_ledger()[key]
    assert costs.last_units == units and costs.compiled_per_unit is not None
