import ast
import json
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file, save_model
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

import scratchformer
from scratchformer import ModelConfig, build_model
from scratchformer.training import (
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    build_schedule,
    capture_rng,
    exponential_average,
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    restore_rng,
    save_checkpoint,
    save_weights,
)


@pytest.fixture(autouse=True)
def _keep_global_rng() -> Iterator[None]:
    """These tests move the global random states around; leave them as they were."""
    state = capture_rng()
    yield
    restore_rng(state)


def decoder(**overrides) -> nn.Module:
    values = dict(arch="decoder", vocab_size=30, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    return build_model(ModelConfig(**{**values, **overrides}))


def seq2seq(**overrides) -> nn.Module:
    values = dict(arch="seq2seq", vocab_size=30, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    return build_model(ModelConfig(**{**values, **overrides}))


def assert_same_weights(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


def no_temps(directory: Path) -> bool:
    return not list(directory.rglob(".*.tmp-*"))


# Atomic writes ---------------------------------------------------------------------------


def test_atomic_write_replaces_the_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    atomic_write_text(path, "old")
    atomic_write(path, lambda temp: temp.write_bytes(b"new"))
    assert path.read_text() == "new"
    atomic_write_json(tmp_path / "state.json", {"b": [1, 2.5], "a": None})
    assert json.loads((tmp_path / "state.json").read_text()) == {"a": None, "b": [1, 2.5]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "state.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    atomic_write_text(path, "old")

    def half_then_fail(temp: Path) -> None:
        temp.write_text("half of the n")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        atomic_write(path, half_then_fail)
    with pytest.raises(TypeError):
        atomic_write_json(path, {"tensor": torch.zeros(1)})
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


# Weights ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "tied"),
    [
        (decoder, [("lm_head.weight", "embedding.tokens.weight")]),
        (
            lambda: seq2seq(share_embeddings=True),
            [
                ("tgt_embedding.tokens.weight", "src_embedding.tokens.weight"),
                ("lm_head.weight", "src_embedding.tokens.weight"),
            ],
        ),
        (lambda: decoder(tie_output=False, positional="learned"), []),
    ],
    ids=["tied-output", "shared-embeddings", "untied"],
)
def test_weights_round_trip_bit_exact_with_ties_kept(build, tied, tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    model = build()
    save_weights(path, model)
    with safe_open(path, framework="pt") as f:
        stored = set(f.keys())
    assert len(stored) == len({id(t) for t in model.state_dict(keep_vars=True).values()})

    torch.manual_seed(1)
    fresh = build()
    assert load_weights(path, fresh) == ([], [])
    assert_same_weights(model, fresh)
    for alias, name in tied:
        assert fresh.get_parameter(alias) is fresh.get_parameter(name)


def test_files_of_safetensors_save_model_load_too(tmp_path: Path) -> None:
    model = seq2seq(share_embeddings=True)
    save_model(model, str(tmp_path / "model.safetensors"))  # keeps other names of the ties
    fresh = seq2seq(share_embeddings=True)
    load_weights(tmp_path / "model.safetensors", fresh)
    assert_same_weights(model, fresh)


def test_mismatched_weights_name_the_tensors_and_load_nothing(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_weights(path, decoder())
    model = decoder(vocab_size=31)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"embedding.tokens.weight is \(30, 16\) in the file, "):
        load_weights(path, model)
    assert all(torch.equal(before[n], t) for n, t in model.state_dict().items())

    with pytest.raises(
        ValueError, match=r"does not fit DecoderModel: missing: decoder\.layers\.2\."
    ):
        load_weights(path, decoder(n_layers=3))
    with pytest.raises(ValueError, match=r"unexpected: decoder\.layers\.1\."):
        load_weights(path, decoder(n_layers=1))
    missing, unexpected = load_weights(path, decoder(n_layers=1), strict=False)
    assert missing == [] and unexpected[0].startswith("decoder.layers.1.")


def test_a_tensor_saved_apart_is_unexpected_in_a_tied_model(tmp_path: Path) -> None:
    save_weights(tmp_path / "untied.safetensors", decoder(tie_output=False))
    with pytest.raises(ValueError, match=r"unexpected: lm_head\.weight$"):
        load_weights(tmp_path / "untied.safetensors", decoder())


def test_a_file_that_is_not_safetensors_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match="is not a safetensors file"):
        load_weights(path, decoder())
    save_file({"x": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match=r"missing: embedding\.tokens\.weight, .*; unexpected: x$"):
        load_weights(path, decoder())


# Random state ----------------------------------------------------------------------------


def draws() -> tuple:
    return random.random(), np.random.rand(3).tolist(), np.random.randn(), torch.rand(3)


def test_rng_round_trip_through_a_weights_only_file(tmp_path: Path) -> None:
    np.random.randn()  # leaves a cached Gaussian in NumPy's state
    torch.save(capture_rng(), tmp_path / "rng.pt")
    expected = draws()
    draws()
    restore_rng(torch.load(tmp_path / "rng.pt", weights_only=True))
    again = draws()
    assert again[:3] == expected[:3]
    assert torch.equal(again[3], expected[3])


# Checkpoints -----------------------------------------------------------------------------


def trainee(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, LambdaLR]:
    torch.manual_seed(seed)
    model = decoder(dropout=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    return model, optimizer, build_schedule("cosine", optimizer, warmup_steps=5, max_steps=30)


def train(
    model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: LambdaLR, steps: int
) -> None:
    """Batches drawn from torch's global generator, and dropout: resuming needs the RNG."""
    for _ in range(steps):
        ids = torch.randint(0, 30, (4, 9))
        logits = model(ids[:, :-1]).logits
        loss = nn.functional.cross_entropy(logits.reshape(-1, 30), ids[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()


def test_resume_from_a_checkpoint_is_bit_exact(tmp_path: Path) -> None:
    model, optimizer, scheduler = trainee(0)
    train(model, optimizer, scheduler, 10)
    path = save_checkpoint(
        tmp_path, step=10, model=model, optimizer=optimizer, scheduler=scheduler, state={"epoch": 1}
    )
    assert path == tmp_path / "checkpoints" / "step-00000010"
    train(model, optimizer, scheduler, 10)

    resumed, resumed_optimizer, resumed_scheduler = trainee(1)  # fresh, other initial weights
    state = load_checkpoint(
        tmp_path, model=resumed, optimizer=resumed_optimizer, scheduler=resumed_scheduler
    )
    assert state == {"epoch": 1, "step": 10}
    train(resumed, resumed_optimizer, resumed_scheduler, 10)
    assert_same_weights(model, resumed)
    assert resumed_scheduler.get_last_lr() == scheduler.get_last_lr()

    # the test can tell: without the saved random state, dropout and batches differ
    other, other_optimizer, other_scheduler = trainee(1)
    load_checkpoint(
        tmp_path,
        model=other,
        optimizer=other_optimizer,
        scheduler=other_scheduler,
        restore_rng=False,
    )
    train(other, other_optimizer, other_scheduler, 10)
    assert not torch.equal(other.lm_head.weight, model.lm_head.weight)


def save(run_dir: Path, step: int, keep: int = 1, **state) -> Path:
    model, optimizer, scheduler = trainee(0)
    return save_checkpoint(
        run_dir,
        step=step,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        state=state,
        keep=keep,
    )


def test_checkpoint_layout_and_pointer(tmp_path: Path) -> None:
    path = save(tmp_path, 3, loss=1.5, best={"step": 2})
    assert sorted(p.name for p in path.iterdir()) == [
        "model.safetensors",
        "optimizer.pt",
        "rng.pt",
        "scheduler.pt",
        "state.json",
    ]
    pointer = json.loads((tmp_path / "trainer_state.json").read_text())
    assert pointer == {
        "checkpoint": "checkpoints/step-00000003",
        "step": 3,
        "loss": 1.5,
        "best": {"step": 2},
    }
    assert json.loads((path / "state.json").read_text()) == {
        "step": 3,
        "loss": 1.5,
        "best": {"step": 2},
    }
    assert latest_checkpoint(tmp_path) == path
    assert no_temps(tmp_path)


def test_keep_the_last_checkpoints_and_replace_a_saved_step(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        save(tmp_path, step, keep=2)
    assert [p.name for p in sorted((tmp_path / "checkpoints").iterdir())] == [
        "step-00000003",
        "step-00000004",
    ]
    save(tmp_path, 4, keep=2, again=True)
    assert load_checkpoint(tmp_path, model=decoder(dropout=0.1))["again"] is True
    save(tmp_path, 2)  # resumed from an earlier step: the later checkpoints are stale
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-00000002"]
    assert no_temps(tmp_path)


def test_no_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    with pytest.raises(FileNotFoundError, match="no checkpoint to resume from in"):
        load_checkpoint(tmp_path / "missing", model=decoder())


def test_a_dangling_pointer_falls_back_to_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        save(tmp_path, step, keep=3)
    shutil.rmtree(tmp_path / "checkpoints" / "step-00000003")
    (tmp_path / "checkpoints" / "step-00000002" / "rng.pt").unlink()  # incomplete
    with pytest.warns(UserWarning, match="names no complete checkpoint"):
        assert load_checkpoint(tmp_path, model=decoder(dropout=0.1))["step"] == 1


def test_leftovers_of_a_killed_writer_are_ignored_then_removed(tmp_path: Path) -> None:
    save(tmp_path, 1)
    half = tmp_path / "checkpoints" / ".step-00000002.tmp-dead"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"\x00" * 10)
    (tmp_path / ".trainer_state.json.tmp-dead").write_text('{"checkpoint": "checkpoi')
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step-00000001"
    save(tmp_path, 2)
    assert no_temps(tmp_path)


def test_bad_arguments_fail_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="state key 'checkpoint' is reserved"):
        save(tmp_path, 1, checkpoint="mine")
    with pytest.raises(TypeError, match="not JSON serializable"):
        save(tmp_path, 1, loss=torch.tensor(1.0))
    with pytest.raises(ValueError, match="keep=0 must be an integer >= 1"):
        save(tmp_path, 1, keep=0)
    assert list(tmp_path.iterdir()) == []


def test_torch_load_is_only_called_with_weights_only() -> None:
    calls = 0
    for source in Path(scratchformer.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
                calls += 1
                safe = any(
                    k.arg == "weights_only" and ast.unparse(k.value) == "True"
                    for k in node.keywords
                )
                assert safe, f"{source}:{node.lineno} calls torch.load without weights_only=True"
    assert calls >= 1


# A writer killed at random moments -------------------------------------------------------

WRITER = """
import random, sys, torch
from scratchformer import ModelConfig, build_model
from scratchformer.training import (
    build_schedule, latest_checkpoint, load_checkpoint, save_checkpoint
)

torch.set_num_threads(1)
model = build_model(ModelConfig(**CONFIG))  # 4.5 MB of weights, twice that of AdamW state
optimizer = torch.optim.AdamW(model.parameters())
model(torch.zeros(1, 1, dtype=torch.long)).logits.sum().backward()
optimizer.step()
scheduler = build_schedule("constant", optimizer, warmup_steps=0, max_steps=1)
sys.stdin.readline()  # started early; told to go once the writer before it is dead
step = 0
if latest_checkpoint(sys.argv[1]) is not None:
    resumed = load_checkpoint(sys.argv[1], model=model, optimizer=optimizer, scheduler=scheduler)
    step = resumed["step"]
while True:
    step += 1
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(step)
        for state in optimizer.state.values():
            state["exp_avg"].fill_(step)
    scheduler.step()
    random.seed(step)
    torch.manual_seed(step)
    save_checkpoint(
        sys.argv[1], step=step, model=model, optimizer=optimizer, scheduler=scheduler,
        state={"filled_with": step},
    )
    print(step, flush=True)
"""
CONFIG = dict(arch="decoder", vocab_size=8192, d_model=128, n_heads=2, n_layers=1, d_ff=256)


def test_a_writer_killed_at_random_moments_leaves_a_consistent_checkpoint(tmp_path: Path) -> None:
    """Writers save checkpoints in a loop, each resuming from the one before; each is killed
    at a random moment, mostly in the middle of a save. Every time, the latest checkpoint
    loads, and all its files are of one step."""
    script = tmp_path / "writer.py"
    script.write_text(f"CONFIG = {CONFIG!r}\n{WRITER}")
    run_dir = tmp_path / "run"
    stderr = (tmp_path / "stderr.txt").open("w")
    writers = [  # all at once: they import torch in parallel
        subprocess.Popen(
            [sys.executable, str(script), str(run_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        for _ in range(3)
    ]
    watchdog = threading.Timer(300, lambda: [writer.kill() for writer in writers])
    watchdog.start()
    moments = random.Random(0)
    saved = 0
    try:
        for writer in writers:
            writer.stdin.write("go\n")
            writer.stdin.flush()
            for _ in range(moments.randint(1, 3)):
                line = writer.stdout.readline()
                assert line, (tmp_path / "stderr.txt").read_text()
                assert int(line) > saved
                saved = int(line)
            time.sleep(moments.uniform(0.0, 0.08))  # a save takes some 30-80 ms
            writer.send_signal(signal.SIGKILL)
            writer.wait()

            model = build_model(ModelConfig(**CONFIG))
            optimizer = torch.optim.AdamW(model.parameters())
            scheduler = build_schedule("constant", optimizer, warmup_steps=0, max_steps=1)
            state = load_checkpoint(run_dir, model=model, optimizer=optimizer, scheduler=scheduler)
            step = state["step"]
            assert step >= saved  # the last printed, or one saved since
            assert state == {"filled_with": step, "step": step}
            assert all(torch.all(p == step) for p in model.parameters())
            assert all(torch.all(s["exp_avg"] == step) for s in optimizer.state.values())
            assert scheduler.last_epoch == step
            assert random.random() == random.Random(step).random()
            assert torch.equal(
                torch.rand(3), torch.rand(3, generator=torch.Generator().manual_seed(step))
            )
            saved = step
    finally:
        watchdog.cancel()
        for writer in writers:
            writer.kill()
            writer.wait()
            writer.stdin.close()
            writer.stdout.close()
        stderr.close()


def test_the_moving_average_is_saved_beside_the_weights_and_resumed(tmp_path: Path) -> None:
    model, optimizer, scheduler = trainee(0)
    average = exponential_average(model, decay=0.9)
    for _ in range(3):
        train(model, optimizer, scheduler, 1)
        average.update_parameters(model)
    parts = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
    path = save_checkpoint(tmp_path, step=3, state={}, average=average, **parts)
    assert (path / "average.safetensors").is_file()

    resumed = exponential_average(trainee(1)[0], decay=0.9)
    load_checkpoint(tmp_path, model=trainee(1)[0], average=resumed)
    assert_same_weights(average, resumed)
    assert resumed.n_averaged.item() == 3

    save_checkpoint(tmp_path, step=4, state={}, **parts)  # a run without an average
    with pytest.raises(ValueError, match=r"step-00000004 holds no average.safetensors.*ema_decay"):
        load_checkpoint(tmp_path, model=model, average=resumed)
