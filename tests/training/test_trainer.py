"""The trainer end to end on the synthetic task (no files needed): exact resume, the best
checkpoint, early stopping, a NaN loss, and what the run directory holds."""

from __future__ import annotations

import copy
import json
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import (
    RECIPES,
    TINY_MODEL,
    compile_without_inductor,
    compiled_graphs,
    interrupted_after,
    set_options,
    tiny_config,
)
from scratchformer.cli import main
from scratchformer.config import ModelConfig, Recipe, TrainConfig
from scratchformer.errors import TrainingError
from scratchformer.models import build_model
from scratchformer.tasks import build_task
from scratchformer.training.trainer import Trainer, build_optimizer, layer_depths

RECIPE = RECIPES / "copy.toml"
TINY = [
    *TINY_MODEL,
    "model.dropout=0.1",  # so that resume must restore the random state exactly
    "data.synthetic.train_size=400",
    "data.synthetic.val_size=40",
    "train.batch_size=16",
    "train.eval_every=10",
    "train.warmup_steps=5",
]


def train(out: Path, *extra: str) -> int:
    return main(
        [
            "--quiet",
            "train",
            str(RECIPE),
            "--out",
            str(out),
            *set_options([*TINY, *extra]),
        ]
    )


def weights(run: Path, step: int, file: str = "model.safetensors") -> dict[str, torch.Tensor]:
    return load_file(run / "checkpoints" / f"step-{step:08d}" / file)


@pytest.mark.parametrize("average", [(), ("train.ema_decay=0.9",)], ids=["plain", "ema"])
def test_resume_is_bit_identical_to_a_straight_run(
    tmp_path: Path, average: tuple[str, ...]
) -> None:
    assert train(tmp_path / "straight", "train.max_steps=20", *average) == 0

    with interrupted_after(10):
        assert train(tmp_path / "halves", "train.max_steps=20", *average) == 130
    resumed = main(["--quiet", "train", str(RECIPE), "--out", str(tmp_path / "halves"), "--resume"])
    assert resumed == 0
    files = ["model.safetensors", *(["average.safetensors"] if average else [])]
    for file in files:
        straight, halves = (
            weights(tmp_path / "straight", 20, file),
            weights(tmp_path / "halves", 20, file),
        )
        assert straight.keys() == halves.keys()
        assert all(torch.equal(straight[k], halves[k]) for k in straight), file
    lines = (tmp_path / "halves" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines if '"val"' in line] == [10, 20]


def test_a_resumed_run_is_given_what_is_left_of_its_time_budget(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with interrupted_after(10):
        assert train(run, "train.max_steps=20") == 130
    state_file = run / "checkpoints" / "step-00000010" / "state.json"
    state = json.loads(state_file.read_text())
    assert 0 < state["seconds"] < 60, "the seconds the checkpoint trained"
    state_file.write_text(json.dumps({**state, "seconds": 90.0}))
    resume = ["--quiet", "train", str(RECIPE), "--out", str(run), "--resume"]
    assert main([*resume, "--set", "train.max_minutes=1"]) == 0
    assert json.loads((run / "trainer_state.json").read_text())["step"] == 11, "out of time"
    assert main([*resume, "--set", "train.max_minutes=3"]) == 0
    assert json.loads((run / "trainer_state.json").read_text())["step"] == 20


def test_run_directory_holds_everything_to_use_the_model(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert train(run, "train.max_steps=20") == 0
    for name in (
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "trainer_state.json",
        "metrics.jsonl",
    ):
        assert (run / name).is_file(), name
    recipe = Recipe.load(run / "config.json")
    assert recipe.model.arch == "seq2seq" and recipe.model.vocab_size == 14  # 10 digits + 4
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["split"] == "train"]
    assert {"loss", "lr", "tokens_per_s"} <= train_records[0].keys()
    state = json.loads((run / "trainer_state.json").read_text())
    best = max((r for r in records if r["split"] == "val"), key=lambda r: r["exact_match"])
    assert state["best"] == best["exact_match"]


def test_with_ema_decay_the_kept_weights_are_the_moving_average(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert train(run, "train.max_steps=20", "train.eval_every=20", "train.ema_decay=0.9") == 0
    kept, average, last = (
        load_file(run / "model.safetensors"),
        weights(run, 20, "average.safetensors"),
        weights(run, 20),
    )
    assert average.pop("n_averaged").item() == 20
    assert kept.keys() == {name.removeprefix("module.") for name in average}
    assert all(torch.equal(kept[name], average[f"module.{name}"]) for name in kept)
    assert not all(torch.equal(kept[name], last[name]) for name in kept), (
        "the average is not the last step"
    )
    state = json.loads((run / "trainer_state.json").read_text())
    evaluated = main(["--quiet", "eval", str(run), "--split", "val"])
    assert evaluated == 0 and state["best_step"] == 20


def test_early_stopping_and_best_weights(tmp_path: Path) -> None:
    recipe = Recipe.load(
        RECIPE,
        [
            *TINY,
            "train.max_steps=200",
            "train.eval_every=5",
            "train.early_stop_patience=2",
            "train.lr=1e-9",
            "train.schedule=constant",
        ],
    )
    task = build_task(recipe)
    task.prepare()
    recipe.model = task.model_config()
    trainer = Trainer(task, build_model(recipe.model), tmp_path, quiet=True)
    result = trainer.fit()
    assert result["step"] < 200, "a model that cannot learn must stop early"
    assert trainer.state["bad_evals"] == 2


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    recipe = Recipe.load(RECIPE, [*TINY, "train.max_steps=50"])
    task = build_task(recipe)
    task.prepare()
    recipe.model = task.model_config()
    real_loss = task.loss

    def loss_that_breaks(model, batch):
        loss = real_loss(model, batch)
        return loss * float("nan") if trainer.state["step"] >= 13 else loss

    task.loss = loss_that_breaks
    trainer = Trainer(task, build_model(recipe.model), tmp_path, quiet=True)
    with pytest.raises(TrainingError, match=r"nan at step 14.*checkpoint \(step 10\) is kept"):
        trainer.fit()
    assert json.loads((tmp_path / "trainer_state.json").read_text())["step"] == 10
    assert torch.isfinite(next(iter(weights(tmp_path, 10).values()))).all()


def one_lm_step(run_dir: Path, *settings: str) -> dict[str, torch.Tensor]:
    recipe = Recipe.load(
        RECIPE.with_name("shakespeare-char.toml"),
        [
            *TINY_MODEL,
            "train.max_steps=1",
            "train.eval_batches=1",
            "train.schedule=constant",
            "train.warmup_steps=0",
            "train.lr=1e-4",
            *settings,
        ],
    )
    task = build_task(recipe)
    task.prepare()
    recipe.model = task.model_config()
    torch.manual_seed(0)
    trainer = Trainer(task, build_model(recipe.model), run_dir, quiet=True)
    trainer.fit()
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def test_accumulating_two_halves_equals_one_whole_batch(tmp_path: Path, data_dir) -> None:
    whole = one_lm_step(tmp_path / "whole", "train.batch_size=8")
    halves = one_lm_step(tmp_path / "halves", "train.batch_size=4", "train.grad_accum=2")
    for name in whole:
        torch.testing.assert_close(halves[name], whole[name], atol=1e-6, rtol=0, msg=name)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("precision", ["bf16", "auto"])
def test_bf16_autocast_trains_where_asked_and_warns_where_it_is_emulated(
    tmp_path: Path, monkeypatch, capsys, native: bool, precision: str
) -> None:
    """``bf16`` always autocasts, and warns on a device without native bfloat16; ``auto``
    autocasts only where bfloat16 is native, silently."""
    monkeypatch.setattr("scratchformer.device.native_bf16", lambda device: native)
    autocasts = []
    real_autocast = torch.autocast

    def spy(*args, **kwargs):
        autocasts.append(kwargs["enabled"])
        return real_autocast(*args, **kwargs)

    monkeypatch.setattr("scratchformer.training.trainer.torch.autocast", spy)
    assert train(tmp_path / "run", "train.max_steps=10", f"train.precision='{precision}'") == 0
    out, err = capsys.readouterr()
    bf16 = precision == "bf16" or native
    assert autocasts == [bf16] * 10
    assert json.loads(out)["precision"] == ("bf16" if bf16 else "fp32")
    assert json.loads((tmp_path / "run" / "trainer_state.json").read_text())["step"] == 10
    warned = "this cpu has no native bfloat16" in err
    assert warned == (precision == "bf16" and not native)


def test_train_compile_computes_what_the_eager_model_computes(
    tmp_path: Path, data_dir, monkeypatch
) -> None:
    """``train.compile`` changes how a step runs, not what it computes: the same loss and
    gradients as the eager model (compared before AdamW, which turns the float noise of
    gradients that are zero in exact arithmetic, e.g. of key biases, into whole steps).
    The trainer's own compiled step is then run without Inductor: what Inductor computes is
    checked here once."""
    recipe = Recipe.load(
        RECIPE.with_name("shakespeare-char.toml"),
        [*TINY_MODEL, "train.batch_size=4"],
    )
    task = build_task(recipe)
    task.prepare()
    model = build_model(task.model_config())
    batch = task.global_batch(0, 1).slice(0, 1)
    results = []
    for network in (model, torch.compile(model)):
        model.zero_grad()
        loss = task.loss(network, batch)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (eager_loss, eager), (compiled_loss, compiled) = results
    torch.testing.assert_close(compiled_loss, eager_loss, atol=1e-6, rtol=1e-6)
    for name in eager:
        torch.testing.assert_close(compiled[name], eager[name], atol=1e-6, rtol=1e-4, msg=name)
    compile_without_inductor(monkeypatch)
    before = compiled_graphs()
    one_lm_step(tmp_path / "compiled", "train.batch_size=4", "train.compile=true")
    assert compiled_graphs() > before
    lines = (tmp_path / "compiled" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 1]  # trained, evaluated


def test_layer_lr_decay_scales_the_lr_from_the_head_down_to_the_embeddings() -> None:
    """decay 0.5 on two layers: head 1x, layer 1 0.5x, layer 0 0.25x, embeddings 0.125x;
    each parameter in exactly one group, weight decay on matrices only."""
    model = build_model(
        ModelConfig(
            arch="encoder",
            vocab_size=50,
            d_model=16,
            d_ff=32,
            n_heads=2,
            n_layers=2,
            num_labels=3,
            head="classification",
        )
    )
    optimizer = build_optimizer(model, TrainConfig(lr=0.4, weight_decay=0.1, layer_lr_decay=0.5))
    lr_of = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    decay_of = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))
    expected = {
        "head.": 0.4,
        "encoder.layers.1.": 0.2,
        "encoder.layers.0.": 0.1,
        "embedding.": 0.05,
    }
    for name, parameter in model.named_parameters():
        prefix = next(p for p in expected if name.startswith(p))
        assert lr_of[id(parameter)] == pytest.approx(expected[prefix]), name
        assert decay_of[id(parameter)] == (0.1 if parameter.dim() >= 2 else 0.0), name
    assert optimizer.param_groups[0]["lr"] == 0.4


@pytest.mark.parametrize(
    ("arch", "expected"),
    [
        (
            "encoder",
            {"embedding.": 0, "encoder.layers.0.": 1, "encoder.layers.1.": 2, "pooler.": None},
        ),
        ("decoder", {"embedding.": 0, "decoder.layers.0.": 1, "decoder.layers.1.": 2}),
        (
            "seq2seq",
            {
                "src_embedding.": 0,
                "tgt_embedding.": 0,
                "encoder.layers.0.": 1,
                "encoder.layers.1.": 2,
                "decoder.layers.0.": 3,
                "decoder.layers.1.": 4,
                "decoder.layers.2.": 5,
            },
        ),
    ],
)
def test_layer_depths_stack_the_decoder_above_the_encoder_above_the_embeddings(
    arch: str, expected: dict[str, int | None]
) -> None:
    """Heads and final norms (what no prefix names) are None: above every layer. The tied
    output projection is the target embedding."""
    model = build_model(
        ModelConfig(
            arch=arch,
            vocab_size=50,
            d_model=16,
            d_ff=32,
            n_heads=2,
            n_layers=2,
            n_decoder_layers=3 if arch == "seq2seq" else None,
            norm_first=True,
            head="classification" if arch == "encoder" else None,
            pooler=arch == "encoder",
        )
    )
    depths = layer_depths([name for name, _ in model.named_parameters()])
    for name, depth in depths.items():
        prefix = next((p for p in expected if name.startswith(p)), None)
        assert depth == expected.get(prefix), name
    assert {p for p in expected if any(name.startswith(p) for name in depths)} == set(expected)


def test_the_optimizer_takes_the_steps_of_torch_adamw() -> None:
    """The trainer's fused AdamW makes the updates of ``torch.optim.AdamW``'s loop over
    parameters, with weight decay on matrices and none on biases and norm gains."""
    torch.manual_seed(0)
    model = build_model(tiny_config(arch="decoder", max_len=16))
    reference = copy.deepcopy(model)
    config = TrainConfig(lr=1e-2, weight_decay=0.1, adam_beta2=0.99, adam_eps=1e-8)
    fused = build_optimizer(model, config)
    assert all(group["fused"] for group in fused.param_groups)
    parameters = list(reference.parameters())
    loop = torch.optim.AdamW(
        [
            {"params": [p for p in parameters if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=1e-2,
        betas=(0.9, 0.99),
        eps=1e-8,
        foreach=False,
    )
    for _ in range(3):
        for ours, theirs in zip(model.parameters(), parameters, strict=True):
            ours.grad = torch.randn_like(ours)
            theirs.grad = ours.grad.clone()
        fused.step()
        loop.step()
    for (name, ours), theirs in zip(model.named_parameters(), parameters, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6, msg=name)


# Stopping on a signal, the checkpoints kept, the log on resume ---------------------------


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_after_the_step_with_a_checkpoint_of_it(
    tmp_path: Path, monkeypatch, capsys, signum: int, status: int
) -> None:
    assert train(tmp_path / "straight", "train.max_steps=8", "train.eval_every=3") == 0

    def not_here(*_: object) -> None:
        raise AssertionError("the signal reached the handler outside training")

    train_step = Trainer._train_step

    def signalled_during_step_5(self, network):
        if self.state["step"] == 4:
            os.kill(os.getpid(), signum)
        return train_step(self, network)

    monkeypatch.setattr(Trainer, "_train_step", signalled_during_step_5)
    previous = signal.signal(signum, not_here)
    try:
        capsys.readouterr()
        assert train(tmp_path / "run", "train.max_steps=8", "train.eval_every=3") == status
        assert signal.getsignal(signum) is not_here  # put back once training stopped
    finally:
        signal.signal(signum, previous)
    run = tmp_path / "run"
    assert capsys.readouterr().err == (
        f"scratchformer: interrupted at step 5; checkpoint of step 5 kept in {run}; "
        "resume with --resume\n"
    )
    assert json.loads((run / "trainer_state.json").read_text())["step"] == 5
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "step-00000003",
        "step-00000005",
    ]
    assert [p.name for p in run.rglob(".*")] == []  # no temp files, no lock

    monkeypatch.undo()
    assert main(["--quiet", "train", str(RECIPE), "--out", str(run), "--resume"]) == 0
    straight, resumed = weights(tmp_path / "straight", 8), weights(run, 8)
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


def test_keep_checkpoints_sets_how_many_are_kept(tmp_path: Path) -> None:
    assert (
        train(tmp_path, "train.max_steps=8", "train.eval_every=2", "train.keep_checkpoints=3") == 0
    )
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert kept == ["step-00000004", "step-00000006", "step-00000008"]
    with pytest.raises(ValueError, match="keep_checkpoints=0 must be positive"):
        Recipe.load(RECIPE, ["train.keep_checkpoints=0"])


def test_resume_logs_each_step_once_and_drops_a_torn_last_line(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    settings = ("train.max_steps=16", "train.eval_every=10", "train.log_every=1")
    assert train(tmp_path / "straight", *settings) == 0
    train_step = Trainer._train_step

    def killed_during_step_14(self, network):
        if self.state["step"] == 13:  # steps 11 to 13 are logged, not checkpointed
            raise KeyboardInterrupt
        return train_step(self, network)

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "_train_step", killed_during_step_14)
        assert train(tmp_path / "run", *settings) == 130
    log = tmp_path / "run" / "metrics.jsonl"
    with log.open("a") as file:
        file.write('{"step": 14, "split": "tra')  # a writer killed mid-record
    capsys.readouterr()
    assert main(["train", str(RECIPE), "--out", str(tmp_path / "run"), "--resume"]) == 0
    assert f"{log}: dropped a torn last line" in capsys.readouterr().err

    def logged(run: Path) -> list[tuple]:
        records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
        return [(r["step"], r["split"], r.get("loss")) for r in records]

    assert logged(tmp_path / "run") == logged(tmp_path / "straight")
