"""Speed side by side: our models against ``torch.nn`` and Hugging Face, fp32 on the CPU.

What: seven workloads, each comparing our model with models of the same shape built from
PyTorch's own ``torch.nn`` modules and from Hugging Face ``transformers``, on the same
random inputs, with random weights (translation excepted):

- ``lm-train``: a training step of a decoder-only LM (forward, cross-entropy on the next
  tokens, backward, AdamW step) in two sizes, A (vocab 65, 4 layers, d_model 128, 4 heads,
  d_ff 512, context 64, batch 12) and B (vocab 8192, 6 layers, d_model 384, 6 heads, d_ff
  1536, context 256, batch 8). Ours; a causal ``nn.TransformerEncoder`` LM (``is_causal``);
  ``GPT2LMHeadModel``. All pre-LN, exact GELU, learned positions, tied head, no dropout.
- ``seq2seq-train``: a training step of the paper's encoder-decoder at the size of the
  Multi30k recipe (3 + 3 layers, d_model 256, 8 heads, d_ff 1024, one vocabulary of 8000
  for source, target and output), batch 64 x 24 tokens on each side, no padding, dropout
  0.1 everywhere (embeddings, sub-layers, feed-forward and attention weights, as
  ``nn.Transformer`` has it). Ours; ``nn.Transformer`` (without the final LayerNorms,
  which post-LN does not have); ``MarianMTModel``. All post-LN, ReLU, sinusoidal positions.
- ``generate``: greedy generation, 16-token prompts and 256 new tokens, batch 1 and 8: ours
  with the KV cache against ``GPT2LMHeadModel.generate`` with its cache, the models and
  runs of ``benchmarks/generate.py`` (size B, but GPT-2's GELU-tanh and 512 positions);
  ours through ``CompiledModel`` too (``torch.compile``, frozen autotuned weights), in fp32
  and with int8 weights (``scratchformer.inference.quantize``), variants on lines of their
  own, their warm-ups (which compile) in their notes; at batch 1, llama.cpp too (the same
  model exported to GGUF in f32 and q8_0, through ``llama-cpp-python``).
- ``encoder-infer``: a classification forward in eval mode under ``torch.inference_mode()``
  on 32 sentences of random lengths up to 64, padded to the longest (vocab 8000, 4 layers,
  d_model 256, 4 heads, d_ff 1024, post-LN, learned positions, mean pooling over real
  tokens, 2 classes). Ours with the attention mask; ``nn.TransformerEncoder`` on its fast
  path (``src_key_padding_mask``, nested tensors: padding is skipped).
- ``onnx-infer``: the same forward (and one at the SST-2 MiniLM fine-tune's size, on SST-2
  dev sentences), ours eager and through ``torch.compile`` against ONNX Runtime on the
  graph ``scratchformer export-onnx`` writes of the same model (``workloads/onnx_infer.py``).
- ``translate``: sentences/s translating the 1,000 German sentences of Multi30k
  test_2016_flickr (``$SCRATCHFORMER_DATA/multi30k/test_2016_flickr.de.gz``) with beam 5
  (``TranslationTask.translate``, as ``scratchformer translate`` does), by the
  trained ``multi30k-de-en`` run, or by a random model of that recipe's shape when no run
  is there (hypotheses then run to their length limit); with the KV cache and without it
  (every beam's prefix recomputed each step, timed once); how many translations differ is
  printed. A second row holds ours against ``MarianMTModel.generate(num_beams=5)``, both
  with random weights of that recipe's shape on the same source batches, every hypothesis
  run to 48 tokens; ours also through ``CompiledModel``, in fp32 (which must give the
  eager translations) and with int8 weights.
- ``jobs``: a user's jobs, each as a command in a fresh process, wall seconds: translating
  test_2016_flickr with beam 5, generating 256 tokens, classifying SST-2 dev, by trained
  runs under ``runs/`` (or their recipes trained for a step). Eager (``--no-compile``),
  compiled on a cold Inductor cache, compiled again on the cache that left, and the default
  ("auto", which decides from what those runs measured); ``--verbose``'s account of the
  graphs compiled in the notes (``workloads/jobs.py``).
- ``memory``: the peak resident memory (max RSS: Linux's ``VmHWM``) of training step B
  and of generation at batch 8, each candidate in a fresh process. The figure compared is
  the growth: the peak at the end of the runs minus the peak after imports, model
  construction and inputs (activations, gradients, optimizer state, caches, workspace);
  the total peak is printed beside it. Every child imports the same modules.

Every candidate steps ``torch.optim.AdamW`` with its defaults. Ours computes its loss as
``scratchformer train`` does, from ``labels`` in its forward, without forming the logits
(``scratchformer.nn.linear_cross_entropy``); the others take ``F.cross_entropy`` of their
logits. The training workloads
also time two variants of ours, whose ratios are printed on lines of their own: stepped by
the trainer's optimizer (torch's fused AdamW, what ``scratchformer train`` runs), and
through ``torch.compile`` (what ``train.compile`` does; ``--no-compile`` skips it and the
compiled generation). The first step of every candidate, which for the compiled one
includes compiling, is in its note.

Why: the project claims to be fast on a laptop CPU; these workloads make the claim
testable against the two implementations a user would otherwise pick. The targets, ours /
theirs, printed with each figure as "ok" or "MISSED": lm-train >= 1.25x torch.nn and
>= 1.5x Hugging Face tokens/s (both sizes); seq2seq-train >= 1.3x both; generate >= 3x at
batch 1 and >= 1.5x at batch 8, and with int8 weights compiled >= 2x ours compiled (1.8x
on a CPU without native bf16), >= 5x Hugging Face and >= 1x llama.cpp q8_0 at batch 1,
>= 1.5x ours compiled at batch 8; translation >= 2x
Marian; encoder-infer >= 1.0x; onnx-infer: ours compiled >= 1.0x ONNX Runtime; memory
growth <= both; jobs: the default and a cold compilation take at most the eager time, a
warm compilation at most 1/1.5 of it. LM training step B should also reach 90% of the
matmul peak (bf16's for the bf16 variant, timed on CPUs with native bfloat16).

How: each workload runs in a fresh interpreter of its own, as a user's program would, so
that what one leaves behind in a process (a heap grown by its tensors, compiled code) cannot
make the next faster or slower. (In one process, ``torch.nn`` and Marian ran the encoder-
decoder step faster after the LM workloads than in a fresh process; glibc's mmap threshold
pinned high does much the same for Marian: docs/lab-notes.md.) A workload's candidates share its
process (``--threads`` intra-op threads, 2 by default). After a warm-up, repetitions
alternate the candidates (A, B, C, A, B, C, ...) so that drift in machine speed hits them
alike; the median of each is reported, with its spread (interquartile range / median from 4
samples up, range / median below). Timed runs per candidate: 10 training steps, 20 forwards,
3 generations or translations of the whole set (``--repeats`` sets them all). Every run is
checked to do its work: losses finite, logits of the right shape, every new token generated,
every sentence translated. Every timed row is also held against the machine's limits,
measured at the start of the run (``workloads/machine.py``: the fp32 and bf16 matmul peaks,
the memory copy bandwidth): the achieved GFLOP/s of training, encoder inference and
translation (``workloads/flops.py``), the GB/s of weights and KV cache that decoding reads,
and the fraction of the limit, ``max(GFLOP/s / peak, GB/s / bandwidth)``. For LM B, the
step's own matrix products are also timed alone: no step built of them reaches more of the
peak. GPU figures are not measured here.
``--quick`` keeps the shapes and cuts the repetitions, generates 32 tokens and translates
the first 50 sentences: it checks that everything runs, its figures mean little.

    .venv/bin/python benchmarks/speed.py [--workload NAME ...] [--repeats N] [--threads 2]
        [--json out.json] [--quick] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
import transformers

from scratchformer.data.registry import dataset_file
from workloads.encoder_infer import encoder_infer
from workloads.generation import generation
from workloads.jobs import user_jobs
from workloads.lm_train import lm_train
from workloads.machine import Machine, measure_machine
from workloads.memory import memory, memory_child
from workloads.onnx_infer import onnx_infer
from workloads.report import Row, Settings, print_header, print_summary, write_json
from workloads.seq2seq_train import seq2seq_train
from workloads.translation import translation

WORKLOADS: dict[str, Callable[[Settings], list[Row]]] = {
    "lm-train": lm_train,
    "seq2seq-train": seq2seq_train,
    "generate": generation,
    "encoder-infer": encoder_infer,
    "onnx-infer": onnx_infer,
    "translate": translation,
    "memory": memory,
    "jobs": user_jobs,
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workload",
        action="append",
        choices=list(WORKLOADS),
        help="run only this workload (repeatable; default: all)",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per candidate")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--json", type=Path, default=None, help="also write every row here")
    parser.add_argument("--quick", action="store_true", help="few runs: checks, not figures")
    parser.add_argument("--no-compile", action="store_true", help="skip ours through torch.compile")
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--machine", type=json.loads, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rows-to", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if (args.repeats is not None and args.repeats < 1) or args.threads < 1:
        parser.error("need --repeats >= 1 and --threads >= 1")
    return args


def settings_of(args: argparse.Namespace, machine: Machine | None) -> Settings:
    """The settings of the run (and of each of its children) from the command line."""
    return Settings(args.threads, args.quick, args.repeats, machine, not args.no_compile)


def run_in_child(name: str, args: argparse.Namespace, machine: Machine) -> list[Row]:
    """Run workload ``name`` in a fresh interpreter, which prints its rows; return them."""
    with tempfile.TemporaryDirectory() as directory:
        rows_file = Path(directory) / "rows.pickle"
        command = [sys.executable, __file__, "--workload", name, "--threads", str(args.threads)]
        command += ["--machine", json.dumps(asdict(machine)), "--rows-to", str(rows_file)]
        command += ["--repeats", str(args.repeats)] if args.repeats is not None else []
        command += ["--quick"] * args.quick + ["--no-compile"] * args.no_compile
        sys.stdout.flush()
        if subprocess.run(command).returncode != 0:
            sys.exit(f"the {name} workload failed")
        return pickle.loads(rows_file.read_bytes())


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # GPT-2's default eos id lies outside the vocab
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
    if args.memory_child is not None:
        settings = Settings(args.threads, args.quick, args.repeats)
        print(json.dumps(memory_child(args.memory_child, settings)))
        return
    if args.rows_to is not None:  # a child of the run: one workload
        (name,) = args.workload
        settings = settings_of(args, Machine(**args.machine))
        args.rows_to.write_bytes(pickle.dumps(WORKLOADS[name](settings)))
        return
    workloads = args.workload or list(WORKLOADS)
    if "translate" in workloads:  # fail now, not after the other workloads
        dataset_file("multi30k", "test_2016_flickr", lang="de")
    machine = measure_machine(2 if args.quick else 5)
    settings = settings_of(args, machine)
    print_header(settings, workloads)
    rows = [row for name in workloads for row in run_in_child(name, args, machine)]
    print_summary(rows)
    if args.json is not None:
        write_json(args.json, settings, rows)


if __name__ == "__main__":
    main()
