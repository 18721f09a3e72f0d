"""Direct preference optimisation's loss (DPO; Rafailov et al., 2023).

A pair of responses to one prompt, one preferred (chosen) and one not (rejected), is scored
by the log-probability of each response under the model being trained, the policy ``pi``,
and under a frozen reference ``ref`` (the model training started from). With ``beta``
setting how far the policy may move from the reference, a response's implicit reward is
``beta (pi - ref)``, and the loss of a pair is ``-log sigmoid`` of the chosen response's
reward less the rejected one's: it raises the chosen response's probability relative to the
reference more than the rejected one's, with no reward model and no sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .loss import IGNORE_INDEX


def sequence_logprobs(logits: Tensor, targets: Tensor, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """The log-probability of each row's targets, ``(batch,)``: the sum over positions
    ``t`` of ``log_softmax(logits[:, t])[targets[:, t]]``, where ``logits`` ``(batch, seq,
    vocab)`` at ``t`` predicts ``targets[:, t]`` (already shifted, as a language model's
    ``labels``) and targets equal to ``ignore_index`` (the prompt, padding) count nothing.
    Computed in float32 at least, since sums of many half-precision terms drift."""
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} do not match targets {tuple(targets.shape)}"
        )
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    counted = targets != ignore_index
    picked = logits.gather(-1, targets.masked_fill(~counted, 0).unsqueeze(-1)).squeeze(-1)
    token_logprobs = picked - logits.logsumexp(-1)
    return torch.where(counted, token_logprobs, 0.0).sum(-1)


@dataclass(frozen=True)
class PreferenceLoss:
    """DPO's loss of a batch of pairs, and each pair's implicit rewards ``beta (pi -
    ref)`` (detached: they are what is logged, not what is trained)."""

    losses: Tensor
    """``(pairs,)``: ``-log sigmoid(chosen reward - rejected reward)`` of each pair."""
    chosen_rewards: Tensor
    rejected_rewards: Tensor

    @property
    def loss(self) -> Tensor:
        """The mean over the pairs: what is trained."""
        return self.losses.mean()

    def metrics(self) -> dict[str, float]:
        """The batch's means under the names TRL logs them by: the rewards, their margin
        (chosen less rejected) and how often the chosen response's reward is the higher."""
        chosen, rejected = self.chosen_rewards, self.rejected_rewards
        return {
            "rewards/chosen": chosen.mean().item(),
            "rewards/rejected": rejected.mean().item(),
            "rewards/margins": (chosen - rejected).mean().item(),
            "rewards/accuracies": (chosen > rejected).float().mean().item(),
        }


def dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    reference_chosen: Tensor,
    reference_rejected: Tensor,
    beta: float,
) -> PreferenceLoss:
    """The sigmoid DPO loss of pairs whose responses' log-probabilities (``(pairs,)`` each,
    as :func:`sequence_logprobs` gives them) are ``policy_*`` under the policy and
    ``reference_*`` under the frozen reference: ``-log sigmoid(beta [(pi_c - ref_c) - (pi_r
    - ref_r)])`` per pair (the paper's equation 7)."""
    if not beta > 0:
        raise ValueError(f"beta={beta} must be positive")
    scores = (policy_chosen, policy_rejected, reference_chosen, reference_rejected)
    if policy_chosen.dim() != 1 or any(t.shape != policy_chosen.shape for t in scores):
        shapes = ", ".join(str(tuple(t.shape)) for t in scores)
        raise ValueError(f"the four log-probabilities must be (pairs,) alike, not {shapes}")
    chosen_ratios = policy_chosen - reference_chosen
    rejected_ratios = policy_rejected - reference_rejected
    losses = -F.logsigmoid(beta * (chosen_ratios - rejected_ratios))
    return PreferenceLoss(losses, beta * chosen_ratios.detach(), beta * rejected_ratios.detach())
