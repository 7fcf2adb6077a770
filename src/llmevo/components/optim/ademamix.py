"""AdEMAMix: AdamW whose numerator mixes a fast and a slow EMA of the gradients.

Pagliardini, Ablin and Grangier, "The AdEMAMix Optimizer: Better, Faster, Older", arXiv
2409.03137 (Algorithm 1; the schedulers of section 3, ``f_alpha`` and ``f_beta3``). Per
parameter, at step ``t`` (from 1), with ``T`` the schedulers' span ``T_{alpha,beta3}``:

    alpha_t = min(t alpha / T, alpha)
    beta3_t = min(exp(ln(beta1) ln(beta3) / ((1 - t/T) ln(beta3) + (t/T) ln(beta1))), beta3)
    W <- W (1 - lr wd)
    m1 <- beta1 m1 + (1 - beta1) g              (fast EMA, bias-corrected)
    m2 <- beta3_t m2 + (1 - beta3_t) g          (slow EMA, not bias-corrected)
    v <- beta2 v + (1 - beta2) g^2
    W <- W - lr (m1 / (1 - beta1^t) + alpha_t m2) / (sqrt(v) / sqrt(1 - beta2^t) + eps)

``beta3_t`` interpolates ``1 / ln(beta)`` (the EMA's half-life) linearly from ``beta1`` to
``beta3``; past ``T`` both are their final values. The paper usually sets ``T`` to the run's
length; here ``T = ceil(warmup_fraction x steps)``, the run's steps being told by the trainer
(``Optimizer.set_run_steps``; the batched twin gets them when built). An optimizer that is never
told (a bare ``build``), or ``warmup_fraction`` 0, runs with constant ``alpha`` and ``beta3``,
the authors' code's default. With ``alpha = 0`` the update is AdamW's bit for bit (the
reference test). ``AdEMAMixBatched`` is the same update for R stacked replicas, its schedules
tabled per step and replica on the device once.

Reference tests (tests/reference/test_optim_new_reference.py): five steps on a tiny tensor
against Algorithm 1 written out by hand in numpy, over a four-step scheduler span (ramping, then
at its end); ``alpha = 0`` bit-identical to ``torch.optim.AdamW``; the schedulers' values (the
middle of the span at the mean half-life); the trainer telling the run's length; the batched
twin against ``AdEMAMixOptimizer`` per replica, and a frozen replica left bit for bit.

Deviations: none in the update. Weight decay is applied as ``W (1 - lr wd)`` before the step,
which equals Algorithm 1's ``- lr wd W_{t-1}`` term. Defaults are the paper's language-model
settings (beta3 0.9999, alpha 5, T the whole run); our runs are far shorter than its, which the
tuning space's beta3 and alpha axes account for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from pydantic import Field, PositiveFloat
from torch import Tensor, nn

from llmevo.components.optim.adamw import AdamWBatched, adam_moments
from llmevo.components.optim.base import (
    OptimizerComponent,
    arxiv,
    paper_space,
    register_optimizer,
    settings,
)
from llmevo.components.optim.optimizer import Optimizer, per_replica
from llmevo.registry import (
    LR_AXIS,
    WEIGHT_DECAY_AXIS,
    SearchDimension,
    StrictModel,
    TuningAxis,
)


def alpha_at(step: int, alpha: float, span: int) -> float:
    """``f_alpha``: alpha rising linearly to its value at ``span`` (``span`` 0: constant)."""
    return alpha if span <= 0 else min(step * alpha / span, alpha)


def beta3_at(step: int, beta3: float, beta1: float, span: int) -> float:
    """``f_beta3``: from ``beta1`` to ``beta3`` at ``span``, linear in ``1 / ln(beta)``
    (``span`` 0: constant)."""
    if span <= 0 or step >= span:
        return beta3
    s = step / span
    log1, log3 = math.log(beta1), math.log(beta3)
    return min(math.exp(log1 * log3 / ((1 - s) * log3 + s * log1)), beta3)


def schedule_span(fraction: float, steps: int | None) -> int:
    """``T_{alpha,beta3}`` in steps: ``ceil(fraction * steps)``; 0 (no schedule) when unknown."""
    return 0 if steps is None or fraction == 0 else max(1, math.ceil(fraction * steps))


def ademamix_update(param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
    """One AdEMAMix step of ``param`` in place; ``state`` is AdamW's (``adam_moments``) plus
    ``exp_avg_slow``; ``group``'s settings are AdamW's with ``betas`` (beta1, beta2, beta3),
    ``alpha`` and ``span``, the schedulers' ``T``. Call under ``torch.no_grad()``."""
    exp_avg, denom, step_size = adam_moments(param, grad, state, group)
    (beta1, _, beta3), alpha, span = group["betas"], group["alpha"], group["span"]
    step = int(state["step"].item())
    if "exp_avg_slow" not in state:
        state["exp_avg_slow"] = torch.zeros_like(param)
    slow = state["exp_avg_slow"]
    slow.lerp_(grad, 1 - beta3_at(step, beta3, beta1, span))
    mixing = alpha_at(step, alpha, span)
    # lr (m1 / bc1 + a m2) = (lr / bc1) (m1 + a bc1 m2); a = 0 leaves AdamW's step exactly
    numerator = exp_avg if mixing == 0 else exp_avg.add(slow, alpha=mixing * (1 - beta1**step))
    param.addcdiv_(numerator, denom, value=-step_size)


class AdEMAMixOptimizer(Optimizer):
    def __init__(self, params: Any, *, lr: float, betas: tuple[float, float, float] = (0.9, 0.999, 0.9999),
                 alpha: float = 5.0, warmup_fraction: float = 1.0, eps: float = 1e-8,
                 weight_decay: float = 0.01):
        super().__init__(params, dict(lr=lr, betas=betas, alpha=alpha, warmup_fraction=warmup_fraction,
                                      span=0, eps=eps, weight_decay=weight_decay))

    def set_run_steps(self, steps: int) -> None:
        for group in self.param_groups:
            group["span"] = schedule_span(group["warmup_fraction"], steps)

    update = staticmethod(ademamix_update)


class AdEMAMixBatched(AdamWBatched):
    """``AdEMAMixOptimizer`` for R stacked replicas: per-replica lr, weight decay, betas, alpha,
    eps and schedule span (each over this run's ``steps``)."""

    def __init__(self, configs: Sequence[Any], lr: Sequence[float], weight_decay: Sequence[float],
                 roles: dict[str, str], device: torch.device, steps: int):
        super().__init__(configs, lr, weight_decay, roles, device, steps)
        spans = [schedule_span(c.warmup_fraction, steps) for c in configs]
        rows = range(1, steps + 1)
        # the slow EMA's 1 - beta3_t, from float64 (1 - float32(0.9999) is 1.7e-4 off)
        self.slow_weight = torch.tensor(
            [[1 - beta3_at(t, c.beta3, c.beta1, s) for c, s in zip(configs, spans, strict=True)]
             for t in rows], dtype=torch.float32, device=device)  # (S, R)
        # the slow EMA's weight in the numerator: alpha_t (1 - beta1^t), per (step, replica)
        self.mixing = torch.tensor(
            [[alpha_at(t, c.alpha, s) * (1 - c.beta1**t) for c, s in zip(configs, spans, strict=True)]
             for t in rows], dtype=torch.float32, device=device)  # (S, R)

    def update(self, name: str, param: Tensor, grad: Tensor, state: dict[str, Tensor],
               lr: Tensor) -> Tensor | None:
        exp_avg, denom = self.moments(param, grad, state)
        if "exp_avg_slow" not in state:
            state["exp_avg_slow"] = torch.zeros_like(param)
        slow = state["exp_avg_slow"]
        slow.lerp_(grad, per_replica(self.slow_weight[self.step_count - 1], param))
        numerator = exp_avg + slow * per_replica(self.mixing[self.step_count - 1], param)
        param.addcdiv_(numerator * self.step_size(lr, param), denom)
        return None


ADEMAMIX_SPACE = {
    "lr": LR_AXIS,
    "beta3": TuningAxis(target="optimizer", setting="beta3", low=0.99, high=0.9999, scale="log1m", limit_high=0.99999),
    "alpha": TuningAxis(target="optimizer", setting="alpha", low=1.0, high=10.0, scale="log", limit_high=20.0),
    "weight_decay": WEIGHT_DECAY_AXIS,
}


class AdEMAMixConfig(StrictModel):
    beta1: float = Field(default=0.9, gt=0.0, lt=1.0)
    beta2: float = Field(default=0.999, ge=0.0, lt=1.0)
    beta3: float = Field(default=0.9999, gt=0.0, lt=1.0)
    alpha: float = Field(default=5.0, ge=0.0)
    warmup_fraction: float = Field(default=1.0, ge=0.0, le=1.0)  # T_{alpha,beta3} / run steps
    eps: PositiveFloat = 1e-8


@register_optimizer(
    name="ademamix",
    config=AdEMAMixConfig,
    paper=arxiv("2409.03137", "The AdEMAMix Optimizer: Better, Faster, Older", "EPFL; Apple"),
    ablation="adamw",
    scope=(
        "AdEMAMix (Algorithm 1 with its alpha and beta3 schedulers over the whole run) on every "
        "parameter against AdamW at the same lr and weight decay; the paper's runs of tens of "
        "thousands of steps, where the slow EMA pays off, and its forgetting study are not "
        "reproduced."
    ),
    search_space={
        "beta3": SearchDimension(choices=(0.999, 0.9999)),
        "alpha": SearchDimension(low=1.0, high=10.0, log=True),
    },
    tuning_space=ADEMAMIX_SPACE,
    # --tune-space paper: alpha and beta3 around the authors' recommended values, at AdamW's lr,
    # with weight decay to 1 and warmup (Wen et al. 2509.02046 tune both for every AdamW-like
    # optimizer). Source read (2026-12-07): the official code's README (apple/ml-ademamix,
    # README.md) gives lr 1e-3, betas (0.9, 0.999, 0.9999), alpha 8, the alpha and beta3
    # warmups over the whole run, weight decay 0.1; the axes hold those (alpha 8 inside 1-10,
    # beta3 0.9999 at the top edge, extended to 0.99999 if it wins). The paper's own sweep
    # ranges (2409.03137's hyperparameter sections) were not read: the bounds are not theirs.
    paper_tuning_space=paper_space(ADEMAMIX_SPACE),
)
class AdEMAMix(OptimizerComponent):
    batched = AdEMAMixBatched
    per_group_lr = True  # per-parameter lrs (a parametrization's) split its groups

    def build(self, model: nn.Module, lr: float, weight_decay: float) -> AdEMAMixOptimizer:
        return AdEMAMixOptimizer(model.parameters(), lr=lr, weight_decay=weight_decay, **settings(self.config, 3))
