"""The ``scratchformer`` command.

User errors (bad arguments, missing or malformed files, bad recipe keys or values) are
reported as one line on stderr with exit status 2 and no traceback; ``--debug`` shows it.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from matplotlib.figure import Figure

from . import __version__
from .config import Recipe
from .demo import run_demo
from .inference import CompiledLM
from .inference.generate import stream
from .models import build_model
from .run import CONFIG_FILE, export_hf, import_hf, initialise_from, load_run, open_task, start_run
from .tasks import TASKS, Task
from .training.checkpoint import METRICS_FILE, TRAINER_STATE, atomic_write, atomic_write_text
from .training.distributed import DEVICES, Distributed, default_device, setup
from .training.trainer import Trainer, TrainingError
from .viz import (
    KINDS,
    attention_grid,
    attention_page,
    capture_attention,
    positional_encoding_figure,
    read_metrics,
    training_curves,
)


class UsageError(ValueError):
    """A mistake in how the command was called."""


def train(args: argparse.Namespace) -> int:
    """``scratchformer train RECIPE --out DIR [--set k=v ...] [--resume]``."""
    run_dir = Path(args.out)
    started = (run_dir / TRAINER_STATE).exists()
    if args.resume and not started:
        raise UsageError(f"{run_dir} holds no checkpoint to resume; train without --resume")
    if not args.resume and started:
        raise UsageError(f"{run_dir} already holds a run: add --resume, or choose another --out")
    dist = setup(args.device)
    try:
        task, recipe = _prepare_run(args, run_dir, dist)
        if recipe.train.threads is not None:
            torch.set_num_threads(recipe.train.threads)
        torch.manual_seed(recipe.train.seed)
        model = build_model(recipe.model)
        if recipe.model.init_from is not None and not args.resume:
            initialise_from(model, recipe.model.init_from)
        result = Trainer(task, model, run_dir, dist, quiet=args.quiet).fit(resume=args.resume)
    finally:
        dist.close()
    if dist.is_main:
        print(json.dumps(result, indent=2))
    return 0


def _prepare_run(args: argparse.Namespace, run_dir: Path, dist: Distributed) -> tuple[Task, Recipe]:
    """The task with its tokenizers, and the completed recipe: learnt from the training data
    by rank 0 and written to ``run_dir``, or read back from it (resume, other ranks)."""
    if not args.resume and dist.is_main:
        recipe = Recipe.load(args.recipe, args.set)
        task = start_run(recipe, run_dir)
    dist.barrier()
    if args.resume or not dist.is_main:
        task, recipe = open_task(run_dir, list(args.set) if args.resume else [])
    return task, recipe


def evaluate(args: argparse.Namespace) -> int:
    """``scratchformer eval DIR [--split val|test | --data FILE]``: JSON metrics."""
    task, model = load_run(Path(args.run))
    device = default_device(args.device)
    metrics = task.evaluate(model.to(device), args.split, args.data, device=device)
    progress = not args.quiet and sys.stderr.isatty()
    metrics.update(task.decoding_metrics(model, args.split, args.data, args.beam, progress))
    print(
        json.dumps({"split": args.split if args.data is None else args.data, **metrics}, indent=2)
    )
    return 0


def _run_of(args: argparse.Namespace, command: str) -> tuple[Task, torch.nn.Module]:
    """The task and model of ``args.run``, which must be of a task that ``command`` serves."""
    task, model = load_run(Path(args.run))
    if task.command != command:
        wanted = " or ".join(name for name, kind in TASKS.items() if kind.command == command)
        raise UsageError(f"{args.run} is a {task.name!r} run; {command} needs a {wanted} run")
    return task, model.to(default_device(args.device))


def _input_lines() -> list[str]:
    return [line.rstrip("\r\n") for line in sys.stdin]


def _output_lines(outputs: Sequence[str]) -> None:
    sys.stdout.writelines(output + "\n" for output in outputs)


def generate(args: argparse.Namespace) -> int:
    """``scratchformer generate DIR --prompt TEXT``: stream a continuation to stdout."""
    task, model = _run_of(args, "generate")
    tokenizer = task.tokenizer()
    prompt = tokenizer.encode(args.prompt)
    if not prompt:
        raise UsageError("the prompt is empty: give --prompt some text")
    stops = list(args.stop)
    new: list[int] = []
    shown = ""
    if args.compile:
        model = CompiledLM(model)
        if not args.quiet:
            print("compiling the model: the first tokens take tens of seconds", file=sys.stderr)
    sys.stdout.write(args.prompt)
    for step in stream(
        model,
        [prompt],
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        no_repeat_ngram_size=args.no_repeat_ngram,
        greedy=args.greedy,
        eos_id=tokenizer.eos_id,
        stop=(lambda ids: any(s in tokenizer.decode(ids) for s in stops)) if stops else None,
        seed=args.seed,
    ):
        if step[0] is None:
            break
        new.append(step[0])
        text = tokenizer.decode(new)
        if not text.endswith("\ufffd"):  # print once a multi-byte character is whole
            sys.stdout.write(text[len(shown) :])
            sys.stdout.flush()
            shown = text
    sys.stdout.write(tokenizer.decode(new)[len(shown) :] + "\n")
    return 0


def translate_lines(args: argparse.Namespace) -> int:
    """``scratchformer translate DIR < source > hypotheses``: one line out per line in."""
    task, model = _run_of(args, "translate")
    hypotheses = task.predict_lines(
        model,
        _input_lines(),
        beam_size=args.beam,
        length_penalty=args.length_penalty,
        batch_size=args.batch_size,
        progress=not args.quiet and sys.stderr.isatty(),
    )
    _output_lines(hypotheses)
    return 0


def classify(args: argparse.Namespace) -> int:
    """``scratchformer classify DIR < sentences``: label and probability (or value) a line."""
    task, model = _run_of(args, "classify")
    _output_lines(task.predict_lines(model, _input_lines()))
    return 0


def tag(args: argparse.Namespace) -> int:
    """``scratchformer tag DIR < sentences``: ``token tag`` lines, a blank line after each
    sentence (CoNLL style); words are split on whitespace."""
    task, model = _run_of(args, "tag")
    _output_lines(task.predict_lines(model, _input_lines()))
    return 0


def import_checkpoint(args: argparse.Namespace) -> int:
    """``scratchformer import-hf HF_DIR --out DIR``: a run directory from a checkpoint."""
    recipe = import_hf(Path(args.hf_dir), Path(args.out))
    print(f"imported {args.hf_dir} into {args.out} (task={recipe.task}, arch={recipe.model.arch})")
    return 0


def export_checkpoint(args: argparse.Namespace) -> int:
    """``scratchformer export-hf DIR --out HF_DIR``: a Hugging Face checkpoint of a run."""
    export_hf(Path(args.run), Path(args.out))
    print(f"{args.out}: a Hugging Face checkpoint of {args.run}")
    return 0


def attention(args: argparse.Namespace) -> int:
    """``scratchformer attention DIR TEXT --out attn.png|attn.html``: what the model attends
    to, as a grid of heatmaps or as the interactive viewer."""
    out = Path(args.out)
    html = out.suffix.lower() in (".html", ".htm")
    if not html:
        _check_picture_format(out)
    task, model = load_run(Path(args.run), need_head=False)
    maps = capture_attention(task, model.to(default_device(args.device)), args.text, args.target)
    title = f"{Path(args.run).name}: {args.text}"
    if html:
        atomic_write_text(out, attention_page(maps, title=title))
        print(f"{out}: {', '.join(maps.kinds)} attention; open it in a browser")
        return 0
    kind = args.kind or maps.kinds[-1]  # cross-attention when there is any
    _save_figure(attention_grid(maps, kind, args.layer, args.head), out)
    queries, keys = len(maps.queries[kind]), len(maps.keys[kind])
    print(f"{out}: {kind} attention, {queries} query x {keys} key tokens")
    return 0


def plot(args: argparse.Namespace) -> int:
    """``scratchformer plot DIR --out curves.png``: loss, learning rate, metric by step."""
    run_dir, out = Path(args.run), Path(args.out)
    _check_picture_format(out)
    metric = None
    if (run_dir / CONFIG_FILE).is_file():
        task_metric = TASKS[Recipe.load(run_dir / CONFIG_FILE).task].metric
        metric = None if task_metric == "loss" else task_metric
    records = read_metrics(run_dir / METRICS_FILE)
    _save_figure(training_curves(records, metric, title=run_dir.name), out)
    print(f"{out}: training curves of {run_dir} ({len(records)} records)")
    return 0


def plot_positional(args: argparse.Namespace) -> int:
    """``scratchformer plot-pe --d-model D --length N --out pe.png``."""
    out = Path(args.out)
    _check_picture_format(out)
    _save_figure(positional_encoding_figure(args.d_model, args.length), out)
    print(f"{out}: sinusoidal positional encoding, d_model={args.d_model}, {args.length} positions")
    return 0


def _check_picture_format(path: Path) -> None:
    formats = ("png", "svg", "pdf")
    if path.suffix.lower().lstrip(".") not in formats:
        raise UsageError(f"--out {path}: the picture's name must end in .{', .'.join(formats)}")


def _save_figure(figure: Figure, path: Path) -> None:
    """Write a figure whole or not at all (through a temporary file)."""
    picture_format = path.suffix.lower().lstrip(".")
    atomic_write(path, lambda temp: figure.savefig(temp, format=picture_format, dpi=100))


def demo(args: argparse.Namespace) -> int:
    """``scratchformer demo [--out DIR]``: the synthetic task end to end."""
    run_demo(Path(args.out), quiet=args.quiet)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scratchformer",
        description="Train, run and look inside Transformers written from scratch.",
    )
    parser.add_argument("--version", action="version", version=f"scratchformer {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or log lines")
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where to run (default: auto, the GPU when PyTorch sees one)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = commands.add_parser("train", help="train a model from a TOML recipe")
    p.add_argument("recipe", help="recipe file (TOML), e.g. recipes/shakespeare-char.toml")
    p.add_argument("--out", required=True, help="run directory to write, e.g. runs/NAME")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a recipe setting (repeatable), e.g. train.max_steps=200",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its last checkpoint"
    )
    p.set_defaults(handler=train)

    p = commands.add_parser("eval", help="print a trained model's metrics as JSON")
    p.add_argument("run", help="run directory")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--split", default="val", help="val (default) or test")
    group.add_argument("--data", help="a file in the task's format (translation: SRC,TGT)")
    p.add_argument("--beam", type=int, default=5, help="translation: beam size for BLEU")
    p.set_defaults(handler=evaluate)

    p = commands.add_parser("generate", help="continue a prompt with a language model")
    p.add_argument("run", help="run directory of a language model")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--no-repeat-ngram", type=int, default=0, metavar="N")
    p.add_argument("--greedy", action="store_true", help="always take the most likely token")
    p.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="TEXT",
        help="stop once the output contains TEXT (repeatable)",
    )
    p.add_argument("--seed", type=int, default=None, help="for reproducible sampling")
    p.add_argument(
        "--compile",
        action="store_true",
        help="decode through torch.compile: tens of seconds to compile, then faster tokens "
        "(worth it for long outputs; needs a C++ compiler on the CPU)",
    )
    p.set_defaults(handler=generate)

    p = commands.add_parser(
        "translate",
        help="translate stdin to stdout, line by line",
        description="One line out per line in, in order; an empty line gives an empty line. "
        "A line longer than the model's data.max_len tokens is truncated to it, with a "
        "warning on stderr; unknown characters become the unknown token.",
    )
    p.add_argument("run", help="run directory of a translation model")
    p.add_argument("--beam", type=int, default=5, help="beam size (1: greedy)")
    p.add_argument("--length-penalty", type=float, default=0.6)
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(handler=translate_lines)

    p = commands.add_parser(
        "classify",
        help="label each line of stdin",
        description="One line out per line in: label<TAB>probability, or the value of a "
        "regression model. Sentence pairs are given as first<TAB>second. Inputs longer than "
        "the model's data.max_len tokens are truncated.",
    )
    p.add_argument("run", help="run directory of a classification or regression model")
    p.set_defaults(handler=classify)

    p = commands.add_parser(
        "tag",
        help="tag the words of each line of stdin",
        description="Words are split on whitespace; each comes out as 'word tag', with a "
        "blank line after each sentence (an empty line gives just the blank line). Words "
        "beyond the model's data.max_len sub-words are tagged O, with a warning on stderr.",
    )
    p.add_argument("run", help="run directory of a tagging model")
    p.set_defaults(handler=tag)

    p = commands.add_parser(
        "import-hf",
        help="make a run directory from a Hugging Face BERT or GPT-2 checkpoint",
        description="HF_DIR holds config.json, model.safetensors (or pytorch_model.bin) and "
        "tokenizer.json. A GPT-2 becomes a language-model run, ready for generate; "
        "a BERT-family encoder a classification run awaiting a fine-tune.",
    )
    p.add_argument("hf_dir", help="Hugging Face checkpoint directory")
    p.add_argument("--out", required=True, help="run directory to write, e.g. runs/NAME")
    p.set_defaults(handler=import_checkpoint)

    p = commands.add_parser(
        "export-hf",
        help="write a run's model as a Hugging Face BERT or GPT-2 checkpoint",
        description="For encoders configured like BERT (post-LN, learned positions, "
        "embedding LayerNorm, segments, no head) and decoders like GPT-2 (pre-LN, learned "
        "positions, final LayerNorm, tied LM head); others fail naming what differs. "
        "transformers.AutoModel.from_pretrained(HF_DIR) loads the result.",
    )
    p.add_argument("run", help="run directory")
    p.add_argument("--out", required=True, help="Hugging Face checkpoint directory to write")
    p.set_defaults(handler=export_checkpoint)

    p = commands.add_parser(
        "attention",
        help="draw what a trained model attends to in a text",
        description="A PNG (or SVG, PDF) grid of heatmaps, layers x heads, of one kind of "
        "attention, or with --out *.html one self-contained page to explore every kind, layer "
        "and head interactively. A translation model is shown its own greedy translation "
        "unless --target gives one; a sentence-pair model reads 'first<TAB>second'. Inputs "
        "longer than the model's limit are cut to it; long ones get thinned labels.",
    )
    p.add_argument("run", help="run directory")
    p.add_argument("text", help="the input text (for translation: the source sentence)")
    p.add_argument("--target", help="translation: the output to show (default: greedy)")
    p.add_argument(
        "--kind",
        choices=KINDS,
        help="which attention to draw (default: cross for translation, else the only one)",
    )
    p.add_argument("--layer", type=int, help="only this layer (0-based)")
    p.add_argument("--head", type=int, help="only this head (0-based)")
    p.add_argument("--out", required=True, help="attn.png, attn.svg, attn.pdf or attn.html")
    p.set_defaults(handler=attention)

    p = commands.add_parser("plot", help="draw a run's training curves")
    p.add_argument("run", help="run directory (reads its metrics.jsonl)")
    p.add_argument("--out", required=True, help="curves.png (or .svg, .pdf)")
    p.set_defaults(handler=plot)

    p = commands.add_parser("plot-pe", help="draw the sinusoidal positional encoding")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--length", type=int, default=100, help="number of positions")
    p.add_argument("--out", required=True, help="pe.png (or .svg, .pdf)")
    p.set_defaults(handler=plot_positional)

    p = commands.add_parser("demo", help="train a tiny model on a synthetic task, no data needed")
    p.add_argument("--out", default="runs/demo", help="run directory (default: runs/demo)")
    p.set_defaults(handler=demo)
    return parser


def print_warning(message: Warning | str, *_: object, **__: object) -> None:
    """A warning as one line on stderr, like errors, at the moment it is issued."""
    print(f"scratchformer: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            # what torch deprecates in its own internals (seen while compiling) is not the user's
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.")
            warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
            warnings.showwarning = print_warning
            return int(args.handler(args) or 0)
    except (ValueError, OSError) as error:
        if args.debug:
            raise
        print(f"scratchformer: error: {error}", file=sys.stderr)
        return 2
    except TrainingError as error:
        if args.debug:
            raise
        print(f"scratchformer: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("scratchformer: interrupted; the last checkpoint is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
