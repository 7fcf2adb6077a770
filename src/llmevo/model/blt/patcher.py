"""Entropy patching: where a new byte patch starts (BLT, arXiv 2412.09871, section 2.3).

``entropies[..., t]`` is the entropy model's next-byte entropy H(x_t | x_<t) in nats, so
the decision "a patch starts at t" uses bytes before t only. Two rules, chosen by
registered name (``PATCH_RULES``):

- ``global``: start at t where H(x_t) > threshold (the paper's global constraint);
- ``monotonic``: start at t where H(x_t) - H(x_{t-1}) > threshold (the paper's
  approximate monotonic constraint).

Position 0 always starts a patch, and a patch never grows past ``max_patch_len`` bytes
(forced starts at the last natural start + k * max_patch_len; this only depends on
earlier decisions, so it stays causal). Reference: the paper's equations for both rules,
checked against an explicit per-position loop in tests/unit/test_blt_patcher.py.

Deviation: the paper calibrates the threshold by hand; ``calibrate_threshold`` bisects it
so that the mean patch size on the given entropies hits a target (e.g. BPE bytes/token).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from llmevo.errors import ConfigError


def global_scores(entropies: Tensor) -> Tensor:
    """Score compared with the threshold under the global rule: H(x_t).  (..., T)"""
    return entropies


def monotonic_scores(entropies: Tensor) -> Tensor:
    """Score under the monotonic rule: H(x_t) - H(x_{t-1}); position 0 scores -inf.  (..., T)"""
    previous = torch.cat(
        (torch.full_like(entropies[..., :1], float("inf")), entropies[..., :-1]), dim=-1
    )
    return entropies - previous


PATCH_RULES: dict[str, Callable[[Tensor], Tensor]] = {
    "global": global_scores,
    "monotonic": monotonic_scores,
}


def patch_rule(rule: str) -> Callable[[Tensor], Tensor]:
    try:
        return PATCH_RULES[rule]
    except KeyError:
        known = ", ".join(sorted(PATCH_RULES))
        raise ConfigError(f"unknown patching rule '{rule}'; known: {known}") from None


def enforce_max_patch_len(natural_starts: Tensor, max_patch_len: int) -> Tensor:
    """Add forced starts so that no patch is longer than ``max_patch_len``.  (..., T) bool"""
    length = natural_starts.shape[-1]
    positions = torch.arange(length, device=natural_starts.device).expand_as(natural_starts)
    last_natural = torch.where(natural_starts, positions, torch.zeros_like(positions))
    last_natural = last_natural.cummax(dim=-1).values  # (..., T)
    since = positions - last_natural
    forced = (since > 0) & (since % max_patch_len == 0)
    return natural_starts | forced


def entropy_patch_starts(
    entropies: Tensor, threshold: float, rule: str = "global", max_patch_len: int = 16
) -> Tensor:
    """Bool (..., T): True where a patch starts. Position 0 always starts a patch."""
    if max_patch_len < 1:
        raise ConfigError(f"max_patch_len must be >= 1, got {max_patch_len}")
    natural = patch_rule(rule)(entropies) > threshold  # (..., T)
    natural[..., 0] = True
    return enforce_max_patch_len(natural, max_patch_len)


def patch_ids(starts: Tensor) -> Tensor:
    """Index of the patch each position belongs to (0-based).  (..., T) long"""
    return starts.long().cumsum(dim=-1) - 1


def mean_patch_size(starts: Tensor) -> float:
    """Positions per patch over all rows of ``starts``."""
    return starts.numel() / max(int(starts.sum()), 1)


def calibrate_threshold(
    entropies: Tensor,
    target_mean_patch_size: float,
    rule: str = "global",
    max_patch_len: int = 16,
    iterations: int = 60,
) -> float:
    """The threshold whose mean patch size on ``entropies`` (rows = windows) is nearest the target.

    The mean patch size is non-decreasing in the threshold (fewer natural starts never add
    patches: ceil((a + b) / M) <= ceil(a / M) + ceil(b / M)), so bisection applies. Raises
    ``ConfigError`` when the target is outside the reachable range [1, max_patch_len].
    """
    if not 1.0 <= target_mean_patch_size <= max_patch_len:
        raise ConfigError(
            f"target mean patch size {target_mean_patch_size:g} is unreachable;"
            f" expected a value in [1, {max_patch_len}] (1 .. max_patch_len bytes)"
        )
    scores = patch_rule(rule)(entropies)
    finite = scores[torch.isfinite(scores)]
    low, high = float(finite.min()) - 1.0, float(finite.max()) + 1.0
    best, best_error = high, float("inf")
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        size = mean_patch_size(entropy_patch_starts(entropies, middle, rule, max_patch_len))
        if abs(size - target_mean_patch_size) < best_error:
            best, best_error = middle, abs(size - target_mean_patch_size)
        if size < target_mean_patch_size:
            low = middle
        else:
            high = middle
    return best
