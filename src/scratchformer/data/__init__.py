"""Datasets and their files: readers that name the file and line of any error, and a
registry that finds named datasets without a network. Knows nothing of models."""

from .readers import (
    Answer,
    DataError,
    LabeledText,
    Question,
    TaggedSentence,
    read_conll,
    read_lines,
    read_parallel,
    read_squad,
    read_text,
    read_tsv,
)
from .registry import (
    DATASETS,
    DatasetNotFoundError,
    DatasetSpec,
    conll_examples,
    dataset_file,
    dataset_spec,
    parallel_examples,
    shakespeare_text,
    squad_examples,
    sst2_examples,
    stsb_examples,
)

__all__ = [
    "DATASETS",
    "Answer",
    "DataError",
    "DatasetNotFoundError",
    "DatasetSpec",
    "LabeledText",
    "Question",
    "TaggedSentence",
    "conll_examples",
    "dataset_file",
    "dataset_spec",
    "parallel_examples",
    "read_conll",
    "read_lines",
    "read_parallel",
    "read_squad",
    "read_text",
    "read_tsv",
    "shakespeare_text",
    "squad_examples",
    "sst2_examples",
    "stsb_examples",
]
