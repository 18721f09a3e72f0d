"""The task endpoints of served runs: the CLI's outputs as JSON, the same whatever other
requests share a batch, and the endpoints of other tasks refused with a 404."""

from __future__ import annotations

import base64
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import openai
import pytest
import torch

from helpers import http, live, run, train
from scratchformer.data.batching import pad_batch
from scratchformer.run import load_run


@pytest.fixture(scope="module")
def similarity_run(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("sim")
    data = directory / "train.tsv"
    rows = "a cat sat\ta cat sat down\t4.5\na dog ran\tthe sky is blue\t0.5\n" * 10
    data.write_text("a\tb\tscore\n" + rows)
    train(
        directory / "run",
        "stsb.toml",
        f"data.train='{data}'",
        f"data.val='{data}'",
        "data.text_columns=['a', 'b']",
        "data.label_column='score'",
        "data.dataset=none",
        "data.vocab_size=60",
    )
    return directory / "run"


def concurrently(url: str, bodies: list[dict]) -> list[tuple[int, dict]]:
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: http(url, body), bodies))


def test_classify_answers_what_the_cli_prints_however_batched(classification_run) -> None:
    task, model = load_run(classification_run)
    lines = ["good fun", "bad", "dull dull good", "fun"]
    expected = [record.json() for record in task.predict(model, lines)]
    with live(classification_run, max_batch=3, batch_wait_ms=50) as url:
        status, answer = http(f"{url}/v1/classify", {"input": lines})
        assert status == 200 and answer["object"] == "list"
        assert [d["label"] for d in answer["data"]] == [e["label"] for e in expected]
        got = [d["probability"] for d in answer["data"]]
        assert got == pytest.approx([e["probability"] for e in expected], abs=1e-6)
        single = concurrently(f"{url}/v1/classify", [{"input": line} for line in lines])
        assert [a["data"][0]["label"] for _, a in single] == [e["label"] for e in expected]
        status, answer = http(f"{url}/v1/embeddings", {"input": lines[:2]})
        assert status == 200 and [d["index"] for d in answer["data"]] == [0, 1]
        vectors = torch.tensor([d["embedding"] for d in answer["data"]])
        ids, mask = pad_batch([task.sentence_ids(text) for text in lines[:2]], 0)
        with torch.no_grad():
            hidden, _ = model.encode(ids, mask)
        mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # its pooling
        assert torch.allclose(vectors, torch.nn.functional.normalize(mean, dim=-1), atol=1e-6)
        status, answer = http(f"{url}/v1/completions", {"prompt": "good"})
        assert (
            status == 404
            and "'classification' run: /v1/completions needs" in answer["error"]["message"]
        )
        status, answer = http(f"{url}/v1/tag", {"input": ["good"]})
        assert status == 404 and answer["error"]["type"] == "not_found_error"
        status, answer = http(f"{url}/v1/classify", {"input": []})
        assert status == 400 and answer["error"]["param"] == "input"
        metrics = urllib.request.urlopen(f"{url}/metrics").read().decode()
        assert 'requests_total{endpoint="/v1/classify",status="200"}' in metrics
        assert 'requests_total{endpoint="/v1/classify",status="400"} 1.0' in metrics


def test_embeddings_are_the_bi_encoders_vectors(similarity_run) -> None:
    task, model = load_run(similarity_run)
    texts = ["a cat sat", "the sky is blue"]
    expected = task.embed(model, texts).numpy()
    with live(similarity_run) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        answer = api.embeddings.create(model="sim", input=texts)
        vectors = np.array([item.embedding for item in answer.data])
        np.testing.assert_allclose(vectors, expected, atol=1e-6)
        assert answer.usage.prompt_tokens > 0
        encoded = api.embeddings.create(model="sim", input=texts[0], encoding_format="base64")
        raw = np.frombuffer(base64.b64decode(encoded.data[0].embedding), dtype="<f4")
        np.testing.assert_allclose(raw, expected[0], atol=1e-6)
        status, scores = http(f"{url}/v1/classify", {"input": ["a cat sat\ta cat sat down"]})
        assert status == 200
        assert scores["data"][0]["value"] == pytest.approx(
            float(expected[0] @ task.embed(model, ["a cat sat down"]).numpy()[0]), abs=1e-5
        )


def test_translate_and_fill_mask_answer_as_their_commands(copy_run, mlm_run) -> None:
    task, model = load_run(copy_run)
    lines = ["3 4 5", "7 7 1 2"]
    expected = task.translate(model, lines, beam_size=2)
    with live(copy_run) as url:
        answers = concurrently(
            f"{url}/v1/translate", [{"input": line, "beam_size": 2} for line in lines]
        )
        assert [a["data"][0]["translation"] for _, a in answers] == expected
        greedy = http(f"{url}/v1/translate", {"input": lines, "beam_size": 1})[1]
        assert [d["translation"] for d in greedy["data"]] == task.translate(
            model, lines, beam_size=1
        )
    task, model = load_run(mlm_run)
    with live(mlm_run) as url:
        status, answer = http(
            f"{url}/v1/fill-mask", {"input": ["the cat [MASK] on the mat ."], "top_k": 3}
        )
        assert status == 200
        candidates = task.fill(model, "the cat [MASK] on the mat .", 3)
        assert answer["data"][0]["masks"] == [
            [{"token": t, "probability": pytest.approx(p)} for t, p in mask] for mask in candidates
        ]
        status, answer = http(f"{url}/v1/fill-mask", {"input": ["no mask here"]})
        assert status == 400 and "no [MASK]" in answer["error"]["message"]


def test_tag_answer_and_fill_spans_answer_as_their_commands(tagging_run, qa_run, span_run) -> None:
    task, model = load_run(tagging_run)
    sentences = ["Peter went to Paris", "Anna sings"]
    expected = [record.json() for record in task.predict(model, sentences)]
    with live(tagging_run) as url:
        answers = concurrently(f"{url}/v1/tag", [{"input": line} for line in sentences])
        assert [a["data"][0] for _, a in answers] == [{"index": 0, **e} for e in expected]
        assert [e["words"] for e in expected] == [line.split() for line in sentences]
    task, model = load_run(qa_run)
    context = "Long ago it was so. The winner is Grace. Then it rained."
    [prediction] = task.answer(model, [("Who won?", context)])
    with live(qa_run) as url:
        body = {"input": [{"question": "Who won?", "context": context}]}
        status, answer = http(f"{url}/v1/answer", body)
        assert status == 200
        start, end = prediction.span
        assert answer["data"][0] == {
            "index": 0,
            "answer": context[start:end],
            "start": start,
            "end": end,
            "probability": pytest.approx(prediction.score, abs=1e-6),
        }
    task, model = load_run(span_run)
    lines = ["the man<extra_id_0> in the park", "a <extra_id_0> dog<extra_id_1>"]
    expected = task.predict_lines(model, lines)
    with live(span_run) as url:
        status, answer = http(f"{url}/v1/fill-spans", {"input": lines})
        assert status == 200
        assert [d["spans"] for d in answer["data"]] == [e.split("\t") for e in expected]


def test_attention_is_the_page_the_cli_writes(
    copy_run, classification_run, tmp_path, capsys, monkeypatch
) -> None:
    """``POST /v1/attention``: the viewer of ``scratchformer attention RUN TEXT --out
    page.html``, with or without a translation's target; a target given to another run
    is a 400 that says why."""
    with live(copy_run, precision="fp32") as url:  # (the CLI's default)
        for target in (None, "3 4"):
            out = tmp_path / "page.html"
            options = ["--out", str(out)] + (["--target", target] if target else [])
            status, _, err = run(
                capsys, monkeypatch, "", "attention", str(copy_run), "907", *options
            )
            assert status == 0, err
            status, answer = http(f"{url}/v1/attention", {"input": "907", "target": target})
            assert status == 200 and answer["object"] == "attention"
            assert answer["html"] == out.read_text(encoding="utf-8")
    with live(classification_run) as url:
        status, answer = http(f"{url}/v1/attention", {"input": "good fun", "target": "x"})
        assert status == 400 and "a target is for translation models" in answer["error"]["message"]
