"""Cautious AdamW: AdamW's update, masked where its sign disagrees with the gradient's.

Liang, Chen, Liu and Liu, "Cautious Optimizers: Improving Training with One Line of Code",
arXiv 2411.16085 (Algorithm 1, C-AdamW). Per parameter tensor, at step ``t``, with AdamW's
direction ``u = m_hat / (sqrt(v_hat) + eps)`` (``adamw.py``):

    W <- W (1 - lr wd)                       (decoupled weight decay, never masked)
    phi = 1[u * g > 0]                       (the update and the gradient agree in sign)
    W <- W - lr * (phi / mean(phi)) * u      (agreeing entries, rescaled by the mask's mean)

``u`` has the sign of the first moment ``m`` (its denominator is positive), so the mask is
``1[m * g > 0]``. Rescaling by the mask's mean keeps the update's average size when entries are
masked; where every sign agrees, ``phi / mean(phi)`` is exactly 1 and the step is AdamW's bit for
bit. ``CautiousAdamWBatched`` is the same update for R stacked replicas (``train/replicas.py``),
each replica's mask mean taken over its own tensor. Reference tests
(tests/reference/test_optim_reference.py): two steps against the algorithm written out by hand
on a tiny tensor (one step with disagreeing signs); with every sign agreeing, bit-identical to
``torch.optim.AdamW`` over several steps; the batched twin against ``CautiousAdamWOptimizer`` per
replica.

Deviations: the authors' reference code scales by ``numel / (nnz + 1)`` (so it never equals
AdamW exactly); here the exact mean, with ``mean(phi)`` floored at ``MIN_AGREEING`` so that a
tensor whose every sign disagrees gets no update instead of 0/0. A zero gradient masks its
entry (``m * g > 0`` is strict, as in that code).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from llmevo.components.optim.adamw import (
    ADAMW_PAPER_SPACE,
    ADAMW_TUNING_SPACE,
    AdamW,
    AdamWBatched,
    AdamWConfig,
    AdamWOptimizer,
    adam_moments,
)
from llmevo.components.optim.base import arxiv, register_optimizer
from llmevo.components.optim.optimizer import per_replica
from llmevo.registry import SearchDimension

MIN_AGREEING = 1e-3  # the floor of mean(phi): only reached when (almost) every entry is masked


def cautious_scale(exp_avg: Tensor, grad: Tensor) -> Tensor:
    """``phi / max(mean(phi), MIN_AGREEING)`` with ``phi = 1[m * g > 0]``, over the whole tensor."""
    agree = (exp_avg * grad > 0).to(grad.dtype)
    return agree / agree.mean().clamp(min=MIN_AGREEING)


def cautious_adamw_update(param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
    """One cautious AdamW step of ``param`` in place (settings and state as ``adamw_update``'s).
    Call under ``torch.no_grad()``."""
    exp_avg, denom, step_size = adam_moments(param, grad, state, group)
    param.addcdiv_(exp_avg * cautious_scale(exp_avg, grad), denom, value=-step_size)


class CautiousAdamWOptimizer(AdamWOptimizer):
    """AdamW's optimizer and settings, stepping with ``cautious_adamw_update``."""

    update = staticmethod(cautious_adamw_update)


class CautiousAdamWBatched(AdamWBatched):
    """``CautiousAdamWOptimizer`` for R stacked replicas: per-replica lr, weight decay, betas and
    eps, and each replica's mask mean over its own slice of the stacked tensor. Sign-sensitive
    (``BatchedOptimizer``): a gradient entry within rounding of zero may be masked in one path
    and not the other."""

    sign_sensitive = True

    def update(self, name: str, param: Tensor, grad: Tensor, state: dict[str, Tensor],
               lr: Tensor) -> Tensor | None:
        exp_avg, denom = self.moments(param, grad, state)
        agree = (exp_avg * grad > 0).to(grad.dtype)  # (R, ...)
        fraction = agree.reshape(len(agree), -1).mean(1).clamp(min=MIN_AGREEING)  # (R,)
        scale = agree / per_replica(fraction, agree)
        param.addcdiv_(exp_avg * scale * self.step_size(lr, param), denom)
        return None


class CautiousAdamWConfig(AdamWConfig):
    """AdamW's settings (beta1, beta2, eps); the mask has none."""


@register_optimizer(
    name="cautious_adamw",
    config=CautiousAdamWConfig,
    paper=arxiv("2411.16085", "Cautious Optimizers: Improving Training with One Line of Code",
                "The University of Texas at Austin"),
    ablation="adamw",
    scope=(
        "C-AdamW (sign-agreement mask rescaled by its mean) on every parameter against AdamW at "
        "the same lr and weight decay; the paper's C-Lion and LLaMA / MAE pretraining runs are "
        "not reproduced."
    ),
    search_space={"beta2": SearchDimension(choices=(0.95, 0.99, 0.999))},
    tuning_space=ADAMW_TUNING_SPACE,  # AdamW's settings, so both arms search the same space
    paper_tuning_space=ADAMW_PAPER_SPACE,  # the paper keeps AdamW's settings; Wen et al. tune them
)
class CautiousAdamW(AdamW):
    """AdamW's component (settings, build) with the cautious optimizer and its batched twin."""

    batched = CautiousAdamWBatched
    optimizer_class = CautiousAdamWOptimizer
