"""The math of post-training, as small pure functions that tests call directly.

- SFT (InstructGPT, arXiv 2203.02155): next-token loss on response tokens only
  (``response_target_mask``, ``masked_mean_nll``).
- NEFTune (arXiv 2310.05914, Algorithm 1): uniform noise in [-1, 1] on the input
  embeddings, scaled by ``alpha / sqrt(L * d)`` with L the sequence length and d the
  embedding width (``neftune_scale``, ``neftune_noise``).
- DPO (arXiv 2305.18290, eq. 7): ``-log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r)))``
  on summed response log-probabilities (``dpo_loss``); TRL's ``sigmoid`` loss with no
  label smoothing is the same formula (checked in tests/reference/test_posttrain_reference.py).
- GRPO (DeepSeekMath, arXiv 2402.03300, eq. 3 with outcome supervision): advantages are
  rewards normalised within each group (``group_advantages``), the per-token objective is
  the PPO clipped surrogate minus ``kl_beta`` times the unbiased KL estimator
  ``pi_ref/pi - log(pi_ref/pi) - 1`` (eq. 4), averaged over each completion's tokens and
  then over completions (``grpo_loss``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def response_target_mask(lengths: Tensor, response_starts: Tensor, width: int) -> Tensor:
    """Which next-token targets are response tokens: ``(B, width)`` bool.

    Rows are ``<bos> prompt response`` right-padded to ``width + 1`` tokens; target ``j`` is
    token ``j + 1``, scored when ``response_start - 1 <= j < length - 1`` (the same rule as
    the benchmark suites), so prompt tokens and padding carry no loss.
    """
    positions = torch.arange(width, device=lengths.device)  # (T,)
    return (positions >= response_starts[:, None] - 1) & (positions < lengths[:, None] - 1)


def token_log_probs(logits: Tensor, targets: Tensor) -> Tensor:
    """log p(target) at every position: logits (B, T, V), targets (B, T) -> (B, T)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def masked_mean_nll(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Mean negative log-likelihood over the masked targets (the SFT loss), a scalar."""
    nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    mask = mask.flatten().to(nll.dtype)  # (B*T,)
    return (nll * mask).sum() / mask.sum().clamp_min(1.0)


def sequence_log_probs(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Summed log-probability of each row's masked targets: ``(B,)``."""
    return (token_log_probs(logits, targets) * mask.to(torch.float32)).sum(dim=-1)


def neftune_scale(alpha: float, length: int | Tensor, dim: int) -> Tensor:
    """NEFTune's noise magnitude ``alpha / sqrt(L * d)``."""
    length = torch.as_tensor(length, dtype=torch.float32)
    return alpha / torch.sqrt(length * dim)


def neftune_noise(
    embeddings: Tensor, lengths: Tensor, alpha: float, generator: torch.Generator | None = None
) -> Tensor:
    """Noise to add to ``embeddings`` (B, T, D): Uniform(-1, 1) x alpha / sqrt(L_b * D) per row.

    ``L_b`` is row b's unpadded length (the paper's sequence length); padding positions
    come after every scored one and never influence them in a causal model.
    """
    batch, width, dim = embeddings.shape
    uniform = torch.rand(
        (batch, width, dim), generator=generator, dtype=embeddings.dtype, device="cpu"
    ).to(embeddings.device) * 2.0 - 1.0  # (B, T, D) in [-1, 1)
    scale = neftune_scale(alpha, lengths.clamp_min(1), dim).to(embeddings)  # (B,)
    return uniform * scale[:, None, None]


def dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    reference_chosen: Tensor,
    reference_rejected: Tensor,
    beta: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """DPO per pair: (loss, chosen reward, rejected reward), each ``(N,)``.

    Inputs are summed response log-probabilities; the implicit rewards are
    ``beta * (log pi - log pi_ref)`` (DPO section 5).
    """
    if beta <= 0:
        raise ValueError(f"beta must be positive, got {beta}")
    chosen_reward = beta * (policy_chosen - reference_chosen)
    rejected_reward = beta * (policy_rejected - reference_rejected)
    loss = -F.logsigmoid(chosen_reward - rejected_reward)
    return loss, chosen_reward.detach(), rejected_reward.detach()


def group_advantages(rewards: Tensor, eps: float = 1e-4) -> Tensor:
    """GRPO outcome advantages: ``(r - mean_g) / (std_g + eps)`` within each group.

    ``rewards`` is ``(N, G)`` (N groups of G samples); std is the sample standard deviation
    (Bessel-corrected, as TRL's GRPOTrainer). A group with equal rewards gets advantage 0.
    """
    if rewards.shape[-1] < 2:
        raise ValueError("a group needs at least 2 samples to normalise rewards within it")
    mean = rewards.mean(dim=-1, keepdim=True)
    std = rewards.std(dim=-1, keepdim=True)
    return (rewards - mean) / (std + eps)


def reward_bearing(rewards: Tensor) -> Tensor:
    """``(N,)`` bool: groups whose rewards are not all equal (they carry a learning signal)."""
    return (rewards != rewards[..., :1]).any(dim=-1)


def kl_estimate(policy_log_probs: Tensor, reference_log_probs: Tensor) -> Tensor:
    """The unbiased, non-negative per-token KL estimator of GRPO eq. 4."""
    log_ratio = reference_log_probs - policy_log_probs
    return torch.exp(log_ratio) - log_ratio - 1.0


def grpo_loss(
    policy_log_probs: Tensor,
    old_log_probs: Tensor,
    reference_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_epsilon: float,
    kl_beta: float,
) -> tuple[Tensor, Tensor]:
    """Negative GRPO objective and the mean KL, for completions ``(M, T)``.

    ``advantages`` is ``(M,)`` (one per completion, shared by its tokens). Per token:
    ``min(rho A, clip(rho, 1-eps, 1+eps) A) - kl_beta * KL`` with ``rho = pi / pi_old``;
    averaged over each completion's masked tokens, then over completions.
    """
    ratio = torch.exp(policy_log_probs - old_log_probs)  # (M, T)
    advantage = advantages[:, None]  # (M, 1)
    surrogate = torch.minimum(
        ratio * advantage, ratio.clamp(1.0 - clip_epsilon, 1.0 + clip_epsilon) * advantage
    )
    kl = kl_estimate(policy_log_probs, reference_log_probs)  # (M, T)
    weights = mask.to(policy_log_probs.dtype)
    counts = weights.sum(dim=-1).clamp_min(1.0)  # (M,)
    per_completion = ((surrogate - kl_beta * kl) * weights).sum(dim=-1) / counts
    mean_kl = ((kl * weights).sum(dim=-1) / counts).mean()
    return -per_completion.mean(), mean_kl.detach()

