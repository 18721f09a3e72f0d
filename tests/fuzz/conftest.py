"""The fuzz tests' inputs to damage: tiny Hugging Face checkpoints of each family (built as
the interop tests build them) and trained runs (the suite's shared ones)."""

from interop.conftest import (  # noqa: F401  (fixtures, registered here by name)
    llama_checkpoint,
    minilm,
    tiny_bert,
    tiny_gpt2,
)
