"""Encoder models to ONNX, and back as one of ours through ONNX Runtime.

:func:`export_onnx` writes a directory that ONNX Runtime (or any ONNX runtime) uses with no
scratchformer installed::

    model.onnx        the graph and its weights: dynamic batch and sequence axes
    tokenizer.json    the run's tokenizer (Hugging Face ``tokenizers``)
    config.json       the inputs and outputs by name, the task and its labels, the model's
                      settings (its pooling, max_len, ...)

Inputs are ``input_ids`` and ``attention_mask`` (1 at real tokens), and ``token_type_ids``
for models with segment embeddings, all int64 ``(batch, seq)``. Outputs are ``last_hidden_state``
(``(batch, seq, d_model)``, the last hidden states; undefined at padding) and either
``logits`` (the task head's: ``(batch, labels)``, ``(batch, seq, tags)``, ``(batch, seq,
2)`` for answer spans) or, for a similarity (bi-encoder) model, ``sentence_embedding`` (``(batch,
d_model)``: the pooled sentence vector at unit length, whose dot products are the model's
cosines).

:class:`OnnxRuntimeModel` runs an exported directory and answers as an
:class:`~scratchformer.models.EncoderModel` does, so that a task's predictions (the
commands' ``--onnx``) come from ONNX Runtime through the very code that uses our model.
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig, moved_keys
from ..errors import require_extra
from ..io import write_text
from ..models.base import ModelOutput
from ..models.encoder import EncoderModel
from ..models.heads import SimilarityHead, pool

GRAPH, CONFIG, TOKENIZER = "model.onnx", "config.json", "tokenizer.json"
"""The files of an exported directory."""
OPSET = 18
"""The ONNX operator set written: ONNX Runtime 1.16 and later run it."""


class Exportable(nn.Module):
    """An encoder model as the graph sees it: tensors in by position, a tuple out (the
    outputs that :func:`output_names` names)."""

    def __init__(self, model: EncoderModel) -> None:
        super().__init__()
        self.model = model
        self.embeds = isinstance(model.head, SimilarityHead)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None
    ) -> tuple[Tensor, ...]:
        if self.embeds:
            hidden, _ = self.model.encode(input_ids, attention_mask, token_type_ids=token_type_ids)
            vector = F.normalize(pool(hidden, attention_mask, self.model.config.pooling), dim=-1)
            return hidden, vector
        output = self.model(input_ids, attention_mask, token_type_ids=token_type_ids)
        return tuple(t for t in (output.last_hidden_state, output.logits) if t is not None)


def input_names(model: EncoderModel) -> list[str]:
    """The graph's inputs: token type ids only for a model with segment embeddings."""
    names = ["input_ids", "attention_mask"]
    return [*names, "token_type_ids"] if model.config.type_vocab_size else names


def output_names(model: EncoderModel) -> list[str]:
    if isinstance(model.head, SimilarityHead):
        return ["last_hidden_state", "sentence_embedding"]
    return ["last_hidden_state"] if model.head is None else ["last_hidden_state", "logits"]


def export_onnx(
    model: nn.Module, directory: Path, tokenizer_json: str, about: dict[str, Any]
) -> None:
    """Write ``model`` (an :class:`EncoderModel`, moved to float32 on the CPU) as an ONNX graph into
    the existing ``directory``, with ``tokenizer_json`` and a config.json of its inputs,
    outputs and ``about`` (the task, labels, ...)."""
    if not isinstance(model, EncoderModel):
        raise ValueError(
            f"export-onnx exports encoder models; this one is a {type(model).__name__} "
            "(language models: export-gguf)"
        )
    require_extra("onnx", "onnxscript", purpose="export-onnx")
    model = model.float().cpu().eval()
    inputs, outputs = input_names(model), output_names(model)
    example = example_inputs(model)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=model.config.max_len)
    shapes = {name: {0: batch, 1: seq} for name in inputs}
    with quietly(), torch.no_grad():
        torch.onnx.export(
            Exportable(model).eval(),
            tuple(example[name] for name in inputs),
            directory / GRAPH,
            input_names=inputs,
            output_names=outputs,
            dynamic_shapes=shapes,
            opset_version=OPSET,
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    write_text(directory / TOKENIZER, tokenizer_json)
    config = {**about, "inputs": inputs, "outputs": outputs, "model": model.config.to_dict()}
    write_text(directory / CONFIG, json.dumps(config, indent=2) + "\n")


@contextlib.contextmanager
def quietly() -> Iterator[None]:
    """Without the exporter's log lines and warnings about its own internals."""
    log = logging.getLogger("torch.onnx")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)


def example_inputs(model: EncoderModel) -> dict[str, Tensor]:
    """A padded batch of two rows to trace the graph with (lengths 5 and 3)."""
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    ids = torch.arange(1, 11).view(2, 5) % model.config.vocab_size * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


class OnnxRuntimeModel(nn.Module):
    """A directory written by :func:`export_onnx`, run by ONNX Runtime on the CPU, with the
    calls of an :class:`EncoderModel` (``forward`` and ``encode``; its ``config``), so that
    tasks use it as they use ours. Float32 only; no attention weights."""

    def __init__(self, directory: Path, threads: int | None = None) -> None:
        super().__init__()
        require_extra("onnxruntime", purpose="running an ONNX export")
        import onnxruntime  # (imported only when an exported model is run)

        about = read_config(directory)
        self.about = about
        # (an export of an earlier version may hold keys that now live elsewhere)
        model = moved_keys({"model": about["model"]}, str(directory / CONFIG))["model"]
        self.config = ModelConfig.from_dict(model)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.log_severity_level = 3
        # its threads sleep between runs rather than spin, leaving the cores to the rest of
        # the process (torch, a server's event loop)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(
            str(directory / GRAPH), options, providers=["CPUExecutionProvider"]
        )

    @classmethod
    def of_run(cls, directory: Path, task: Any) -> OnnxRuntimeModel:
        """The export in ``directory``, which must be of ``task``'s run (same task, same
        labels, same tokenizer): predictions read through the run's tokenizer and labels."""
        model = cls(directory)
        about, data = model.about, task.data
        if about.get("task") != task.name or about.get("labels") != data.labels:
            raise ValueError(
                f"{directory} holds the export of a {about.get('task')!r} model with labels "
                f"{about.get('labels')}, not of this {task.name!r} run's"
            )
        tokenizer = (directory / TOKENIZER).read_text(encoding="utf-8")
        if tokenizer != task.tokenizer().to_json():
            raise ValueError(f"{directory / TOKENIZER} is not this run's tokenizer")
        return model

    def run(self, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The graph's outputs by name for its inputs by name (absent token types: 0)."""
        ids = inputs["input_ids"]
        feed = {name: inputs.get(name, torch.zeros_like(ids)) for name in self.about["inputs"]}
        arrays = self.session.run(None, {k: v.long().cpu().numpy() for k, v in feed.items()})
        return dict(zip(self.about["outputs"], map(torch.from_numpy, arrays), strict=True))

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        need_weights: bool = False,
        token_type_ids: Tensor | None = None,
        **_: Any,
    ) -> ModelOutput:
        if need_weights:
            raise ValueError("an ONNX model gives no attention weights: use the run itself")
        inputs = {"input_ids": input_ids}
        inputs["attention_mask"] = (
            torch.ones_like(input_ids) if attention_mask is None else attention_mask
        )
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        out = self.run(inputs)
        return ModelOutput(out.get("logits"), out["last_hidden_state"], None, None, None)

    def encode(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        need_weights: bool = False,
        token_type_ids: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        return self.forward(
            input_ids, attention_mask, need_weights, token_type_ids
        ).last_hidden_state, []


def check_destination(directory: Path) -> None:
    """Refuse to replace a directory unless it is empty or an earlier export (whose files
    are all :func:`export_onnx` writes)."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} is a file: --out names a directory to write")
    names = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    if names and not set(names) <= {GRAPH, CONFIG, TOKENIZER}:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise ValueError(f"{directory} is not empty ({shown}) and holds no ONNX export")


def read_config(directory: Path) -> dict[str, Any]:
    """An exported directory's config.json, or an error that says what is missing."""
    for name in (GRAPH, CONFIG):
        if not (directory / name).is_file():
            raise ValueError(f"{directory}: no {name}; is it a directory written by export-onnx?")
    try:
        about = json.loads((directory / CONFIG).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{directory / CONFIG}: not JSON ({error})") from None
    missing = [key for key in ("inputs", "outputs", "model") if key not in about]
    if missing:
        raise ValueError(f"{directory / CONFIG}: missing {', '.join(missing)}")
    return about
