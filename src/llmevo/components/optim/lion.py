"""Lion: the sign of an interpolated momentum, with decoupled weight decay.

Chen et al., "Symbolic Discovery of Optimization Algorithms", arXiv 2302.06675
(Algorithm 2):

    c = beta1 m + (1 - beta1) g
    W <- W - lr (sign(c) + wd W)
    m <- beta2 m + (1 - beta2) g

The paper advises a learning rate 3-10x smaller and a weight decay 3-10x larger than
AdamW's (section 5); ``lr_multiplier`` (0.3) and ``weight_decay_multiplier`` (3.0) apply
that to the run's AdamW settings, so ``lr * wd`` stays about the same. ``LionBatched`` is
the same update for R stacked replicas (``train/replicas.py``). Reference tests
(tests/reference/test_optim_reference.py): two steps against the algorithm written out by
hand on a tiny tensor; the batched twin against ``LionOptimizer`` per replica.

Deviations: none in the update; the multipliers are this platform's way of passing one
learning rate to every optimizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from pydantic import Field, PositiveFloat
from torch import Tensor, nn

from llmevo.components.optim.base import OptimizerComponent, arxiv, paper_space, register_optimizer
from llmevo.components.optim.optimizer import BatchedOptimizer, Optimizer, per_replica, with_grads
from llmevo.registry import (
    LR_AXIS,
    WEIGHT_DECAY_AXIS,
    SearchDimension,
    StrictModel,
    TuningAxis,
)


class LionOptimizer(Optimizer):
    def __init__(
        self,
        params: Any,
        *,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    def update_group(self, group: dict[str, Any]) -> None:
        beta1, beta2 = group["betas"]
        for p, state in with_grads(group, self.state):
            if "exp_avg" not in state:
                state["exp_avg"] = torch.zeros_like(p)
            momentum = state["exp_avg"]
            direction = momentum.lerp(p.grad, 1 - beta1).sign_()  # sign(c)
            p.mul_(1 - group["lr"] * group["weight_decay"])
            p.add_(direction, alpha=-group["lr"])
            momentum.lerp_(p.grad, 1 - beta2)


class LionBatched(BatchedOptimizer):
    """``LionOptimizer`` for R stacked replicas: per-replica lr, weight decay (each times its
    multiplier, as ``Lion.build`` sets them) and betas."""

    def __init__(self, configs: Sequence[Any], lr: Sequence[float], weight_decay: Sequence[float],
                 roles: dict[str, str], device: torch.device, steps: int):
        super().__init__(
            configs,
            [rate * c.lr_multiplier for rate, c in zip(lr, configs, strict=True)],
            [decay * c.weight_decay_multiplier for decay, c in zip(weight_decay, configs, strict=True)],
            roles, device, steps)
        # 1 - beta in double, then float32: the sequential step's scalar weight, not 1 - float32(beta)
        self.one_minus_beta1 = self.column([1 - c.beta1 for c in configs])  # (R,)
        self.one_minus_beta2 = self.column([1 - c.beta2 for c in configs])  # (R,)

    def update(self, name: str, param: Tensor, grad: Tensor, state: dict[str, Tensor],
               lr: Tensor) -> Tensor | None:
        if not state:
            state["exp_avg"] = torch.zeros_like(param)
        momentum = state["exp_avg"]
        direction = momentum.lerp(grad, per_replica(self.one_minus_beta1, param)).sign_()  # sign(c)
        param.sub_(direction * per_replica(lr, param))
        momentum.lerp_(grad, per_replica(self.one_minus_beta2, param))
        return None


LION_SPACE = {
    "lr": LR_AXIS,  # the AdamW-equivalent lr; Lion's own is lr_multiplier times it
    "beta2": TuningAxis(target="optimizer", setting="beta2", low=0.95, high=0.999,
                        scale="log1m", limit_high=0.9999),
    "weight_decay": WEIGHT_DECAY_AXIS,  # times weight_decay_multiplier in Lion's build
}


class LionConfig(StrictModel):
    beta1: float = Field(default=0.9, ge=0.0, lt=1.0)
    beta2: float = Field(default=0.99, ge=0.0, lt=1.0)
    lr_multiplier: PositiveFloat = 0.3
    weight_decay_multiplier: float = Field(default=3.0, ge=0.0)


@register_optimizer(
    name="lion",
    config=LionConfig,
    paper=arxiv("2302.06675", "Symbolic Discovery of Optimization Algorithms", "Google; UCLA"),
    ablation="adamw",
    scope=(
        "Lion on every parameter (lr x0.3, weight decay x3 of the AdamW settings) against AdamW "
        "at the same budget; the paper's program search and large-scale benchmarks are not run."
    ),
    search_space={
        "lr_multiplier": SearchDimension(low=0.1, high=1.0, log=True),
        "beta2": SearchDimension(choices=(0.98, 0.99)),
    },
    tuning_space=LION_SPACE,
    # --tune-space paper (issue 48, dial a): the paper tunes lr, weight decay and the betas (lr
    # 3-10x smaller, weight decay 3-10x larger than AdamW's); Wen et al. 2509.02046
    # find Lion's tuned weight decay 0.6-0.7 at 130M-520M. The lr reaches 6x the preset's (v3's
    # space row chose 1.13e-2 on the old axis's edge), weight decay 0 .. 1 before the build's x3.
    paper_tuning_space=paper_space(LION_SPACE, lr=TuningAxis(target="train", setting="lr", low=1 / 3, high=6.0,
                                                             scale="log", relative_to="lr")),
)
class Lion(OptimizerComponent):
    batched = LionBatched
    per_group_lr = True  # per-parameter lrs (a parametrization's) split its groups

    def build(self, model: nn.Module, lr: float, weight_decay: float) -> LionOptimizer:
        config = self.config
        return LionOptimizer(
            model.parameters(),
            lr=lr * config.lr_multiplier,
            betas=(config.beta1, config.beta2),
            weight_decay=weight_decay * config.weight_decay_multiplier,
        )
