"""schemathesis over the server's own OpenAPI description (``/openapi.json``), on a
language model's server and a classifier's: every endpoint, with bodies that follow its
schema and bodies that break it. No answer is a 5xx, every answer is as documented
(status, media type, JSON schema, headers), a body that breaks the schema is refused, and
every 4xx is in OpenAI's error shape."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.strategies import SearchStrategy
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from helpers import live

EXAMPLES = 30
"""Examples an endpoint and mode (a body that follows the schema, one that breaks it)."""
ERROR_FIELDS = {"message", "type", "param", "code"}
REFUSED = ["400", "401", "404", "405", "411", "413", "415", "422", "429"]
"""The statuses that refuse a body breaking the schema: schemathesis's, with the 411 (no
Content-Length) and 413 (over the size limit) that this server refuses bodies with too."""
CONFIG = schemathesis.Config.from_dict(
    {"checks": {"negative_data_rejection": {"expected-statuses": REFUSED}}}
)


@schemathesis.check
def openai_error_shape(ctx: schemathesis.CheckContext, response, case) -> None:
    """A 4xx is ``{"error": {"message", "type", "param", "code"}}``: its message a line,
    its param a path in the body (``messages.0.role``), not pydantic's name of a union's
    member (``prompt.list[str]``)."""
    if 400 <= response.status_code < 500:
        answer = response.json()
        assert set(answer) == {"error"}, answer
        error = answer["error"]
        assert set(error) == ERROR_FIELDS, answer
        assert isinstance(error["message"], str) and error["message"], answer
        assert "\n" not in error["message"], answer
        assert error["param"] is None or re.fullmatch(r"\w+(\.\w+)*", error["param"]), answer


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,
    openai_error_shape,
]


def fuzz(url: str) -> tuple[Counter[tuple[str, int]], list[str]]:
    """The examples sent to each operation of the server at ``url``, by the status of
    their answers, and the failures (the first of each operation and mode)."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=CONFIG)
    counts: Counter[tuple[str, int]] = Counter()
    failures: list[str] = []
    session = requests.Session()
    for result in schema.get_all_operations():
        operation = result.ok()
        modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE][: 2 if operation.body else 1]
        for mode in modes:
            try:
                examples(operation.as_strategy(generation_mode=mode), url, session, counts)
            except Exception as error:
                failures.append(f"{operation.label} ({mode.value}): {error}"[:3000])
    return counts, failures


def examples(
    cases: SearchStrategy[schemathesis.Case],
    url: str,
    session: requests.Session,
    counts: Counter[tuple[str, int]],
) -> None:
    """Send :data:`EXAMPLES` of ``cases`` to the server at ``url``, each answer checked
    by :data:`CHECKS` and counted in ``counts``; the first failure is raised unshrunk."""

    @given(case=cases)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def call(case: schemathesis.Case) -> None:
        response = case.call_and_validate(base_url=url, session=session, checks=CHECKS, timeout=60)
        counts[case.operation.label, response.status_code] += 1

    call()


@pytest.fixture(scope="module")
def classifier_url(classification_run: Path) -> Iterator[str]:
    with live(classification_run) as url:
        yield url


@pytest.mark.bench
@pytest.mark.parametrize("server", ["lm_url", "classifier_url"])
def test_every_endpoint_answers_as_its_schema_says(server: str, request) -> None:
    url = request.getfixturevalue(server)
    start = time.monotonic()
    counts, failures = fuzz(url)
    seconds = time.monotonic() - start
    request.node.user_properties.append(("seconds", round(seconds, 1)))
    sent = {f"{operation} {status}": n for (operation, status), n in counts.items()}
    request.node.user_properties.append(("examples", sent))
    print(f"\n{server}: {sum(counts.values())} examples in {seconds:.0f} s")
    for (operation, status), count in sorted(counts.items()):
        print(f"  {operation}: {count} answered {status}")
    assert not failures, "\n\n".join(failures)
    assert len({operation for operation, _ in counts}) == 14
    assert any(status == 200 for _, status in counts)
