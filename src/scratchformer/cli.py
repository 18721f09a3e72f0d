"""The ``scratchformer`` command: a table of subcommands, each with its arguments and the
function that runs it (in :mod:`scratchformer.commands`, imported only when it runs).

User errors (bad arguments, missing or malformed files, bad recipe keys or values) are
reported as one line on stderr with exit status 2 and no traceback; ``--debug`` shows it.
Any other exception is a defect of ours: one line saying so, exit status 1 (and the
traceback under ``--debug``).
``--debug``, ``--quiet`` and ``--device`` may come before or after the subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from .caches import compiled_code_dir
from .config import (
    ATTENTION_KINDS,
    CHAT_SOURCES,
    DEVICES,
    GGUF_TYPES,
    PRECISIONS,
    QUANTIZATIONS,
)
from .errors import Interrupted, TrainingError
from .interop.families import FAMILIES, family_names
from .predictions import BEAM_SIZE, PREDICTIONS, Option, Prediction
from .version import __version__


@dataclass(frozen=True)
class Argument:
    """One ``add_argument`` call; arguments sharing an ``exclusive`` name are alternatives."""

    flags: tuple[str, ...]
    options: dict[str, Any]
    exclusive: str | None = None


def arg(*flags: str, exclusive: str | None = None, **options: Any) -> Argument:
    return Argument(flags, options, exclusive)


def bounded(
    kind: type[int] | type[float],
    low: float,
    *,
    above: bool = False,
    high: float = math.inf,
) -> Callable[[str], int | float]:
    """An argparse type: a finite ``kind`` at least ``low`` (or ``above`` it) and at most
    ``high``; anything else is the usage error that names the option."""
    bound = f"> {low:g}" if above else f">= {low:g}"
    wanted = f"{'an integer' if kind is int else 'a number'} {bound}"
    if high < math.inf:
        wanted += f" and <= {high:g}"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if not (
            math.isfinite(value) and (value > low if above else value >= low) and value <= high
        ):
            raise argparse.ArgumentTypeError(f"{text} is not {wanted}")
        return value

    return parse


def path(text: str) -> str:
    """An argparse type: a path, which the empty text is not (it would be ``.``)."""
    if not text:
        raise argparse.ArgumentTypeError("'' is no path")
    return text


POSITIVE_INT = bounded(int, 1)
COUNT = bounded(int, 0)
PICTURE_SIDE = 4096
"""The most cells a picture has along a side: more would not show, only fill memory."""


@dataclass(frozen=True)
class Command:
    """A subcommand: its help, its arguments, and ``module:function`` in
    :mod:`scratchformer.commands` that runs it."""

    name: str
    runs: str
    help: str
    arguments: tuple[Argument, ...] = ()
    description: str | None = None

    def handler(self) -> Callable[[argparse.Namespace], int]:
        module, function = self.runs.split(":")
        return getattr(importlib.import_module(f"scratchformer.commands.{module}"), function)


def settings(help: str) -> Argument:
    """``--set SECTION.KEY=VALUE``, repeatable: recipe settings given on the command line."""
    return arg("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help=help)


def option_argument(option: Option) -> Argument:
    """A prediction's option on the command line: a flag, texts given one a flag, or a
    value of its type within its bounds."""
    flag = option.flag or "--" + option.name.replace("_", "-")
    named = {"dest": option.name, "help": option.help}
    if option.type is bool:
        return arg(flag, action="store_true", **named)
    named["metavar"] = option.metavar or flag[2:].replace("-", "_").upper()
    if option.repeated:
        return arg(flag, action="append", default=[], **named)
    kind: Callable[[str], Any] = option.type
    if option.low is not None:
        high = math.inf if option.high is None else option.high
        kind = bounded(option.type, option.low, above=option.above, high=high)
    return arg(flag, type=kind, default=option.default, **named)


RUN = arg("run", type=path, help="run directory")
PROMPT = arg("--prompt", required=True, help="the text to continue")
OUT_RUN = arg("--out", required=True, type=path, help="run directory to write, e.g. runs/NAME")
QUANTIZE = arg(
    "--quantize",
    choices=QUANTIZATIONS,
    help="quantize the model's linear maps once loaded: int8 weights with a scale per output "
    "channel (a quarter of the weights' bytes). In fp32 on an x86 CPU, each input row is "
    "quantized too and multiplied in int8 (by a kernel built once, the first time)",
)
PRECISION = arg(
    "--precision",
    choices=PRECISIONS,
    default="fp32",
    help="fp32 (default); bf16: bfloat16 autocast, the matrix products in bfloat16; auto: "
    "bf16 where the device computes in it natively. With --quantize int8 and --compile, bf16 "
    "products read the int8 weights directly",
)
ONNX = arg(
    "--onnx",
    type=path,
    metavar="DIR",
    help="run the model that export-onnx wrote to DIR through ONNX Runtime, in place of the "
    "run's own (the run gives the tokenizer and labels)",
)
COMPILE = (
    arg(
        "--compile",
        dest="compile",
        action="store_const",
        const="always",
        default="auto",
        exclusive="compile",
        help="run the model through torch.compile, even for a small job: minutes to compile "
        "the first time on a machine, seconds to trace once the code is cached in "
        "~/.cache/scratchformer/inductor/<cpu> (with --quantize: minutes every time), then faster "
        "steps; needs a C++ compiler on the CPU. generate on the CPU compiles its decoding step "
        "ahead of time (AOTInductor) instead: a minute or less once for each model and "
        "precision, kept there, then seconds to load, and the fastest steps. By default it "
        "compiles only when the job repays that on this machine, as measured by earlier runs "
        "(--verbose says why)",
    ),
    NO_COMPILE := arg(
        "--no-compile",
        dest="compile",
        action="store_const",
        const="never",
        exclusive="compile",
        help="never compile: run the model eagerly",
    ),
)
OVERWRITE_HELP = (
    "replace the run directory in --out: delete its run files (recipe, tokenizers, weights, "
    "checkpoints, metrics), refusing if it holds anything else"
)

COMMANDS = (
    Command(
        "train",
        "training:train",
        "train a model from a TOML recipe",
        (
            arg("recipe", type=path, help="recipe file (TOML), e.g. recipes/shakespeare-char.toml"),
            OUT_RUN,
            settings("override a recipe setting (repeatable), e.g. train.max_steps=200"),
            arg(
                "--resume",
                action="store_true",
                help="continue the run in --out from its last checkpoint",
            ),
            arg("--overwrite", action="store_true", help=OVERWRITE_HELP),
        ),
        description="--out must be new or empty: a run already there is continued with "
        "--resume or replaced with --overwrite, and anything else is left alone. One process "
        "trains in a directory at a time. SIGTERM or Ctrl-C stops after the step in progress, "
        "keeping a checkpoint of it (exit status 143 or 130); --resume continues from there.",
    ),
    Command(
        "merge",
        "training:merge",
        "fold a LoRA run's adapters into its weights",
        (arg("run", type=path, help="run directory of a LoRA run (train.lora_rank set)"), OUT_RUN),
        description="--out becomes an ordinary run directory (new or empty; anything there "
        "is refused): the recipe with train.lora_rank unset, the tokenizers, and the weights "
        "W + B A * lora_alpha / lora_rank in full, for eval, classify, export-hf and the rest.",
    ),
    Command(
        "quantize",
        "training:quantize",
        "write a run's model with int8 weights",
        (
            RUN,
            OUT_RUN,
            arg(
                "--quantize",
                choices=QUANTIZATIONS,
                default=QUANTIZATIONS[0],
                help="int8: every linear map's weights in int8, a float32 scale per output channel",
            ),
        ),
        description="--out becomes a run directory (new or empty; anything there is refused) "
        "whose model.safetensors holds every linear map's weight in int8 beside its scales "
        "(one per output channel), its header naming the quantization: eval, generate, "
        "translate and the rest open it quantized. A LoRA run's adapters are merged first.",
    ),
    Command(
        "eval",
        "predict:evaluate",
        "print a trained model's metrics as JSON",
        (
            RUN,
            arg(
                "--split",
                default="val",
                choices=("train", "val", "test"),
                exclusive="source",
                help="val (default), test or train",
            ),
            arg(
                "--data",
                type=path,
                exclusive="source",
                help="a file in the task's format (translation: SRC,TGT)",
            ),
            option_argument(replace(BEAM_SIZE, help="translation: beam size for BLEU")),
            QUANTIZE,
            PRECISION,
        ),
    ),
    Command(
        "serve",
        "serve:serve",
        "serve a run over HTTP: OpenAI's API for language models, task endpoints for the rest",
        (
            arg("run", type=path, help="run directory"),
            arg(
                "--host",
                default="127.0.0.1",
                help="address to listen on (default: this machine only)",
            ),
            arg(
                "--port",
                type=bounded(int, 0, high=65535),
                default=8000,
                help="port (0: any free one)",
            ),
            arg(
                "--api-key",
                default=None,
                help="require 'Authorization: Bearer KEY' (default: none)",
            ),
            arg(
                "--max-batch",
                type=POSITIVE_INT,
                default=8,
                help="requests decoded together, or inputs run in one call",
            ),
            arg(
                "--max-queue",
                type=POSITIVE_INT,
                default=64,
                help="requests (decoding) or inputs that may wait; more get 429",
            ),
            arg(
                "--context",
                type=POSITIVE_INT,
                default=None,
                help="positions a request may use, prompt and new tokens (default: the "
                "model's max_len, at most 2048)",
            ),
            arg(
                "--prefix-cache",
                type=COUNT,
                default=8192,
                metavar="TOKENS",
                help="tokens of recent prompts whose keys and values are kept, so that a "
                "prompt that begins alike (a system prompt, few-shot examples) computes only "
                "the rest (0: off)",
            ),
            arg(
                "--timeout",
                type=bounded(float, 0, above=True),
                default=300.0,
                help="seconds before an unanswered request gets 504",
            ),
            arg(
                "--compile",
                dest="compile",
                action="store_const",
                const="always",
                default="auto",
                exclusive="compile",
                help="run the model through torch.compile, compiled before serving (a minute "
                "or more), then faster steps; needs a C++ compiler on the CPU. By default it "
                "compiles only when the last server of this run here did work enough to "
                "repay that",
            ),
            NO_COMPILE,
            QUANTIZE,
            PRECISION,
        ),
        description="Endpoints by the run's task: /v1/completions and /v1/chat/completions "
        "(with a chat_template.jinja in the run directory) for language models, with "
        "continuous batching; /v1/embeddings for similarity, classification and regression "
        f"runs; {', '.join(p.endpoint for p in PREDICTIONS.values() if p.endpoint)} for the "
        "others; and for "
        "every run GET /v1/models, /health, /metrics (Prometheus) and / (a page to try it). "
        "SIGTERM or Ctrl-C finishes the requests in flight, then stops.",
    ),
    Command(
        "import-hf",
        "hf:import_checkpoint",
        "make a run directory from a Hugging Face checkpoint "
        f"({family_names('encoder')}, {family_names('decoder')}, {family_names('seq2seq')})",
        (
            arg("hf_dir", type=path, help="Hugging Face checkpoint directory"),
            OUT_RUN,
            settings(
                "a data or train setting of the run (repeatable), e.g. "
                "data.translation.source_prefix='translate English to German: '"
            ),
        ),
        description="HF_DIR holds config.json, model.safetensors (or the shards of "
        "model.safetensors.index.json, or pytorch_model.bin) and tokenizer.json. A causal LM "
        f"({family_names('decoder')}) becomes a language-model run, ready for generate; a "
        "T5ForConditionalGeneration a translation run, ready for translate (its decoder "
        "starts from decoder_start_token_id); a "
        "BertForQuestionAnswering a qa run, ready for answer; a BertForMaskedLM an mlm run, "
        f"ready for fill-mask; another encoder ({family_names('encoder')}) a classification "
        "run awaiting a fine-tune.",
    ),
    Command(
        "export-hf",
        "hf:export_checkpoint",
        f"write a run's model as a Hugging Face checkpoint ({family_names()})",
        (
            RUN,
            arg(
                "--out", required=True, type=path, help="Hugging Face checkpoint directory to write"
            ),
        ),
        description="The model is written as the first family it fits: "
        + ", ".join(f"{family.name} ({family.summary})" for family in FAMILIES.values())
        + ". Others fail naming what differs. transformers.AutoModel(ForCausalLM, "
        "ForMaskedLM, ForQuestionAnswering, ForSeq2SeqLM).from_pretrained(HF_DIR) loads the "
        "result; the run's chat template, if it has one, is tokenizer_config.json's "
        "chat_template. HF_DIR may not be a run directory.",
    ),
    Command(
        "export-onnx",
        "export:export_onnx_graph",
        "write an encoder run's model as an ONNX graph, for ONNX Runtime",
        (
            RUN,
            arg("--out", required=True, type=path, help="directory to write: model.onnx and more"),
        ),
        description="DIR gets model.onnx (dynamic batch and sequence axes; inputs input_ids, "
        "attention_mask and, with segment embeddings, token_type_ids; outputs last_hidden_state "
        "and the task's logits, or a similarity model's unit-length sentence_embedding), the run's "
        "tokenizer.json, and a config.json naming them, with the labels. classify, tag and "
        "answer run it with --onnx DIR. DIR must be new, empty or an earlier export.",
    ),
    Command(
        "export-peft",
        "hf:export_adapter",
        "write a LoRA run's adapters for Hugging Face PEFT",
        (
            arg("run", type=path, help="run directory of a LoRA run (train.lora_rank set)"),
            arg("--out", required=True, type=path, help="adapter directory to write"),
        ),
        description="--out receives adapter_config.json and adapter_model.safetensors, which "
        "peft.PeftModel.from_pretrained(base, OUT) loads onto base, the Hugging Face model of "
        "the run's train.init_from. A task head is not part of that model and is left out, as "
        "are adapters of maps the checkpoint stores transposed (GPT-2's Conv1D: refused). A "
        "run without LoRA adapters or without train.init_from is refused.",
    ),
    Command(
        "export-gguf",
        "export:export_gguf_file",
        "write a language model run as a GGUF file, for llama.cpp",
        (
            arg(
                "run",
                type=path,
                help="run directory of a language model (task lm, sft or dpo, byte-level BPE)",
            ),
            arg("--out", required=True, type=path, help="the .gguf file to write"),
            arg(
                "--type",
                choices=GGUF_TYPES,
                default="f16",
                help="the weight matrices' type: f32, f16 (default) or q8_0 (int8 blocks of "
                "32 with a float16 scale); vectors and norms stay f32",
            ),
        ),
        description="The model becomes llama.cpp's gpt2 (LayerNorm, learned or sinusoidal "
        "positions, GELU's tanh approximation) or llama (RMSNorm, rotary positions, SwiGLU, "
        "grouped-query attention), the tokenizer its gpt2 byte-level BPE. Refused, in one line "
        "naming the field: encoders and encoder-decoders, char and wordpiece tokenizers "
        "(train with data.tokenizer=bpe), int8 runs (export the run they were quantized "
        "from), and settings llama.cpp does not compute as ours (post-LN, rotary with "
        "LayerNorm, GELU's erf form, ALiBi, T5's relative positions, sliding windows). A LoRA "
        "run's adapters are merged first; the run's chat template, if it has one, is "
        "tokenizer.chat_template. llama_cpp.Llama(FILE) loads the result.",
    ),
    Command(
        "attention",
        "pictures:attention",
        "draw what a trained model attends to in a text",
        (
            RUN,
            arg("text", help="the input text (for translation: the source sentence)"),
            arg("--target", help="translation: the output to show (default: greedy)"),
            arg(
                "--kind",
                choices=ATTENTION_KINDS,
                help="which attention to draw (default: cross for translation, else the only one)",
            ),
            arg("--layer", type=COUNT, help="only this layer (0-based)"),
            arg("--head", type=COUNT, help="only this head (0-based)"),
            arg(
                "--out", required=True, type=path, help="attn.png, attn.svg, attn.pdf or attn.html"
            ),
        ),
        description="A PNG (or SVG, PDF) grid of heatmaps, layers x heads, of one kind of "
        "attention, or with --out *.html one self-contained page to explore every kind, layer "
        "and head interactively. A translation model is shown its own greedy translation "
        "unless --target gives one; a sentence-pair model reads 'first<TAB>second'. Inputs "
        "longer than the model's limit are cut to it; long ones get thinned labels.",
    ),
    Command(
        "plot",
        "pictures:plot",
        "draw a run's training curves",
        (
            arg("run", type=path, help="run directory (reads its metrics.jsonl)"),
            arg("--out", required=True, type=path, help="curves.png (or .svg, .pdf)"),
        ),
    ),
    Command(
        "plot-pe",
        "pictures:plot_positional",
        "draw the sinusoidal positional encoding",
        (
            arg(
                "--d-model",
                type=bounded(int, 1, high=PICTURE_SIDE),
                default=128,
                help=f"width of the encoding (at most {PICTURE_SIDE})",
            ),
            arg(
                "--length",
                type=bounded(int, 1, high=PICTURE_SIDE),
                default=100,
                help=f"number of positions (at most {PICTURE_SIDE})",
            ),
            arg("--out", required=True, type=path, help="pe.png (or .svg, .pdf)"),
        ),
    ),
    Command(
        "demo",
        "demo:demo",
        "train a tiny model on a synthetic task, no data needed",
        (
            arg("--out", default="runs/demo", type=path, help="run directory (default: runs/demo)"),
            arg("--overwrite", action="store_true", help=OVERWRITE_HELP),
        ),
    ),
    Command(
        "make-chat-data",
        "data:make_chat_data",
        "make chat fine-tuning and preference data from the named datasets' training splits",
        (
            arg("--out", required=True, type=path, help="directory to write the four files into"),
            arg(
                "--per-source",
                type=POSITIVE_INT,
                default=2000,
                metavar="N",
                help="conversations to train on from each dataset, at most (default: 2000)",
            ),
            arg(
                "--val",
                type=POSITIVE_INT,
                default=200,
                metavar="N",
                help="conversations of each dataset held back for validation (default: 200)",
            ),
            arg("--seed", type=int, default=0, help="draws the examples, phrasings and pairs"),
            arg(
                "--system", metavar="TEXT", help="a system message to begin every conversation with"
            ),
            arg(
                "--source",
                action="append",
                choices=CHAT_SOURCES,
                metavar="NAME",
                help="only this dataset's instructions (repeatable; default: every one of "
                f"{', '.join(CHAT_SOURCES)})",
            ),
            arg(
                "--rejected-from",
                type=path,
                metavar="RUN",
                help="on-policy pairs: ask this chat run every prompt, and reject its own "
                "wrong answers (prompts it answers right are left out of the pairs)",
            ),
            PRECISION,
        ),
        description="Instructions in words from the training splits of SST-2 (positive or "
        "negative?), SQuAD (answer from the context), Multi30k (translate to German, to "
        "English) and CoNLL-2003 (list the people, the places), four phrasings of each, "
        "drawn by --seed: OUT/train.jsonl and OUT/val.jsonl, conversations for task sft, "
        "and OUT/pairs-train.jsonl and OUT/pairs-val.jsonl, the same prompts as preference "
        "pairs for task dpo (rejected: a wrong answer, or the right one rambling; with "
        "--rejected-from RUN, that run's own wrong answer, greedy). Only the "
        "training splits are read: the validation slice is carved out of them, each "
        "dataset's validation split being left for measuring the model.",
    ),
)


def predicting_command(prediction: Prediction) -> Command:
    """The command of a prediction: its run, a language model's ``--prompt``, its options,
    and how the model runs (quantized, in bfloat16, compiled; encoders through ONNX
    Runtime where it can)."""
    return Command(
        prediction.command,
        "predict:generate" if prediction.decodes else "predict:predict",
        prediction.help,
        (
            arg("run", type=path, help=f"run directory of {prediction.model}"),
            *((PROMPT,) if prediction.decodes else ()),
            *map(option_argument, prediction.options),
            QUANTIZE,
            PRECISION,
            *((ONNX,) if prediction.onnx else ()),
            *COMPILE,
        ),
        prediction.description,
    )


def commands() -> tuple[Command, ...]:
    """Every subcommand: :data:`COMMANDS`, and after ``eval`` the command of each
    prediction in :data:`~scratchformer.predictions.PREDICTIONS` (read now, so that one
    registered later has its command too)."""
    after = [command.name for command in COMMANDS].index("eval") + 1
    predicting = tuple(map(predicting_command, PREDICTIONS.values()))
    return COMMANDS[:after] + predicting + COMMANDS[after:]


GLOBAL_OPTIONS = (
    arg("--debug", action="store_true", help="show tracebacks of errors"),
    arg("--quiet", action="store_true", help="no progress bar or log lines"),
    arg(
        "--verbose",
        action="store_true",
        help="say what was decided for you, e.g. whether to compile and why",
    ),
    arg(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where to run (default: auto, the GPU when PyTorch sees one)",
    ),
)


class Parser(argparse.ArgumentParser):
    """argparse's parser, with its errors as one line: ``scratchformer translate: error: ...``,
    exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add(parser: argparse.ArgumentParser, arguments: Sequence[Argument]) -> None:
    groups: dict[str, Any] = {}
    for argument in arguments:
        target: Any = parser
        if argument.exclusive is not None:
            if argument.exclusive not in groups:
                groups[argument.exclusive] = parser.add_mutually_exclusive_group()
            target = groups[argument.exclusive]
        target.add_argument(*argument.flags, **argument.options)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (:func:`commands`); the global options are accepted
    after a subcommand too (there they leave the values given before it alone unless given
    again)."""
    parser = Parser(
        prog="scratchformer",
        description="Train, run and look inside Transformers written from scratch.",
    )
    parser.add_argument("--version", action="version", version=f"scratchformer {__version__}")
    _add(parser, GLOBAL_OPTIONS)
    after = Parser(add_help=False)
    _add(
        after,
        [arg(*o.flags, **{**o.options, "default": argparse.SUPPRESS}) for o in GLOBAL_OPTIONS],
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in commands():
        sub = subparsers.add_parser(
            command.name, help=command.help, description=command.description, parents=[after]
        )
        _add(sub, command.arguments)
        sub.set_defaults(command_entry=command)
    return parser


def print_warning(message: Warning | str, *_: object, **__: object) -> None:
    """A warning as one line on stderr, like errors, at the moment it is issued."""
    print(f"scratchformer: warning: {message}", file=sys.stderr)


def one_line(message: str) -> str:
    """``message`` as one line: line breaks and other control characters (which a file's
    content quoted in it may hold) written as escapes."""
    return "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in message)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error (already printed)
        return int(done.code or 0)
    command: Command | None = getattr(args, "command_entry", None)
    if command is None:
        parser.print_help()
        return 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            # what torch deprecates in its own internals (seen while compiling) is not the user's
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.")
            warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)`")
            warnings.showwarning = print_warning
            compiled_code_dir()  # (before torch's compiler is imported, which sets its own)
            return int(command.handler()(args) or 0)
    except (ValueError, OSError) as error:
        if args.debug:
            raise
        print(f"scratchformer: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except TrainingError as error:
        if args.debug:
            raise
        print(f"scratchformer: {one_line(str(error))}", file=sys.stderr)
        return 1
    except Interrupted as stop:
        print(f"scratchformer: {stop}", file=sys.stderr)
        return stop.status
    except KeyboardInterrupt:
        print("scratchformer: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # the last line of defence: a defect, reported in one line
        if args.debug:
            raise
        what = one_line(f"{type(error).__name__}: {error}")
        print(
            f"scratchformer: internal error in {command.name}: {what} "
            "(a bug: --debug shows the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
