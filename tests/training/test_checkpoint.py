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
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from helpers import assert_same_weights, decoder
from scratchformer import ModelConfig, build_model
from scratchformer.training import (
    build_schedule,
    capture_rng,
    exponential_average,
    latest_checkpoint,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from scratchformer.training.trainer import check_state


@pytest.fixture(autouse=True)
def _keep_global_rng() -> Iterator[None]:
    """These tests move the global random states around; leave them as they were."""
    state = capture_rng()
    yield
    restore_rng(state)


def no_temps(directory: Path) -> bool:
    return not list(directory.rglob(".*.tmp-*"))


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
        assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step-00000001"
    missing = r"step-00000003 is missing; .*step-00000002/rng.pt is missing: resuming from "
    with pytest.warns(UserWarning, match=missing + r".*step-00000001$"):
        assert load_checkpoint(tmp_path, model=decoder(dropout=0.1))["step"] == 1


@pytest.mark.parametrize("elsewhere", ["other/checkpoints/step-00000009", "ABSOLUTE", "../x"])
def test_a_pointer_out_of_the_runs_checkpoints_names_none(tmp_path: Path, elsewhere) -> None:
    run_dir, other = tmp_path / "run", tmp_path / "other"
    save(other, 9)
    save(run_dir, 1)
    target = str(other / "checkpoints/step-00000009") if elsewhere == "ABSOLUTE" else elsewhere
    if elsewhere.startswith("other"):
        target = f"../{elsewhere}"
    (run_dir / "trainer_state.json").write_text(json.dumps({"checkpoint": target}))
    with pytest.warns(UserWarning, match="names no complete checkpoint"):
        assert latest_checkpoint(run_dir) == run_dir / "checkpoints" / "step-00000001"
    with pytest.warns(UserWarning, match="names no checkpoint"):
        assert load_checkpoint(run_dir, model=decoder(dropout=0.1))["step"] == 1


def test_swapped_files_and_states_of_wrong_types_fall_back_to_the_checkpoint_before(
    tmp_path: Path,
) -> None:
    for step in (1, 2):
        save(tmp_path, step, keep=2, best=None, best_step=None, bad_evals=0)
    latest = tmp_path / "checkpoints" / "step-00000002"
    (latest / "optimizer.pt").write_bytes((latest / "rng.pt").read_bytes())
    model, optimizer, scheduler = trainee(0)
    fallback = r"does not fit .*: resuming from .*step-00000001$"
    with pytest.warns(UserWarning, match=r"step-00000002/optimizer.pt " + fallback):
        load_checkpoint(tmp_path, model=model, optimizer=optimizer, scheduler=scheduler)
    save(tmp_path, 2, keep=2, best="high", best_step=None, bad_evals=0)
    with pytest.warns(UserWarning, match=r"state.json does not fit \(ValueError: 'best' is "):
        state = load_checkpoint(tmp_path, model=model, check_state=check_state)
    assert state["step"] == 1


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(
    "damaged", ["model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "state.json"]
)
def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(
    tmp_path: Path, damaged: str
) -> None:
    for step in (1, 2):
        save(tmp_path, step, keep=2, saved_at=step)
    latest = tmp_path / "checkpoints" / "step-00000002" / damaged
    truncate(latest)
    model, optimizer, scheduler = trainee(1)
    with pytest.warns(UserWarning, match=rf"^{latest} does not load \(.*\): resuming from "):
        state = load_checkpoint(tmp_path, model=model, optimizer=optimizer, scheduler=scheduler)
    assert state == {"saved_at": 1, "step": 1}
    assert_same_weights(model, trainee(0)[0])

    before = tmp_path / "checkpoints" / "step-00000001" / "model.safetensors"
    truncate(before)
    with pytest.raises(ValueError, match=rf"no checkpoint of .* loads: {latest} .*; {before} "):
        load_checkpoint(tmp_path, model=model, optimizer=optimizer, scheduler=scheduler)


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
