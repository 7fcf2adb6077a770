"""AdamW: Adam with decoupled weight decay.

Loshchilov and Hutter, "Decoupled Weight Decay Regularization", arXiv 1711.05101.
``adamw_update`` is ``torch.optim.AdamW``'s CPU default (the single-tensor path; ``foreach``
and ``fused`` are off on CPU; ``amsgrad`` off) written op for op, so on CPU float32 it is
bit-identical to it; ``AdamWOptimizer`` runs it on the dynamo-free ``Optimizer``
(``optim/optimizer.py``). Per parameter, at step ``t``:

    W <- W (1 - lr wd)
    m <- lerp(m, g, 1 - beta1);   v <- beta2 v + (1 - beta2) g^2
    W <- W - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

``AdamWBatched`` is the same update for R stacked replicas (``train/replicas.py``), each
with its own lr, weight decay, betas and eps; its bias corrections are tabled per step and
replica on the device once, so a step copies nothing from the host.

Reference test: 20 steps on a small model (several parameter shapes, weight decay) equal to
``torch.optim.AdamW`` with ``torch.equal`` (tests/reference/test_optim_reference.py); the
batched twin against ``AdamWOptimizer`` per replica (same file).

Deviations: none from the paper. On a GPU ``torch.optim.AdamW`` defaults to its ``foreach``
path (same math, other rounding); this stays the single-tensor path on every device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from pydantic import PositiveFloat
from torch import Tensor, nn

from llmevo.components.optim.base import (
    OptimizerComponent,
    arxiv,
    paper_space,
    register_optimizer,
    settings,
)
from llmevo.components.optim.optimizer import BatchedOptimizer, Optimizer, per_replica
from llmevo.registry import (
    LR_AXIS,
    WARMUP_AXIS,
    WEIGHT_DECAY_AXIS,
    SearchDimension,
    StrictModel,
    TuningAxis,
)


def adam_moments(param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> tuple[Tensor, Tensor, float]:
    """The first part of one AdamW step at ``group``'s ``lr``, ``betas`` (the first two), ``eps``
    and ``weight_decay``: decoupled weight decay of ``param`` in place, the moments updated, and
    what the step divides: ``(exp_avg, denom, step_size)``, so that the step is ``param -=
    step_size * exp_avg / denom``. ``state`` (``step``, ``exp_avg``, ``exp_avg_sq``) is created
    on the first call. Call under ``torch.no_grad()``."""
    lr, eps, weight_decay, (beta1, beta2) = group["lr"], group["eps"], group["weight_decay"], group["betas"][:2]
    if not state:
        state["step"] = torch.tensor(0.0, dtype=torch.float32)  # as torch's, a 0-d float32 count
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    state["step"] += 1
    if weight_decay != 0:
        param.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step = state["step"].item()
    bias_correction1 = 1 - beta1**step
    bias_correction2 = 1 - beta2**step
    step_size = lr / bias_correction1
    denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(eps)
    return exp_avg, denom, step_size


def adamw_update(param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
    """One AdamW step of ``param`` in place at ``group``'s settings (``adam_moments``); ``state``
    (``step``, ``exp_avg``, ``exp_avg_sq``) is created on the first call. Call under
    ``torch.no_grad()``."""
    exp_avg, denom, step_size = adam_moments(param, grad, state, group)
    param.addcdiv_(exp_avg, denom, value=-step_size)


class AdamWOptimizer(Optimizer):
    def __init__(
        self,
        params: Any,
        *,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    update = staticmethod(adamw_update)


class AdamWBatched(BatchedOptimizer):
    """``AdamWOptimizer`` for R stacked replicas: per-replica lr, weight decay, betas and eps."""

    def __init__(self, configs: Sequence[Any], lr: Sequence[float], weight_decay: Sequence[float],
                 roles: dict[str, str], device: torch.device, steps: int):
        super().__init__(configs, lr, weight_decay, roles, device, steps)
        beta1 = [c.beta1 for c in configs]
        beta2 = [c.beta2 for c in configs]
        self.beta1, self.beta2 = self.column(beta1), self.column(beta2)  # (R,)
        # 1 - beta from the float64 settings: 1 - float32(0.999) is 1.3e-5 off (1e-4 at 0.9999)
        self.one_minus_beta1 = self.column([1 - b for b in beta1])  # (R,)
        self.one_minus_beta2 = self.column([1 - b for b in beta2])  # (R,)
        self.eps = self.column([c.eps for c in configs])  # (R,)
        # Adam bias corrections per (step, replica), on the device once: no per-step copies
        self.bias1 = torch.tensor([[1 - b**t for b in beta1] for t in range(1, steps + 1)],
                                  dtype=torch.float32, device=device)  # (S, R)
        self.bias2_sqrt = torch.tensor([[math.sqrt(1 - b**t) for b in beta2] for t in range(1, steps + 1)],
                                       dtype=torch.float32, device=device)  # (S, R)

    def moments(self, param: Tensor, grad: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``adam_moments`` per replica (the weight decay is the base's): the updated
        ``exp_avg`` and the step's ``denom``, both (R, ...)."""
        if not state:
            state["exp_avg"] = torch.zeros_like(param)
            state["exp_avg_sq"] = torch.zeros_like(param)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, per_replica(self.one_minus_beta1, param))
        exp_avg_sq.mul_(per_replica(self.beta2, param)).addcmul_(grad * per_replica(self.one_minus_beta2, param), grad)
        bias2_sqrt = self.bias2_sqrt[self.step_count - 1]  # (R,)
        denom = (exp_avg_sq.sqrt() / per_replica(bias2_sqrt, param)).add_(per_replica(self.eps, param))
        return exp_avg, denom

    def step_size(self, lr: Tensor, param: Tensor) -> Tensor:
        """``-lr / (1 - beta1^t)`` per replica, shaped to broadcast against ``param``."""
        return per_replica(-lr / self.bias1[self.step_count - 1], param)

    def update(self, name: str, param: Tensor, grad: Tensor, state: dict[str, Tensor],
               lr: Tensor) -> Tensor | None:
        exp_avg, denom = self.moments(param, grad, state)
        param.addcdiv_(exp_avg * self.step_size(lr, param), denom)
        return None


ADAMW_TUNING_SPACE = {
    "lr": LR_AXIS,
    "beta2": TuningAxis(target="optimizer", setting="beta2", low=0.9, high=0.999, scale="log1m",
                        limit_high=0.9999),
    "weight_decay": WEIGHT_DECAY_AXIS,
    "warmup": WARMUP_AXIS,
}
"""AdamW's tuning space (Porian et al. 2406.19146: beta2 matters at small batch; Wen et al.
2509.02046 tune lr, weight decay, beta2 and warmup per optimizer)."""
ADAMW_PAPER_SPACE = paper_space(ADAMW_TUNING_SPACE)
"""AdamW's space under ``--tune-space paper`` (issue 48, dial a): the same axes with weight decay
up to 1, the range Wen et al. 2509.02046 search for every AdamW-like optimizer."""


class AdamWConfig(StrictModel):
    beta1: float = 0.9
    beta2: float = 0.999
    eps: PositiveFloat = 1e-8


@register_optimizer(
    name="adamw",
    config=AdamWConfig,
    paper=arxiv("1711.05101", "Decoupled Weight Decay Regularization", "University of Freiburg"),
    implementation_status="full",
    baseline=True,
    scope="AdamW (bit-identical to torch.optim.AdamW on CPU) over all parameters in one group.",
    search_space={"beta2": SearchDimension(choices=(0.95, 0.99, 0.999))},
    tuning_space=ADAMW_TUNING_SPACE,
    paper_tuning_space=ADAMW_PAPER_SPACE,
)
class AdamW(OptimizerComponent):
    batched: ClassVar[type[BatchedOptimizer] | None] = AdamWBatched
    per_group_lr = True  # per-parameter lrs (a parametrization's) split its groups
    optimizer_class: ClassVar[type[AdamWOptimizer]] = AdamWOptimizer  # a variant (cautious) steps its own way

    def build(self, model: nn.Module, lr: float, weight_decay: float) -> AdamWOptimizer:
        return self.optimizer_class(model.parameters(), lr=lr, weight_decay=weight_decay, **settings(self.config))
