"""Chat templates: the rendering and the assistant's tokens against ``transformers``'
``apply_chat_template`` with the same template and tokenizer."""

from __future__ import annotations

import pytest
from jinja2 import TemplateError
from tokenizers import Tokenizer as Backend

from scratchformer.data.chat import DEFAULT_TEMPLATE, encode_chat, prompt_ids, render
from scratchformer.data.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

CHATML_MARKED = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML with ``transformers``' marks of the assistant's text."""
CHATML = CHATML_MARKED.replace("{% generation %}", "").replace("{% endgeneration %}", "")
"""The same template without the marks, as most checkpoints' templates are."""
LLAMA3_MARKED = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] | trim }}<|eot_id|>{% endgeneration %}"
    "{% else %}{{ message['content'] | trim }}<|eot_id|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
"""Llama 3's layout: a bos token first, the end of turn right after the text."""
CONVERSATION = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris, on the Seine."},
    {"role": "user", "content": "And of Japan?\nSay it twice."},
    {"role": "assistant", "content": "Tokyo. Tokyo — naïve café!"},
]
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
SPECIALS += ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    """A byte-level BPE learnt from the conversation's words, its template tokens special."""
    texts = [message["content"] for message in CONVERSATION] * 5 + ["user assistant system"]
    trained = Tokenizer.train("bpe", texts, 300, ("pad", "unk", "bos", "eos"))
    backend = Backend.from_str(trained.to_json())
    backend.add_special_tokens(SPECIALS[4:])
    return Tokenizer(backend)


def theirs(tokenizer: Tokenizer, template: str, **options) -> dict:
    """``transformers``' ``apply_chat_template`` of :data:`CONVERSATION` with ``tokenizer``."""
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Backend.from_str(tokenizer.to_json()),
        **{f"{role}_token": token for role, token in tokenizer.special_tokens.items()},
    )
    return fast.apply_chat_template(
        CONVERSATION, chat_template=template, tokenize=True, return_dict=True, **options
    )


@pytest.mark.parametrize(
    ("ours", "marked", "end"),
    [
        (DEFAULT_TEMPLATE, DEFAULT_TEMPLATE, "</s>"),
        (CHATML, CHATML_MARKED, "<|im_end|>"),
        (CHATML_MARKED, CHATML_MARKED, "<|im_end|>"),
        (LLAMA3_MARKED, LLAMA3_MARKED, "<|eot_id|>"),
    ],
)
def test_the_assistant_tokens_are_those_transformers_marks(ours, marked, end, tokenizer) -> None:
    """Found by rendering, with or without the marks, they are the tokens ``transformers``
    finds inside the marks: each answer and its end-of-turn token."""
    ids, mask = encode_chat(ours, CONVERSATION, tokenizer)
    reference = theirs(tokenizer, marked, return_assistant_tokens_mask=True)
    assert ids == reference["input_ids"]
    assert [int(m) for m in mask] == reference["assistant_masks"]
    learnt = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m], False)
    assert learnt == f"Paris, on the Seine.{end}Tokyo. Tokyo — naïve café!{end}"


def test_a_prompt_is_what_transformers_gives_the_model(tokenizer) -> None:
    messages = CONVERSATION[:4]
    reference = theirs(tokenizer, CHATML, add_generation_prompt=True)["input_ids"]
    full = prompt_ids(CHATML, CONVERSATION, tokenizer)
    assert full == reference
    assert tokenizer.decode(prompt_ids(CHATML, messages, tokenizer), False).endswith(
        "And of Japan?\nSay it twice.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert render(DEFAULT_TEMPLATE, CONVERSATION[1:3], tokenizer) == (
        "<|im_start|>user\nWhat is the capital of France?</s>\n"
        "<|im_start|>assistant\nParis, on the Seine.</s>\n"
    )


def test_templates_that_refuse_or_rewrite_earlier_turns_are_named(tokenizer) -> None:
    refusing = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}"
    )
    with pytest.raises(TemplateError, match="no system"):
        encode_chat(refusing, CONVERSATION, tokenizer)
    last_only = "{{ messages[-1]['content'] }}"
    with pytest.raises(ValueError, match="otherwise than the whole conversation begins"):
        encode_chat(last_only, CONVERSATION, tokenizer)
