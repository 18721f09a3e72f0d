import io
import math
from itertools import pairwise

import pytest
import torch

from scratchformer.config import SCHEDULES, TrainConfig
from scratchformer.training import build_schedule


def optimizer(lr: float = 1.0) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=lr)


def lrs(scheduler: torch.optim.lr_scheduler.LambdaLR, steps: int) -> list[float]:
    """The lr of updates 1 .. ``steps``, as a training loop sees them."""
    out = []
    for _ in range(steps):
        out.append(scheduler.optimizer.param_groups[0]["lr"])
        scheduler.optimizer.step()
        scheduler.step()
    return out


PAPER_STEPS = (1, 2000, 4000, 16000, 100000)
PAPER_LRS = (1.74693e-7, 3.49386e-4, 6.98771e-4, 3.49386e-4, 1.39754e-4)
"""The paper's base model (d_model 512, 4000 warm-up steps) at ``PAPER_STEPS``, by hand:
512^-0.5 * 4000^-1.5 at step 1, half and all of the peak (512 * 4000)^-0.5 at 2000 and 4000,
sqrt(4000 / step) of it after."""


def test_noam_with_lr_from_d_model_and_warmup_is_the_papers_formula() -> None:
    d_model, warmup = 512, 4000
    lr = (d_model * warmup) ** -0.5  # 6.99e-4: the setting the docs give
    scheduler = build_schedule("noam", optimizer(lr), warmup_steps=warmup, max_steps=1)
    ours = [lr * scheduler.lr_lambdas[0](step - 1) for step in PAPER_STEPS]
    papers = [d_model**-0.5 * min(s**-0.5, s * warmup**-1.5) for s in PAPER_STEPS]
    assert ours == pytest.approx(papers, rel=1e-12)  # equal up to float rounding
    assert ours == pytest.approx(PAPER_LRS, rel=1e-5)  # the hand values' six digits
    assert lrs(scheduler, 2) == pytest.approx([lr / warmup, 2 * lr / warmup], rel=1e-12)


def test_noam_and_inverse_sqrt_are_one_schedule() -> None:
    def curve(name: str) -> list[float]:
        return lrs(build_schedule(name, optimizer(0.3), warmup_steps=7, max_steps=1), 40)

    assert curve("noam") == curve("inverse_sqrt")


def test_cosine_warms_up_decays_and_stays_at_the_floor() -> None:
    scheduler = build_schedule(
        "cosine", optimizer(0.5), warmup_steps=10, max_steps=110, min_lr_ratio=0.1
    )
    lr = lrs(scheduler, 200)
    assert lr[0] == pytest.approx(0.05)  # step 1: 1/10 of the way up
    assert lr[4] == pytest.approx(0.25)
    assert lr[9] == pytest.approx(0.5)  # the peak at step 10
    assert lr[59] == pytest.approx(0.5 * (0.1 + 0.9 * 0.5))  # half way down the cosine
    assert lr[34] == pytest.approx(0.5 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4))))
    assert lr[109] == pytest.approx(0.05)  # the floor at max_steps
    assert lr[199] == pytest.approx(0.05)
    assert all(a >= b for a, b in pairwise(lr[9:])), "not decaying after warm-up"


def test_cosine_without_warm_up_decays_from_the_first_step_to_the_floor_on_the_last() -> None:
    lr = lrs(build_schedule("cosine", optimizer(), warmup_steps=0, max_steps=4), 5)
    assert lr == pytest.approx([0.5 + 0.5**1.5, 0.5, 0.5 - 0.5**1.5, 0.0, 0.0])


def test_constant_with_and_without_warm_up() -> None:
    assert lrs(build_schedule("constant", optimizer(), warmup_steps=4, max_steps=1), 6) == (
        pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])
    )
    assert (
        lrs(build_schedule("constant", optimizer(3.0), warmup_steps=0, max_steps=1), 3) == [3.0] * 3
    )


def test_inverse_sqrt_is_fairseqs() -> None:
    lr = lrs(build_schedule("inverse_sqrt", optimizer(), warmup_steps=4, max_steps=1), 16)
    assert lr[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lr[8] == pytest.approx(math.sqrt(4 / 9))
    assert lr[15] == pytest.approx(0.5)


@pytest.mark.parametrize("name", SCHEDULES)
def test_every_schedule_peaks_at_train_lr_at_warmup_steps(name: str) -> None:
    """``train.lr`` means the peak lr whatever the schedule: reached at ``warmup_steps``,
    equal to ``train.lr`` up to float rounding (relative 1e-12), never exceeded."""
    config = TrainConfig(schedule=name, lr=3e-4, warmup_steps=50, max_steps=200)
    scheduler = build_schedule(
        config.schedule,
        optimizer(config.lr),
        warmup_steps=config.warmup_steps,
        max_steps=config.max_steps,
        min_lr_ratio=config.min_lr_ratio,
    )
    lr = lrs(scheduler, config.max_steps)
    assert all(a < b for a, b in pairwise(lr[:50])), "warm-up is not increasing"
    assert max(lr) == lr[49]
    assert lr[49] == pytest.approx(config.lr, rel=1e-12)


@pytest.mark.parametrize("name", SCHEDULES)
def test_state_dict_round_trip_gives_the_same_next_lrs(name: str) -> None:
    def build() -> torch.optim.lr_scheduler.LambdaLR:
        return build_schedule(name, optimizer(0.1), warmup_steps=5, max_steps=20)

    scheduler = build()
    lrs(scheduler, 7)
    buffer = io.BytesIO()
    torch.save(
        {"optimizer": scheduler.optimizer.state_dict(), "scheduler": scheduler.state_dict()}, buffer
    )
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    resumed = build()
    resumed.optimizer.load_state_dict(saved["optimizer"])
    resumed.load_state_dict(saved["scheduler"])
    assert lrs(resumed, 20) == lrs(scheduler, 20)


@pytest.mark.parametrize(
    ("name", "values", "message"),
    [
        ("foo", {}, "schedule='foo' must be one of noam, cosine, constant, inverse_sqrt"),
        ("cosine", {"warmup_steps": -1}, "warmup_steps=-1 must be >= 0"),
        ("cosine", {"warmup_steps": 1.5}, "warmup_steps=1.5 must be >= 0"),
        ("cosine", {"max_steps": 0}, "max_steps=0 must be >= 1"),
        ("cosine", {"warmup_steps": 20}, "max_steps=10 must be >= warmup_steps=20"),
        ("cosine", {"min_lr_ratio": 1.5}, "min_lr_ratio=1.5 must be in [0, 1]"),
        ("noam", {"warmup_steps": 0}, "warmup_steps=0 must be >= 1 for schedule='noam'"),
        ("inverse_sqrt", {"warmup_steps": 0}, "warmup_steps=0 must be >= 1"),
    ],
)
def test_bad_values_name_the_field(name: str, values: dict, message: str) -> None:
    kwargs = {"warmup_steps": 2, "max_steps": 10, **values}
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        build_schedule(name, optimizer(), **kwargs)
