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
    LabeledTextDataset,
    ParallelDataset,
    QuestionDataset,
    TaggedSentenceDataset,
    TextDataset,
    dataset_file,
    dataset_spec,
)

__all__ = [
    "DATASETS",
    "Answer",
    "DataError",
    "DatasetNotFoundError",
    "DatasetSpec",
    "LabeledText",
    "LabeledTextDataset",
    "ParallelDataset",
    "Question",
    "QuestionDataset",
    "TaggedSentence",
    "TaggedSentenceDataset",
    "TextDataset",
    "dataset_file",
    "dataset_spec",
    "read_conll",
    "read_lines",
    "read_parallel",
    "read_squad",
    "read_text",
    "read_tsv",
]
