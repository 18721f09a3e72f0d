"""Generation speed: our decoder-only LM with and without the KV cache, and Hugging Face GPT-2.

What: new tokens per second of greedy decoding, 256 new tokens after 16-token prompts, at
batch 1 and batch 8 on the CPU, for these candidates, all of the same shape (GPT-2 small
scaled down: 6 layers, d_model 384, 6 heads, d_ff 1536, vocab 8192, learned positions,
pre-LN, GELU with tanh, head tied to the embedding) with random weights, on the same prompts:
``scratchformer.inference.generate`` with the KV cache; the same without it (the whole
sequence recomputed every step); ours through ``scratchformer.inference.CompiledLM``
(``torch.compile`` with frozen, autotuned weights, the cache on; one per batch size, its
first run compiling); on a CPU with native bfloat16, the same under bfloat16 autocast; the
same with int8 weights (``scratchformer.inference.quantize``: every linear map, the head
included, weight-only int8 with a scale per output row), under bfloat16 autocast where the
CPU has it natively, the form that compiles to an int8 kernel (see
``scratchformer.nn.quantized``); ours and ours with int8 weights through
``scratchformer.inference.exported.ExportedLM`` (the one-token step compiled ahead of time
by AOTInductor: no Dynamo and no Python between its kernels; its first run compiles);
``transformers``' ``GPT2LMHeadModel.generate`` with its
cache; at batch 1, llama.cpp (``llama-cpp-python``, where installed) on the same model
exported by ``export-gguf`` in f32 and in q8_0, with an f32 key/value cache and as many
threads. All fp32 but those. Last, with compiling on, the fixed cost of a token: the
:data:`NARROW` model at batch 1, ours exported against llama.cpp's f32 and q8_0
(``--fixed-cost-only`` times that row alone).
Nothing stops early: ours gets ``eos_id=None``, Hugging Face ``min_new_tokens``, and every
run is checked to have produced all its tokens.

Why: the cache is what makes generation usable, and a from-scratch loop should not be
slower than the library everyone uses: the goal is ours with the cache faster than Hugging
Face at both batch sizes.

How: all candidates live in one process. Each is warmed up with a short generation (the
compiled one compiles then; that time is printed); then repetitions alternate the
candidates (cached, Hugging Face, uncached, cached, ...) so that drift in machine speed
hits them alike, and the median time of each is reported. Uncached decoding at 256 tokens
is slow, so it runs fewer repetitions (``--uncached-repeats``). The compiled candidate
must give the cached one's tokens; the bf16 and int8 ones compute other logits, so their
tokens may differ (the tests hold compiled int8 to the eager int8 model's).

    .venv/bin/python benchmarks/generate.py [--repeats 3] [--uncached-repeats 1]
        [--threads 2] [--new-tokens 256] [--no-compile | --fixed-cost-only]
        [--json results.json]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch
import transformers
from torch import Tensor, nn
from transformers import GPT2Config, GPT2LMHeadModel

from scratchformer import ModelConfig, build_model, count_parameters
from scratchformer.data.tokenizer import Tokenizer
from scratchformer.device import CPU, bf16_autocast, native_bf16
from scratchformer.inference import CompiledLM, generate, quantize
from scratchformer.inference.cache import SPARE
from scratchformer.inference.exported import ExportedLM
from timing import Timing, interleaved, load_warning, timed
from workloads import report

N_LAYERS = 6
D_MODEL = 384
N_HEADS = 6
D_FF = 1536
VOCAB = 8192
MAX_LEN = 512
PROMPT_LEN = 16
BATCHES = (1, 8)
NARROW = 48
"""The width (and ``d_ff``) of the fixed-cost model: the same depth and vocabulary, so little
arithmetic that a token's time is what every token costs whatever the width (the decoding
loop, the step's kernel launches and threads)."""
FIXED_COST_TARGET_MS = 0.25
WARMUP_TOKENS = 16
CACHED, HF, UNCACHED = "ours, KV cache", "Hugging Face", "ours, no cache"
COMPILED, BF16_COMPILED, QUANTIZED = report.COMPILED, report.BF16_COMPILED, report.INT8_COMPILED
EXPORTED, INT8_EXPORTED = report.EXPORTED, report.INT8_EXPORTED
INT8_EXPORTED_FP32 = report.INT8_EXPORTED_FP32
LLAMA_F32, LLAMA_Q8 = report.LLAMA_F32, report.LLAMA_Q8
LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
"""Whether llama.cpp's binding is installed (the export extra): its candidates join batch 1."""
BF16 = native_bf16(CPU)
"""Whether this CPU computes in bfloat16 natively: then the int8 candidate runs under
bfloat16 autocast, and the bf16 one joins."""

Run = Callable[[int], list[list[int]]]
"""Generate that many new tokens after every prompt of the batch; return them."""


@dataclass(frozen=True)
class Config:
    new_tokens: int
    repeats: int
    uncached_repeats: int
    threads: int
    compile: bool = True
    prompt_len: int = PROMPT_LEN
    batches: tuple[int, ...] = BATCHES


@dataclass(frozen=True)
class Candidate:
    name: str
    run: Run
    repeats: int


@dataclass(frozen=True)
class Result:
    """Timed runs of one candidate at one batch size; the last returned its tokens.
    ``warmup_s``: its untimed first run (for the compiled one, compiling included)."""

    candidate: str
    batch: int
    new_tokens: int
    timing: Timing
    warmup_s: float

    @property
    def samples_s(self) -> list[float]:
        return self.timing.samples_s

    @property
    def median_s(self) -> float:
        return self.timing.median_s

    @property
    def tokens(self) -> list[list[int]]:
        return self.timing.last

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.new_tokens / self.median_s

    @property
    def spread(self) -> float:
        """Range of the samples relative to their median: how noisy they are."""
        return self.timing.range_spread

    def to_json(self) -> dict[str, object]:
        return {
            "candidate": self.candidate,
            "batch": self.batch,
            "median_s": self.median_s,
            "tokens_per_s": self.tokens_per_s,
            "samples_s": self.samples_s,
            "warmup_s": self.warmup_s,
        }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs: cached and HF")
    parser.add_argument(
        "--uncached-repeats", type=int, default=1, help="timed runs of ours without the cache"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens generated a prompt")
    parser.add_argument(
        "--no-compile", action="store_true", help="leave out ours through torch.compile"
    )
    parser.add_argument(
        "--fixed-cost-only",
        action="store_true",
        help="time only the fixed cost a token (the narrow model, batch 1, exported)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args()
    if args.fixed_cost_only and args.no_compile:
        parser.error("--fixed-cost-only times the exported step: drop --no-compile")
    if args.repeats < 1 or args.uncached_repeats < 0 or args.threads < 1:
        parser.error("need --repeats >= 1, --uncached-repeats >= 0 and --threads >= 1")
    if not 1 <= args.new_tokens <= MAX_LEN - PROMPT_LEN:
        parser.error(f"--new-tokens must be in 1..{MAX_LEN - PROMPT_LEN} (positions: {MAX_LEN})")
    return args


def our_model(width: int = D_MODEL, d_ff: int = D_FF) -> nn.Module:
    """Our decoder-only LM in the GPT-2 layout (no sqrt(d_model) embedding scale)."""
    config = ModelConfig(
        arch="decoder",
        vocab_size=VOCAB,
        d_model=width,
        n_heads=N_HEADS,
        n_layers=N_LAYERS,
        d_ff=d_ff,
        activation="gelu_tanh",
        norm_first=True,
        positional="learned",
        max_len=MAX_LEN,
        scale_embedding=False,
        tie_output=True,
    )
    return build_model(config).eval()


def hf_model() -> GPT2LMHeadModel:
    """Hugging Face GPT-2 of the same shape (its defaults: GELU tanh, tied head, pre-LN)."""
    config = GPT2Config(
        n_layer=N_LAYERS,
        n_embd=D_MODEL,
        n_head=N_HEADS,
        n_inner=D_FF,
        vocab_size=VOCAB,
        n_positions=MAX_LEN,
    )
    return GPT2LMHeadModel(config).eval()


def ours(model: nn.Module, prompts: Tensor, use_cache: bool = True, bf16: bool = False) -> Run:
    """Our greedy generation, under bfloat16 autocast if ``bf16``."""
    as_lists = prompts.tolist()

    def run(new_tokens: int) -> list[list[int]]:
        with bf16_autocast(CPU, bf16):
            return generate(
                model,
                as_lists,
                max_new_tokens=new_tokens,
                greedy=True,
                eos_id=None,
                use_cache=use_cache,
            )

    return run


def exported(model: nn.Module, prompts: Tensor, new_tokens: int, bf16: bool = False) -> Run:
    """Ours through an ``ExportedLM`` of the prompts' rows and a cache for ``new_tokens``
    after them, made by the first run (which therefore compiles, as the warm-up)."""
    made: list[Run] = []

    def run(tokens: int) -> list[list[int]]:
        if not made:
            context = prompts.shape[1] + new_tokens + SPARE
            made.append(ours(ExportedLM(model, len(prompts), context, bf16), prompts, bf16=bf16))
        return made[0](tokens)

    return run


def hugging_face(model: GPT2LMHeadModel, prompts: Tensor) -> Run:
    mask = torch.ones_like(prompts)

    def run(new_tokens: int) -> list[list[int]]:
        out = model.generate(
            prompts,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            use_cache=True,
            pad_token_id=0,
        )
        return out[:, prompts.shape[1] :].tolist()

    return run


def llama_cpp(path: Path, prompts: Tensor, threads: int) -> Run:
    """Greedy decoding in llama.cpp (``llama-cpp-python``) of the GGUF file at ``path``, one
    prompt (batch 1), ``threads`` threads, an f32 key/value cache; every run starts from an
    empty cache."""
    from llama_cpp import GGML_TYPE_F32, Llama

    (prompt,) = prompts.tolist()
    llama = Llama(
        model_path=str(path),
        n_ctx=MAX_LEN,
        n_batch=PROMPT_LEN,
        n_threads=threads,
        n_threads_batch=threads,
        type_k=GGML_TYPE_F32,  # the key/value cache in f32, as ours
        type_v=GGML_TYPE_F32,
        verbose=False,
    )

    def run(new_tokens: int) -> list[list[int]]:
        llama.reset()  # (else the prompt is found in the cache and not read again)
        tokens = []
        for token in llama.generate(prompt, temp=0.0, repeat_penalty=1.0, reset=True):
            tokens.append(token)
            if len(tokens) == new_tokens:
                return [tokens]
        raise AssertionError("llama.cpp's generate stopped")  # (it never stops by itself)

    return run


def gguf_files(model: nn.Module, directory: Path) -> dict[str, Path]:
    """``model`` exported as llama.cpp reads it (``scratchformer export-gguf``), in f32 and
    q8_0, by candidate. The file needs a tokenizer: one trained on a few words, whose
    tokens the model's vocabulary pads out (the benchmark feeds token ids, never text)."""
    from scratchformer.interop.gguf import save_gguf

    words = " ".join(f"word{i}" for i in range(2000))
    tokenizer = Tokenizer.train("bpe", [words], 512, ("unk", "eos"))
    files = {LLAMA_F32: directory / "f32.gguf", LLAMA_Q8: directory / "q8_0.gguf"}
    for candidate, path in files.items():
        save_gguf(model, tokenizer, path, "f32" if candidate == LLAMA_F32 else "q8_0", "bench")
    return files


def checked_run(candidate: Candidate, new_tokens: int, batch: int) -> list[list[int]]:
    """Run ``candidate``; raise unless every row got all ``new_tokens`` (an early stop would
    make the timing meaningless)."""
    tokens = candidate.run(new_tokens)
    if len(tokens) != batch or any(len(row) != new_tokens for row in tokens):
        lengths = [len(row) for row in tokens]
        raise RuntimeError(f"{candidate.name}: expected {new_tokens} new tokens, got {lengths}")
    return tokens


def interleaved_results(candidates: list[Candidate], cfg: Config, batch: int) -> list[Result]:
    """Per-candidate timings: a short warm-up of each (timed once), then runs in turn, each
    candidate until it has its own number of repetitions."""
    warmups = [timed(partial(checked_run, c, WARMUP_TOKENS, batch))[0] for c in candidates]
    timings = interleaved(
        [partial(checked_run, c, cfg.new_tokens, batch) for c in candidates],
        [c.repeats for c in candidates],
    )
    return [
        Result(c.name, batch, cfg.new_tokens, timing, warmup_s)
        for c, timing, warmup_s in zip(candidates, timings, warmups, strict=True)
    ]


def run_batch(cfg: Config, batch: int, mine: nn.Module, theirs: GPT2LMHeadModel) -> list[Result]:
    """The results of every candidate at ``batch``, all on the same random prompts; ours
    compiled afresh for this batch size (with ``cfg.compile``), which must give the cached
    candidate's tokens: compiling must not change the result."""
    seeded = torch.Generator().manual_seed(batch)
    prompts = torch.randint(1, VOCAB, (batch, cfg.prompt_len), generator=seeded)
    candidates = [
        Candidate(CACHED, ours(mine, prompts), cfg.repeats),
        Candidate(HF, hugging_face(theirs, prompts), cfg.repeats),
        Candidate(UNCACHED, ours(mine, prompts, use_cache=False), cfg.uncached_repeats),
    ]
    if cfg.compile:
        int8 = quantize(copy.deepcopy(mine))
        candidates[1:1] = [
            Candidate(EXPORTED, exported(mine, prompts, cfg.new_tokens), cfg.repeats),
            Candidate(
                INT8_EXPORTED, exported(int8, prompts, cfg.new_tokens, bf16=BF16), cfg.repeats
            ),
            Candidate(
                INT8_EXPORTED_FP32,
                exported(int8, prompts, cfg.new_tokens),
                cfg.repeats if BF16 else 0,
            ),
            Candidate(COMPILED, ours(CompiledLM(mine), prompts), cfg.repeats),
            Candidate(
                BF16_COMPILED,
                ours(CompiledLM(mine), prompts, bf16=True),
                cfg.repeats if BF16 else 0,
            ),
            Candidate(QUANTIZED, ours(CompiledLM(int8), prompts, bf16=BF16), cfg.repeats),
        ]
    with tempfile.TemporaryDirectory() as directory:
        if batch == 1 and LLAMA_CPP:
            files = gguf_files(mine, Path(directory))
            candidates += [
                Candidate(name, llama_cpp(path, prompts, cfg.threads), cfg.repeats)
                for name, path in files.items()
            ]
        results = interleaved_results([c for c in candidates if c.repeats], cfg, batch)
    by_name = {r.candidate: r for r in results}
    for name in (COMPILED, EXPORTED):
        if name in by_name and by_name[name].tokens != by_name[CACHED].tokens:
            raise RuntimeError(f"{name} gave other tokens than {CACHED}")
    return results


def fixed_costs(cfg: Config) -> list[Result]:
    """The time a token at batch 1 of the :data:`NARROW` model: ours through the exported
    step (the decoding engine's fastest path), and llama.cpp's f32 and q8_0 where it is
    installed."""
    narrow = our_model(NARROW, NARROW)
    seeded = torch.Generator().manual_seed(0)
    prompts = torch.randint(1, VOCAB, (1, cfg.prompt_len), generator=seeded)
    candidates = [Candidate(EXPORTED, exported(narrow, prompts, cfg.new_tokens), cfg.repeats)]
    with tempfile.TemporaryDirectory() as directory:
        if LLAMA_CPP:
            files = gguf_files(narrow, Path(directory))
            candidates += [
                Candidate(name, llama_cpp(path, prompts, cfg.threads), cfg.repeats)
                for name, path in files.items()
            ]
        return interleaved_results(candidates, cfg, 1)


def print_fixed_costs(results: list[Result]) -> None:
    costs = ", ".join(f"{r.candidate} {r.median_s / r.new_tokens * 1000:.3f} ms" for r in results)
    ours = results[0].median_s / results[0].new_tokens * 1000
    verdict = "met" if ours <= FIXED_COST_TARGET_MS else "missed"
    print(
        f"fixed cost a token ({N_LAYERS} layers, {NARROW} wide, batch 1): {costs} "
        f"(target for ours <= {FIXED_COST_TARGET_MS} ms: {verdict})"
    )


def comparison(results: list[Result]) -> dict[str, object]:
    """Speed-ups of ours with the cache (other's time / ours), whether it beats Hugging
    Face, how many rows greedy decoding gave the same tokens with and without cache, and
    the compiled candidate's speed-up over Hugging Face."""
    by_name = {r.candidate: r for r in results}
    cached = by_name[CACHED]
    summary: dict[str, object] = {"speedup_vs_hf": by_name[HF].median_s / cached.median_s}
    summary["beats_hf"] = summary["speedup_vs_hf"] > 1
    if UNCACHED in by_name:
        uncached = by_name[UNCACHED]
        summary["speedup_vs_uncached"] = uncached.median_s / cached.median_s
        summary["rows_same_as_uncached"] = sum(
            a == b for a, b in zip(cached.tokens, uncached.tokens, strict=True)
        )
    if COMPILED in by_name:
        compiled = by_name[COMPILED]
        summary["compiled_speedup_vs_hf"] = by_name[HF].median_s / compiled.median_s
        summary["compile_warmup_s"] = compiled.warmup_s
    if BF16_COMPILED in by_name:
        summary["bf16_speedup_vs_compiled"] = (
            by_name[COMPILED].median_s / by_name[BF16_COMPILED].median_s
        )
    if QUANTIZED in by_name:
        summary["int8_speedup_vs_compiled"] = (
            by_name[COMPILED].median_s / by_name[QUANTIZED].median_s
        )
        summary["int8_speedup_vs_hf"] = by_name[HF].median_s / by_name[QUANTIZED].median_s
    exported_forms = (
        (EXPORTED, "exported"),
        (INT8_EXPORTED, "int8_exported"),
        (INT8_EXPORTED_FP32, "int8_exported_fp32"),
    )
    for name, key in exported_forms:
        if name in by_name:
            summary[f"{key}_speedup_vs_compiled"] = (
                by_name[COMPILED].median_s / by_name[name].median_s
            )
    return summary


def print_header(cfg: Config, mine: nn.Module, theirs: GPT2LMHeadModel) -> None:
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads, CPU{' with native bf16' if BF16 else ''}, eval mode, "
        "greedy"
    )
    print(
        f"model: {N_LAYERS} layers, d_model {D_MODEL}, {N_HEADS} heads, d_ff {D_FF}, "
        f"vocab {VOCAB}, learned positions ({MAX_LEN}), pre-LN, GELU tanh, tied head, "
        f"random weights; parameters: ours {count_parameters(mine):,}, "
        f"HF {count_parameters(theirs):,} (attention: {theirs.config._attn_implementation})"
    )
    print(
        f"prompt {cfg.prompt_len} tokens, {cfg.new_tokens} new tokens a row, never stopped "
        f"early (ours eos_id=None, HF min_new_tokens); warm-up {WARMUP_TOKENS} tokens each"
        f"{' (compiling ours, compiled)' if cfg.compile else ''}; "
        f"median of {cfg.repeats} interleaved runs, ours without cache {cfg.uncached_repeats}"
    )
    warning = load_warning()
    if warning is not None:
        print(warning)
    print()
    columns = f"{'candidate':<20} {'runs':>4} {'median s':>9} {'new tok/s':>10} {'spread':>7}"
    print(f"{'batch':>5}  {columns}")


def print_batch(results: list[Result], summary: dict[str, object]) -> None:
    for r in results:
        spread = f"{r.spread:>7.1%}" if len(r.samples_s) > 1 else f"{'-':>7}"
        print(
            f"{r.batch:>5}  {r.candidate:<20} {len(r.samples_s):>4} {r.median_s:>9.3f} "
            f"{r.tokens_per_s:>10.1f} {spread}"
        )
    verdict = "ok" if summary["beats_hf"] else "MISSED"
    line = f"{'':>5}  ours with cache vs HF: {summary['speedup_vs_hf']:.2f}x (goal > 1: {verdict})"
    if "compiled_speedup_vs_hf" in summary:
        line += (
            f"; compiled vs HF: {summary['compiled_speedup_vs_hf']:.2f}x, the same tokens, "
            f"its warm-up (compiling) {summary['compile_warmup_s']:.1f} s"
        )
    if "bf16_speedup_vs_compiled" in summary:
        line += f"; bf16 compiled vs compiled: {summary['bf16_speedup_vs_compiled']:.2f}x"
    if "int8_speedup_vs_compiled" in summary:
        line += (
            f"; int8 compiled vs compiled: {summary['int8_speedup_vs_compiled']:.2f}x, "
            f"vs HF: {summary['int8_speedup_vs_hf']:.2f}x"
        )
    for key in ("exported", "int8_exported"):
        if f"{key}_speedup_vs_compiled" in summary:
            name = key.replace("_", " ")
            line += f"; {name} vs compiled: {summary[f'{key}_speedup_vs_compiled']:.2f}x"
    if "speedup_vs_uncached" in summary:
        line += (
            f"; vs ours without cache: {summary['speedup_vs_uncached']:.1f}x, same tokens in "
            f"{summary['rows_same_as_uncached']}/{results[0].batch} rows"
        )
    print(line)


def write_json(
    path: Path, cfg: Config, batches: list[tuple[list[Result], dict]], fixed: list[Result]
) -> None:
    result = {
        "fixed_cost_ms": {r.candidate: r.median_s / r.new_tokens * 1000 for r in fixed},
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "config": asdict(cfg),
        "batches": [
            {"results": [r.to_json() for r in results], **summary} for results, summary in batches
        ],
    }
    path.write_text(json.dumps(result, indent=2) + "\n")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # GPT-2's default eos id lies outside VOCAB
    cfg = Config(
        args.new_tokens, args.repeats, args.uncached_repeats, args.threads, not args.no_compile
    )
    torch.manual_seed(0)
    mine, theirs = our_model(), hf_model()
    print_header(cfg, mine, theirs)
    batches = []
    for batch in () if args.fixed_cost_only else cfg.batches:
        results = run_batch(cfg, batch, mine, theirs)
        batches.append((results, comparison(results)))
        print_batch(*batches[-1])
    if batches and not all(summary["beats_hf"] for _, summary in batches):
        print("goal missed: ours with the cache is not faster than Hugging Face at every batch")
    fixed = fixed_costs(cfg) if cfg.compile else []
    if fixed:
        print_fixed_costs(fixed)
    if args.json is not None:
        write_json(args.json, cfg, batches, fixed)


if __name__ == "__main__":
    main()
