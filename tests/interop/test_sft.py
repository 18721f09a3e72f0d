"""Supervised chat fine-tuning of an imported checkpoint, end to end: a tiny Qwen2 with a
ChatML template, imported, fine-tuned by LoRA on conversations, merged, served to OpenAI's
client, asked for its own answers (on-policy preference pairs), and exported to GGUF, whose
template llama.cpp formats chats with."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
import torch

from helpers import live, set_options
from scratchformer.cli import main
from scratchformer.data.chat import prompt_ids, render
from scratchformer.data.instructions import is_right
from scratchformer.data.preferences import iter_preferences
from scratchformer.data.readers import read_chat
from scratchformer.inference import generate
from scratchformer.inference.chat_answers import chat_answers
from scratchformer.nn.lora import adapters_disabled
from scratchformer.run import export_gguf, load_run

gguf = pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")

QWEN_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""Qwen2-Instruct's layout (ChatML), without its default system message."""
ANSWERS = {"the quick brown fox?": "jumps over", "the lazy dog?": "sleeps", "Hello?": "world"}
SYSTEM = {"role": "system", "content": "Answer in two words."}
ASKED = [SYSTEM, {"role": "user", "content": "the lazy dog?"}]


@pytest.fixture(scope="module")
def chat_run(llama_checkpoint, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2-Instruct-like checkpoint (its eos ``<|im_end|>``, a ChatML template)
    imported, then fine-tuned by LoRA on :data:`ANSWERS` for a few steps."""
    directory = tmp_path_factory.mktemp("sft")
    checkpoint = llama_checkpoint("qwen2", directory / "hf")
    settings = {"chat_template": QWEN_TEMPLATE, "eos_token": "<|im_end|>"}
    (checkpoint / "tokenizer_config.json").write_text(json.dumps(settings))
    assert main(["--quiet", "import-hf", str(checkpoint), "--out", str(directory / "qwen")]) == 0
    data = directory / "chat.jsonl"
    lines = [
        {"messages": [SYSTEM, {"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in ANSWERS.items()
    ]
    data.write_text("".join(json.dumps(line) + "\n" for line in lines) * 2)
    recipe = directory / "sft.toml"
    recipe.write_text('task = "sft"\n')
    options = [
        f"train.init_from='{directory / 'qwen'}'",
        f"data.train='{data}'",
        f"data.val='{data}'",
        "train.lora_rank=4",
        "train.lora_targets=['qkv_proj', 'out_proj', 'w1', 'w2', 'w3']",
        "model.dropout=0.0",
        "train.lr=1e-2",
        "train.warmup_steps=0",
        "train.max_steps=8",
        "train.eval_every=4",
        "train.batch_size=3",
    ]
    run_dir = directory / "run"
    args = ["--quiet", "train", str(recipe), "--out", str(run_dir), *set_options(options)]
    assert main(args) == 0
    return run_dir


def test_the_run_learns_the_answers_and_keeps_the_template(chat_run: Path) -> None:
    losses = [
        record["loss"]
        for record in map(json.loads, (chat_run / "metrics.jsonl").read_text().splitlines())
        if record.get("split") == "val"
    ]
    assert len(losses) == 2 and losses[1] < losses[0]
    assert (chat_run / "chat_template.jinja").read_text() == QWEN_TEMPLATE


def test_merged_and_served_it_answers_openais_client(chat_run: Path, tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    assert main(["--quiet", "merge", str(chat_run), "--out", str(merged)]) == 0
    assert (merged / "chat_template.jinja").read_text() == QWEN_TEMPLATE
    task, model = load_run(merged)
    tokenizer = task.tokenizer()
    prompt = prompt_ids(QWEN_TEMPLATE, ASKED, tokenizer)
    assert prompt[0] == tokenizer.backend.token_to_id("<|im_start|>")  # a token, not text
    greedy = generate(model, [prompt], max_new_tokens=6, greedy=True, eos_id=tokenizer.eos_id)
    with live(merged) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        answer = api.chat.completions.create(
            model="merged", messages=ASKED, max_tokens=6, temperature=0
        )
    assert answer.usage.prompt_tokens == len(prompt)
    assert answer.choices[0].message.content == tokenizer.decode(greedy[0])


def test_its_own_answers_in_batches_are_its_answers_alone(chat_run: Path) -> None:
    task, model = load_run(chat_run)
    tokenizer = task.tokenizer()
    too_long = [{"role": "user", "content": "the lazy dog " * model.config.max_len}]
    asked = [[SYSTEM, {"role": "user", "content": q}] for q in ANSWERS] + [ASKED, too_long]
    limits = [6, 2, 5, 3, 4]
    answers = chat_answers(
        model, tokenizer, QWEN_TEMPLATE, asked, limits, batch_size=2, shown=False
    )
    assert answers[-1] is None  # no room for its answer in the model's context
    for chat, limit, answer in zip(asked[:-1], limits, answers, strict=False):
        prompt = prompt_ids(QWEN_TEMPLATE, chat, tokenizer)
        alone = generate(
            model, [prompt], max_new_tokens=limit, greedy=True, eos_id=tokenizer.eos_id
        )
        assert answer == tokenizer.decode(alone[0]).strip()


def test_on_policy_pairs_reject_the_runs_own_wrong_answers(
    chat_run: Path, data_dir: Path, tmp_path: Path
) -> None:
    made = {}
    for name, extra in (("gold", []), ("own", ["--rejected-from", str(chat_run)])):
        made[name] = tmp_path / name
        args = ["--quiet", "make-chat-data", "--out", str(made[name]), "--source", "sst2"]
        assert main([*args, "--per-source", "6", "--val", "2", *extra]) == 0
    for part in ("train", "val"):
        file = f"{part}.jsonl"
        assert (made["own"] / file).read_text() == (made["gold"] / file).read_text()
        conversations = read_chat(made["gold"] / file)
        pairs = list(iter_preferences(made["own"] / f"pairs-{file}"))
        prompts = [c.messages[:-1] for c in conversations]
        task, model = load_run(chat_run)
        answers = chat_answers(
            model, task.tokenizer(), QWEN_TEMPLATE, prompts, [4] * len(prompts), shown=False
        )
        wrong = [
            (prompt, answer)
            for prompt, answer, c in zip(prompts, answers, conversations, strict=True)
            if answer and not is_right(answer, [c.messages[-1]["content"]])
        ]
        assert wrong and [(pair.prompt, pair.rejected) for pair in pairs] == wrong
        assert {pair.chosen for pair in pairs} <= {"positive", "negative"}


def test_dpo_with_lora_starts_from_the_sft_run_with_its_adapters_merged(
    chat_run: Path, tmp_path: Path
) -> None:
    pairs = tmp_path / "pairs.jsonl"
    lines = [
        {"prompt": [SYSTEM, {"role": "user", "content": q}], "chosen": a, "rejected": "no idea"}
        for q, a in ANSWERS.items()
    ]
    pairs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    recipe = tmp_path / "dpo.toml"
    recipe.write_text('task = "dpo"\n')
    options = [
        f"train.init_from='{chat_run}'",
        f"data.train='{pairs}'",
        f"data.val='{pairs}'",
        "train.lora_rank=4",
        "train.lr=1e-2",
        "train.warmup_steps=0",
        "train.max_steps=2",
        "train.batch_size=3",
    ]
    run_dir = tmp_path / "dpo"
    assert (
        main(["--quiet", "train", str(recipe), "--out", str(run_dir), *set_options(options)]) == 0
    )
    assert (run_dir / "chat_template.jinja").read_text() == QWEN_TEMPLATE
    task, sft = load_run(chat_run)
    _, dpo = load_run(run_dir)
    ids = torch.tensor([prompt_ids(QWEN_TEMPLATE, ASKED, task.tokenizer())])
    with torch.no_grad(), adapters_disabled(dpo):  # the reference: the SFT run as trained
        torch.testing.assert_close(dpo(ids).logits, sft(ids).logits, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        assert not torch.allclose(dpo(ids).logits, sft(ids).logits, atol=1e-3)


def test_its_gguf_file_formats_chats_with_the_template(chat_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "chat.gguf"
    assert export_gguf(chat_run, out, "f32") == "llama"
    task, _ = load_run(chat_run)
    tokenizer = task.tokenizer()
    model = llama_cpp.Llama(model_path=str(out), n_ctx=128, n_threads=2, verbose=False)
    try:
        template = model.metadata["tokenizer.chat_template"]
        assert template == QWEN_TEMPLATE
        assert model.chat_format == "chat_template.default"  # what create_chat_completion uses
        eos = model.detokenize([model.token_eos()], special=True).decode()
        formatter = llama_cpp.llama_chat_format.Jinja2ChatFormatter(template, eos, eos)
        formatted = formatter(messages=ASKED).prompt
        assert formatted == render(QWEN_TEMPLATE, ASKED, tokenizer, add_generation_prompt=True)
        tokens = model.tokenize(formatted.encode(), add_bos=False, special=True)
        assert tokens == prompt_ids(QWEN_TEMPLATE, ASKED, tokenizer)
        answer = model.create_chat_completion(messages=ASKED, max_tokens=4, temperature=0.0)
        assert answer["usage"]["prompt_tokens"] == len(tokens)
    finally:
        model.close()
