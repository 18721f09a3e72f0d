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
    sft: Tensor | None = None
    """The weighted SFT term of the batch (:func:`chosen_nll`), if any."""

    @property
    def loss(self) -> Tensor:
        """The mean over the pairs, plus the SFT term: what is trained."""
        mean = self.losses.mean()
        return mean if self.sft is None else mean + self.sft

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


def chosen_nll(policy_chosen: Tensor, chosen_tokens: Tensor) -> Tensor:
    """The negative log-probability of the chosen responses' tokens, averaged over all of
    them (``chosen_tokens``: each response's count): supervised fine-tuning on the chosen
    responses, TRL's ``sft`` loss type in a DPO batch."""
    return -policy_chosen.sum() / chosen_tokens.sum().clamp(min=1)


def dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    reference_chosen: Tensor,
    reference_rejected: Tensor,
    beta: float,
    sft_weight: float = 0.0,
    chosen_tokens: Tensor | None = None,
) -> PreferenceLoss:
    """The sigmoid DPO loss of pairs whose responses' log-probabilities (``(pairs,)`` each,
    as :func:`sequence_logprobs` gives them) are ``policy_*`` under the policy and
    ``reference_*`` under the frozen reference: ``-log sigmoid(beta [(pi_c - ref_c) - (pi_r
    - ref_r)])`` per pair (the paper's equation 7). With ``sft_weight``, plus that times
    :func:`chosen_nll` of the chosen responses (of ``chosen_tokens`` tokens each), as TRL's
    ``loss_type=["sigmoid", "sft"]`` with ``loss_weights=[1, sft_weight]`` (RPO, Pang et al.
    2024): it keeps the chosen responses likely while the rejected ones are pushed down."""
    if not beta > 0:
        raise ValueError(f"beta={beta} must be positive")
    scores = (policy_chosen, policy_rejected, reference_chosen, reference_rejected)
    if policy_chosen.dim() != 1 or any(t.shape != policy_chosen.shape for t in scores):
        shapes = ", ".join(str(tuple(t.shape)) for t in scores)
        raise ValueError(f"the four log-probabilities must be (pairs,) alike, not {shapes}")
    chosen_ratios = policy_chosen - reference_chosen
    rejected_ratios = policy_rejected - reference_rejected
    losses = -F.logsigmoid(beta * (chosen_ratios - rejected_ratios))
    sft = None
    if sft_weight:
        if chosen_tokens is None:
            raise ValueError("an SFT term (sft_weight) needs the chosen responses' token counts")
        sft = sft_weight * chosen_nll(policy_chosen, chosen_tokens)
    return PreferenceLoss(
        losses, beta * chosen_ratios.detach(), beta * rejected_ratios.detach(), sft
    )
