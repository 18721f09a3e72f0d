"""DPO's loss: sequence log-probabilities and the loss by hand, then loss, rewards, metrics
and the policy's gradients against TRL's ``DPOTrainer`` on the same model and pairs."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from scratchformer.nn.loss import IGNORE_INDEX
from scratchformer.nn.preference import dpo_loss, sequence_logprobs


def test_sequence_logprobs_sum_the_counted_targets_log_probabilities() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6, dtype=torch.float64)
    targets = torch.tensor([[IGNORE_INDEX, 3, 5, IGNORE_INDEX], [0, IGNORE_INDEX, 2, 1]])
    expected = []
    for row in range(2):
        total = 0.0
        for t in range(4):
            target = int(targets[row, t])
            if target != IGNORE_INDEX:
                scores = [float(x) for x in logits[row, t]]
                total += scores[target] - math.log(sum(math.exp(x) for x in scores))
        expected.append(total)
    found = sequence_logprobs(logits, targets)
    assert found.shape == (2,)
    assert torch.allclose(found, torch.tensor(expected, dtype=torch.float64), atol=1e-12)
    changed = logits.clone()
    changed[0, 0] += 100.0  # an ignored position: nothing there counts
    assert torch.equal(sequence_logprobs(changed, targets), found)


def test_sequence_logprobs_of_half_precision_logits_are_float32() -> None:
    logits = torch.randn(1, 3, 5).bfloat16()
    found = sequence_logprobs(logits, torch.tensor([[1, 2, 3]]))
    assert found.dtype == torch.float32
    assert torch.allclose(found, sequence_logprobs(logits.float(), torch.tensor([[1, 2, 3]])))


def test_the_loss_rewards_and_metrics_by_hand() -> None:
    beta = 0.5
    policy_c, policy_r = torch.tensor([-3.0, -8.0, -2.0]), torch.tensor([-4.0, -5.0, -6.0])
    ref_c, ref_r = torch.tensor([-3.5, -7.0, -2.0]), torch.tensor([-4.0, -6.0, -5.0])
    out = dpo_loss(policy_c, policy_r, ref_c, ref_r, beta)
    chosen = [beta * (p - r) for p, r in zip([-3.0, -8.0, -2.0], [-3.5, -7.0, -2.0], strict=True)]
    rejected = [beta * (p - r) for p, r in zip([-4.0, -5.0, -6.0], [-4.0, -6.0, -5.0], strict=True)]
    losses = [math.log1p(math.exp(-(c - r))) for c, r in zip(chosen, rejected, strict=True)]
    assert torch.allclose(out.losses, torch.tensor(losses))
    assert torch.allclose(out.loss, torch.tensor(sum(losses) / 3))
    assert out.chosen_rewards.tolist() == chosen and out.rejected_rewards.tolist() == rejected
    metrics = out.metrics()
    assert metrics["rewards/chosen"] == pytest.approx(sum(chosen) / 3)
    assert metrics["rewards/rejected"] == pytest.approx(sum(rejected) / 3)
    margins = [c - r for c, r in zip(chosen, rejected, strict=True)]
    assert metrics["rewards/margins"] == pytest.approx(sum(margins) / 3)
    assert metrics["rewards/accuracies"] == pytest.approx(2 / 3)  # 0.25 > 0, -0.5 < 0.5, 0.5 > -0.5


def test_only_the_policy_s_log_probabilities_carry_the_gradient() -> None:
    policy = torch.tensor([-3.0, -4.0], requires_grad=True)
    out = dpo_loss(policy[:1], policy[1:], torch.tensor([-3.0]), torch.tensor([-4.0]), 1.0)
    assert not out.chosen_rewards.requires_grad and not out.rejected_rewards.requires_grad
    out.loss.backward()
    # d/dx -log sigmoid(x) = -sigmoid(-x) = -1/2 at x = 0
    assert policy.grad.tolist() == [-0.5, 0.5]


@pytest.mark.parametrize(
    ("shapes", "beta", "message"),
    [
        ([(2,), (2,), (2,), (3,)], 0.1, "alike"),
        ([(2, 1)] * 4, 0.1, "alike"),
        ([(2,)] * 4, 0.0, "beta=0.0 must be positive"),
    ],
)
def test_bad_inputs_are_errors(shapes, beta, message) -> None:
    with pytest.raises(ValueError, match=message):
        dpo_loss(*(torch.zeros(shape) for shape in shapes), beta)
    with pytest.raises(ValueError, match="do not match"):
        sequence_logprobs(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


PAIRS = {
    "prompt": ["w1 w2 w3", "w4", "w5 w6", "w7 w8 w9 w10"],
    "chosen": [" w11 w12", " w13", " w14 w15 w16", " w17"],
    "rejected": [" w18", " w19 w20 w21", " w22", " w23 w24"],
}
"""Four pairs whose prompts and responses differ in length, so that rows are padded."""


@pytest.mark.filterwarnings("ignore")  # TRL's and transformers' own deprecations
@pytest.mark.parametrize("sft_weight", [0.0, 0.5], ids=["dpo", "dpo+sft"])
def test_loss_rewards_and_gradients_equal_trl_s(tmp_path: Path, sft_weight: float) -> None:
    """A tiny random Llama in float64 as the reference and a perturbed copy as the policy:
    TRL's ``DPOTrainer`` computes its loss from its own batch (prompt + response rows, the
    chosen then the rejected, right-padded, scored on the response tokens); ours scores the
    same rows through :func:`sequence_logprobs` and :func:`dpo_loss`. TRL sums
    log-probabilities in float32 (its fused LM head), hence 1e-5."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import DPOConfig, DPOTrainer

    words = ["<pad>", "</s>", "<unk>"] + [f"w{i}" for i in range(29)]
    vocabulary = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, "<unk>"))
    vocabulary.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=vocabulary, eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    torch.manual_seed(2)  # a seed whose pairs fall on both sides of the margin
    config = LlamaConfig(
        vocab_size=len(words),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        pad_token_id=0,
        eos_token_id=1,
    )
    reference = LlamaForCausalLM(config).double()
    policy = copy.deepcopy(reference)
    with torch.no_grad():
        for parameter in policy.parameters():  # as after some training
            parameter.add_(torch.randn_like(parameter), alpha=0.3)
    ours, our_reference = copy.deepcopy(policy), copy.deepcopy(reference)
    beta = 0.3
    losses = {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, sft_weight]}
    args = DPOConfig(  # no bf16, which TRL's reference model would otherwise run in
        output_dir=str(tmp_path),
        beta=beta,
        bf16=False,
        report_to=[],
        use_cpu=True,
        **(losses if sft_weight else {}),
    )
    trainer = DPOTrainer(
        model=policy,
        ref_model=reference,
        args=args,
        train_dataset=Dataset.from_dict(PAIRS),
        processing_class=tokenizer,
    )
    trainer.model.train()
    examples = [trainer.train_dataset[i] for i in range(len(PAIRS["prompt"]))]

    def trl(rows: list[dict]) -> tuple[torch.Tensor, dict[str, float]]:
        trainer._metrics["train"].clear()
        loss = trainer._compute_loss(trainer.model, trainer.data_collator(rows), False)
        return loss, {key: values[-1] for key, values in trainer._metrics["train"].items()}

    batch = trainer.data_collator(examples)
    ids, completion = batch["input_ids"], batch["completion_mask"]
    targets = ids[:, 1:].masked_fill(completion[:, 1:] == 0, IGNORE_INDEX)
    inputs = {"input_ids": ids, "attention_mask": batch["attention_mask"]}
    logprobs = sequence_logprobs(ours(**inputs).logits[:, :-1], targets)
    with torch.no_grad():
        reference_logprobs = sequence_logprobs(our_reference(**inputs).logits[:, :-1], targets)
    chosen_tokens = (targets != IGNORE_INDEX).sum(-1).chunk(2)[0]
    found = dpo_loss(
        *logprobs.chunk(2), *reference_logprobs.chunk(2), beta, sft_weight, chosen_tokens
    )
    found.loss.backward()

    expected, metrics = trl(examples)
    expected.backward()
    assert abs(found.loss.item() - expected.item()) < 1e-5
    ours_metrics = found.metrics()
    for key in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"):
        assert ours_metrics[key] == pytest.approx(metrics[key], abs=1e-5), key
    assert ours_metrics["rewards/accuracies"] == 0.5
    for pair, example in enumerate(examples):  # TRL logs means: one pair at a time
        _, alone = trl([example])
        assert found.chosen_rewards[pair].item() == pytest.approx(alone["rewards/chosen"], abs=1e-5)
        assert found.rejected_rewards[pair].item() == pytest.approx(
            alone["rewards/rejected"], abs=1e-5
        )
    theirs = dict(trainer.model.named_parameters())
    for name, parameter in ours.named_parameters():
        assert (parameter.grad - theirs[name].grad).abs().max() < 1e-5, name
    assert all(p.grad is None for p in our_reference.parameters())
