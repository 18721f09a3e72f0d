"""OpenAI's completions and chat completions, through the official client, against a
served language-model run."""

from __future__ import annotations

import asyncio
import shutil

import openai
import pytest
import torch

from helpers import live
from scratchformer.inference import compile_choice, generate
from scratchformer.run import load_run
from scratchformer.serve import ServeOptions, create_app

PROMPTS = ["to be", "whether 'tis", "the question: whether 'tis nobler", "or"]


def client(url: str, **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, **options)


def alone(run_dir, prompt: str, max_tokens: int) -> str:
    """What ``scratchformer generate --greedy`` writes after ``prompt``."""
    task, model = load_run(run_dir)
    tokenizer = task.tokenizer()
    ids = generate(
        model,
        [tokenizer.encode(prompt)],
        max_new_tokens=max_tokens,
        greedy=True,
        eos_id=tokenizer.eos_id,
    )[0]
    return tokenizer.decode(ids)


def test_models_names_the_run(lm_url, lm_run) -> None:
    models = client(lm_url).models.list()
    assert [model.id for model in models.data] == [lm_run.name]


def test_greedy_completion_equals_generate(lm_url, lm_run) -> None:
    answer = client(lm_url).completions.create(
        model="lm", prompt=PROMPTS[0], max_tokens=12, temperature=0
    )
    assert answer.choices[0].text == alone(lm_run, PROMPTS[0], 12)
    assert answer.choices[0].finish_reason in ("length", "stop")
    assert answer.usage.prompt_tokens == len(load_run(lm_run)[0].tokenizer().encode(PROMPTS[0]))
    assert answer.usage.completion_tokens == 12 or answer.choices[0].finish_reason == "stop"
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens


def sixteen_concurrent_texts(url: str) -> list[str]:
    """The texts of 16 concurrent greedy requests of mixed prompts and lengths."""

    async def ask_all() -> list[str]:
        async_client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        calls = [
            async_client.completions.create(
                model="lm", prompt=PROMPTS[i % 4], max_tokens=4 + 3 * (i % 5), temperature=0
            )
            for i in range(16)
        ]
        answers = await asyncio.gather(*calls)
        return [answer.choices[0].text for answer in answers]

    return asyncio.run(ask_all())


def test_sixteen_concurrent_requests_get_what_each_gets_alone(lm_url, lm_run) -> None:
    expected = [alone(lm_run, PROMPTS[i % 4], 4 + 3 * (i % 5)) for i in range(16)]
    assert sixteen_concurrent_texts(lm_url) == expected


def test_compiled_decoding_serves_what_each_request_gets_alone(lm_run) -> None:
    """``serve --compile``: the step compiled ahead of time before the server answers (and
    recorded, with its cost, when it ends), then the same texts."""
    with live(lm_run, max_batch=4, compile="always") as url:
        texts = sixteen_concurrent_texts(url)
    assert texts == [alone(lm_run, PROMPTS[i % 4], 4 + 3 * (i % 5)) for i in range(16)]
    [costs] = compile_choice.read_ledger().values()
    assert costs.compile_cold is not None and costs.compiled_per_unit is not None


def test_streaming_gives_the_same_text_in_pieces(lm_url, lm_run) -> None:
    stream = client(lm_url).completions.create(
        model="lm", prompt=PROMPTS[1], max_tokens=10, temperature=0, stream=True
    )
    pieces = [chunk.choices[0].text for chunk in stream]
    assert "".join(pieces) == alone(lm_run, PROMPTS[1], 10)
    assert len(pieces) > 1


def test_stop_string_ends_the_text_before_it(lm_url, lm_run) -> None:
    full = alone(lm_run, PROMPTS[0], 12)
    stop = full[3:5]
    answer = client(lm_url).completions.create(
        model="lm", prompt=PROMPTS[0], max_tokens=12, temperature=0, stop=[stop]
    )
    assert answer.choices[0].text == full[: full.index(stop)]
    assert answer.choices[0].finish_reason == "stop"


def test_seeded_samples_repeat_and_n_choices_differ(lm_url) -> None:
    ask = lambda: client(lm_url).completions.create(  # noqa: E731
        model="lm", prompt="to", max_tokens=12, temperature=1.0, seed=5, n=3
    )
    first, second = ask(), ask()
    texts = [choice.text for choice in first.choices]
    assert texts == [choice.text for choice in second.choices]
    assert [choice.index for choice in first.choices] == [0, 1, 2]


def test_echo_puts_the_prompt_first(lm_url) -> None:
    answer = client(lm_url).completions.create(
        model="lm", prompt="to be", max_tokens=3, temperature=0, echo=True
    )
    assert answer.choices[0].text.startswith("to be")


def model_logprobs(run_dir, ids: list[int]) -> torch.Tensor:
    """The run's log-softmax ``(len(ids) - 1, vocab)`` after each token of ``ids`` but the
    last: the reference for what the server gives."""
    _, model = load_run(run_dir)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, :-1].float().log_softmax(-1)


def test_logprobs_are_the_models_own_with_the_prompts_when_echoed(lm_url, lm_run) -> None:
    tokenizer = load_run(lm_run)[0].tokenizer()
    prompt = tokenizer.encode(PROMPTS[2])
    answer = client(lm_url).completions.create(
        model="lm", prompt=prompt, max_tokens=5, temperature=0, echo=True, logprobs=3
    )
    logprobs = answer.choices[0].logprobs
    _, model = load_run(lm_run)
    ids = prompt + generate(model, [prompt], max_new_tokens=5, greedy=True)[0]
    reference = model_logprobs(lm_run, ids)
    assert len(logprobs.tokens) == len(ids) and logprobs.token_logprobs[0] is None
    assert logprobs.top_logprobs[0] is None
    expected = reference.gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(logprobs.token_logprobs[1:]), expected, atol=1e-4)
    for place, top in enumerate(logprobs.top_logprobs[1:]):
        best = reference[place].topk(3)
        names = [tokenizer.decode([t]) for t in best.indices.tolist()]
        assert list(top) == names  # likeliest first
        assert torch.allclose(torch.tensor(list(top.values())), best.values, atol=1e-4)
    texts = logprobs.tokens
    assert "".join(texts) == answer.choices[0].text
    assert logprobs.text_offset == [len("".join(texts[:i])) for i in range(len(texts))]


def test_max_tokens_0_with_echo_scores_the_prompt_alone(lm_url, lm_run) -> None:
    """lm-eval's call: every prompt of a batch scored, none generated."""
    tokenizer = load_run(lm_run)[0].tokenizer()
    answer = client(lm_url).completions.create(
        model="lm", prompt=PROMPTS[:2], max_tokens=0, echo=True, logprobs=0, temperature=0
    )
    for prompt, choice in zip(PROMPTS, answer.choices, strict=False):
        ids = tokenizer.encode(prompt)
        expected = model_logprobs(lm_run, ids).gather(-1, torch.tensor(ids[1:])[:, None])
        assert choice.text == prompt and choice.finish_reason == "length"
        assert torch.allclose(
            torch.tensor(choice.logprobs.token_logprobs[1:]), expected[:, 0], atol=1e-4
        )
        assert choice.logprobs.top_logprobs[1:] == [{}] * (len(ids) - 1)
    assert answer.usage.completion_tokens == 0


def test_streamed_logprobs_are_the_whole_ones_in_pieces(lm_url) -> None:
    options = {
        "model": "lm",
        "prompt": PROMPTS[1],
        "max_tokens": 8,
        "temperature": 0,
        "logprobs": 2,
    }
    whole = client(lm_url).completions.create(**options).choices[0].logprobs
    chunks = list(client(lm_url).completions.create(**options, stream=True))
    pieces = [chunk.choices[0].logprobs for chunk in chunks if chunk.choices[0].logprobs]
    assert [t for p in pieces for t in p.tokens] == whole.tokens
    # (equal but for rounding: other requests may share the batch)
    assert [t for p in pieces for t in p.token_logprobs] == pytest.approx(whole.token_logprobs)
    assert [t for p in pieces for t in p.text_offset] == whole.text_offset


def test_bad_requests_are_400s_in_openai_shape(lm_url) -> None:
    api = client(lm_url)
    with pytest.raises(openai.BadRequestError, match="context is 64 tokens"):
        api.completions.create(model="lm", prompt="to be", max_tokens=1000)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        api.completions.create(model="lm", prompt="to be", temperature=7)
    with pytest.raises(openai.BadRequestError, match="logprobs"):
        api.completions.create(model="lm", prompt="to be", logprobs=6)
    with pytest.raises(openai.BadRequestError, match="no chat template"):
        api.chat.completions.create(model="lm", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError, match="'lm' run: /v1/embeddings needs"):
        api.embeddings.create(model="lm", input="hi")


CHAT = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def test_chat_renders_the_runs_template_and_streams_deltas(lm_run, tmp_path) -> None:
    run_dir = tmp_path / "chat"
    shutil.copytree(lm_run, run_dir)
    (run_dir / "chat_template.jinja").write_text(CHAT)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "to be"}]
    prompt = "system: be brief\nuser: to be\nassistant:"
    with live(run_dir) as url:
        api = client(url)
        answer = api.chat.completions.create(
            model="chat", messages=messages, max_tokens=6, temperature=0
        )
        assert answer.choices[0].message.role == "assistant"
        assert answer.choices[0].message.content == alone(run_dir, prompt, 6)
        stream = api.chat.completions.create(
            model="chat", messages=messages, max_tokens=6, temperature=0, stream=True
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
        assert text == answer.choices[0].message.content
        scored = (
            api.chat.completions.create(
                model="chat",
                messages=messages,
                max_tokens=6,
                temperature=0,
                logprobs=True,
                top_logprobs=2,
            )
            .choices[0]
            .logprobs.content
        )
        plain = (
            api.completions.create(
                model="chat", prompt=prompt, max_tokens=6, temperature=0, logprobs=2
            )
            .choices[0]
            .logprobs
        )
        assert [entry.token for entry in scored] == plain.tokens
        assert [entry.logprob for entry in scored] == pytest.approx(plain.token_logprobs)
        for entry, top in zip(scored, plain.top_logprobs, strict=True):
            assert {t.token: t.logprob for t in entry.top_logprobs} == pytest.approx(top)
        with pytest.raises(openai.BadRequestError, match="top_logprobs needs logprobs"):
            api.chat.completions.create(model="chat", messages=messages, top_logprobs=2)
        with pytest.raises(openai.BadRequestError, match="only text parts"):
            api.chat.completions.create(
                model="chat",
                messages=[
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ],
            )


def test_a_context_beyond_the_models_is_refused(lm_run) -> None:
    with pytest.raises(ValueError, match="--context 100 exceeds the model's max_len=64"):
        create_app(lm_run, ServeOptions(context=100))
