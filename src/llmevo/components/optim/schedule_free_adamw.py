"""Schedule-free AdamW: gradients at an interpolation y, evaluation at a running average x.

Defazio, Yang, Mehta, Mishchenko, Khaled and Cutkosky, "The Road Less Scheduled", arXiv
2405.15682 (Algorithm 1, Schedule-Free AdamW), as the authors' ``schedulefree`` package's
``AdamWScheduleFree`` (version 1.4) implements it. Per parameter, at step ``k`` (from 1), with
``lr_k`` the step's (scheduled) learning rate:

    y = (1 - beta1) z + beta1 x                  (the point the gradient g is taken at)
    v <- beta2 v + (1 - beta2) g^2
    u = g / (sqrt(v / (1 - beta2^k)) + eps) + wd y
    z <- z - lr_k u
    c = w_k / sum_{i<=k} w_i,   w_k = k^r * (max_{i<=k} lr_i)^weight_lr_power
    x <- (1 - c) x + c z

The parameters hold y while training (so the trainer's forward and backward are unchanged) and
the state holds z; x is recovered as ``x = (y - (1 - beta1) z) / beta1``. The update of y is done
in place, without x: ``y <- lerp(y, z, c) + lr_k (beta1 (1 - c) - 1) u``. After the last step
the trainer moves the parameters to x (``to_evaluation_point``), so the model is evaluated,
saved and exported at x; its per-step hook (evolution's hurdles) sees x too
(``at_evaluation_point``, y restored bit for bit after). Warmup is the trainer's
(``warmup_steps``: the step's lr_k, as the package's own ``warmup_steps``); a preset's cosine
decay, which schedule-free does not need, still applies on top of it.
``ScheduleFreeAdamWBatched`` is the same update for R stacked replicas (``train/replicas.py``),
each with its own averaging weights.

Reference tests (tests/reference/test_optim_new_reference.py): four warmup steps on a tiny
tensor against Algorithm 1 written out by hand with x, y and z kept explicitly (numpy); twenty
steps with warmup against ``schedulefree.AdamWScheduleFree`` (the ``schedulefree`` package, a
dev dependency; the test is skipped without it), parameters at y and, after ``eval()``, at x; the
trainer leaving x in the model and its hook seeing x; the batched twin against
``ScheduleFreeAdamWOptimizer`` per replica, and a frozen replica left bit for bit.

Deviations: none from the package's update, which differs from Algorithm 1 in two details kept
here: the second moment is bias-corrected inside the root, where Algorithm 1 folds
sqrt(1 - beta2^k) into its step size gamma_k (so eps sits elsewhere, and c's weights gamma_k^2
carry that factor); and the weights use the running maximum of lr_k, which is lr_k itself under
a warmup then a constant rate. The package's own warmup is replaced by the trainer's schedule
(the same lr_k). A batched replica whose lr is 0 (frozen after a non-finite
loss) keeps its averaging weights (c = 0), so it stays bit-for-bit where it stopped; the
sequential optimizer never sees lr 0 from the trainer's schedules.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from pydantic import Field, PositiveFloat
from torch import Tensor, nn

from llmevo.components.optim.base import (
    OptimizerComponent,
    arxiv,
    paper_space,
    register_optimizer,
    settings,
)
from llmevo.components.optim.optimizer import BatchedOptimizer, Optimizer, per_replica, with_grads
from llmevo.errors import ConfigError
from llmevo.registry import (
    LR_AXIS,
    WARMUP_AXIS,
    WEIGHT_DECAY_AXIS,
    SearchDimension,
    StrictModel,
    TuningAxis,
)


class ScheduleFreeAdamWOptimizer(Optimizer):
    """Parameters at y while training (``train_mode``), at x after ``to_evaluation_point``."""

    def __init__(self, params: Any, *, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, r: float = 0.0,
                 weight_lr_power: float = 2.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, r=r,
                                      weight_lr_power=weight_lr_power, k=0, weight_sum=0.0,
                                      lr_max=-1.0, train_mode=True))

    def update_group(self, group: dict[str, Any]) -> None:
        if not group["train_mode"]:
            raise ConfigError("schedule-free AdamW stepped at its evaluation point x: call "
                              "to_training_point() first")
        beta1, beta2 = group["betas"]
        k, lr = group["k"], group["lr"]
        lr_max = group["lr_max"] = max(lr, group["lr_max"])
        weight = (k + 1) ** group["r"] * lr_max ** group["weight_lr_power"]
        weight_sum = group["weight_sum"] = group["weight_sum"] + weight
        average = weight / weight_sum if weight_sum else 0.0  # c
        bias_correction2 = 1 - beta2 ** (k + 1)
        for p, state in with_grads(group, self.state):
            if not state:
                state["z"] = p.detach().clone()
                state["exp_avg_sq"] = torch.zeros_like(p)
            z, exp_avg_sq = state["z"], state["exp_avg_sq"]
            exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            normalized = p.grad / exp_avg_sq.div(bias_correction2).sqrt_().add_(group["eps"])  # u
            if group["weight_decay"] != 0:
                normalized.add_(p, alpha=group["weight_decay"])  # at y
            p.lerp_(z, average)
            p.add_(normalized, alpha=lr * (beta1 * (1 - average) - 1))
            z.sub_(normalized, alpha=lr)
        group["k"] = k + 1

    def to_evaluation_point(self) -> None:
        """Parameters y -> x = lerp(y, z, 1 - 1/beta1); nothing if they are at x already."""
        with torch.no_grad():
            for group in self.param_groups:
                if group["train_mode"]:
                    self._move(group, 1 - 1 / group["betas"][0])
                    group["train_mode"] = False

    def to_training_point(self) -> None:
        """Parameters x -> y = lerp(x, z, 1 - beta1), to train on after ``to_evaluation_point``."""
        with torch.no_grad():
            for group in self.param_groups:
                if not group["train_mode"]:
                    self._move(group, 1 - group["betas"][0])
                    group["train_mode"] = True

    def _move(self, group: dict[str, Any], weight: float) -> None:
        for p in group["params"]:
            if "z" in self.state.get(p, {}):
                p.lerp_(self.state[p]["z"], weight)

    @contextlib.contextmanager
    def at_evaluation_point(self) -> Iterator[None]:
        """x inside the block; y (bit for bit, not recomputed from x) and train mode after."""
        training = [group for group in self.param_groups if group["train_mode"]]
        params = [p for group in training for p in group["params"]]
        saved = [p.detach().clone() for p in params]
        self.to_evaluation_point()
        try:
            yield
        finally:
            with torch.no_grad():
                for p, value in zip(params, saved, strict=True):
                    p.copy_(value)
            for group in training:
                group["train_mode"] = True


class ScheduleFreeAdamWBatched(BatchedOptimizer):
    """``ScheduleFreeAdamWOptimizer`` for R stacked replicas: per-replica lr, weight decay, betas,
    eps, r and weight_lr_power, and per-replica averaging weights (``lr_max``, ``weight_sum``)."""

    def __init__(self, configs: Sequence[Any], lr: Sequence[float], weight_decay: Sequence[float],
                 roles: dict[str, str], device: torch.device, steps: int):
        super().__init__(configs, lr, weight_decay, roles, device, steps)
        # the decay is taken at y inside the update (u + wd y), not as the base's W (1 - lr wd)
        self.decay = self.weight_decay.clone()  # (R,)
        self.weight_decay.zero_()
        self.beta1 = self.column([c.beta1 for c in configs])  # (R,)
        self.beta2 = self.column([c.beta2 for c in configs])  # (R,)
        self.one_minus_beta2 = self.column([1 - c.beta2 for c in configs])  # (R,), from float64
        self.to_x = self.column([1 - 1 / c.beta1 for c in configs])  # (R,) the lerp weight y -> x
        self.eps = self.column([c.eps for c in configs])  # (R,)
        self.r = self.column([c.r for c in configs])  # (R,)
        self.power = self.column([c.weight_lr_power for c in configs])  # (R,)
        self.bias2 = torch.tensor([[1 - c.beta2**t for c in configs] for t in range(1, steps + 1)],
                                  dtype=torch.float32, device=device)  # (S, R)
        self.lr_max = torch.full_like(self.beta1, -1.0)  # (R,)
        self.weight_sum = torch.zeros_like(self.beta1)  # (R,)
        self.average = torch.zeros_like(self.beta1)  # (R,) this step's c

    @torch.no_grad()
    def step(self, params: dict[str, Tensor], grads: dict[str, Tensor], lr: Tensor) -> None:
        """This step's averaging weight c per replica (a replica at lr 0 keeps c = 0 and its
        weights), then the base's step."""
        rate = self.base_lr * lr  # (R,), the base's lr for this step
        live = rate > 0
        self.lr_max = torch.where(live, torch.maximum(self.lr_max, rate), self.lr_max)
        weight = (self.step_count + 1) ** self.r * self.lr_max**self.power  # (R,)
        self.weight_sum = torch.where(live, self.weight_sum + weight, self.weight_sum)
        self.average = torch.where(live & (self.weight_sum > 0), weight / self.weight_sum,
                                   torch.zeros_like(weight))
        super().step(params, grads, lr)

    def update(self, name: str, param: Tensor, grad: Tensor, state: dict[str, Tensor],
               lr: Tensor) -> Tensor | None:
        if not state:
            state["z"] = param.detach().clone()
            state["exp_avg_sq"] = torch.zeros_like(param)
        z, exp_avg_sq = state["z"], state["exp_avg_sq"]
        exp_avg_sq.mul_(per_replica(self.beta2, param)).addcmul_(grad * per_replica(self.one_minus_beta2, param), grad)
        bias2 = per_replica(self.bias2[self.step_count - 1], param)
        normalized = grad / (exp_avg_sq / bias2).sqrt_().add_(per_replica(self.eps, param))
        normalized.add_(param * per_replica(self.decay, param))
        average = per_replica(self.average, param)
        param.lerp_(z, average)
        param.add_(normalized * per_replica(lr, param) * (per_replica(self.beta1, param) * (1 - average) - 1))
        z.sub_(normalized * per_replica(lr, param))
        return None

    @torch.no_grad()
    def to_evaluation_point(self, params: dict[str, Tensor]) -> None:
        for name, param in params.items():
            if "z" in self.state[name]:
                param.lerp_(self.state[name]["z"], per_replica(self.to_x, param))


SCHEDULE_FREE_SPACE = {
    "lr": LR_AXIS,
    "beta1": TuningAxis(target="optimizer", setting="beta1", low=0.8, high=0.98, scale="log1m", limit_high=0.995),
    "weight_decay": WEIGHT_DECAY_AXIS,
    "warmup": WARMUP_AXIS,
}


class ScheduleFreeAdamWConfig(StrictModel):
    beta1: float = Field(default=0.9, gt=0.0, lt=1.0)  # y's interpolation between z and x
    beta2: float = Field(default=0.999, ge=0.0, lt=1.0)
    eps: PositiveFloat = 1e-8
    r: float = Field(default=0.0, ge=0.0)  # the average's polynomial weighting power
    weight_lr_power: float = Field(default=2.0, ge=0.0)  # its weighting by the (warmed-up) lr


@register_optimizer(
    name="schedule_free_adamw",
    config=ScheduleFreeAdamWConfig,
    paper=arxiv("2405.15682", "The Road Less Scheduled", "Meta FAIR"),
    ablation="adamw",
    scope=(
        "Schedule-free AdamW (gradients at y, the model evaluated and saved at the average x) on "
        "every parameter against AdamW at the same lr, weight decay and schedule; the run keeps "
        "the preset's schedule (a cosine decay schedule-free does not need is not removed), and "
        "the paper's AlgoPerf and large-scale runs are not reproduced."
    ),
    search_space={"beta1": SearchDimension(choices=(0.9, 0.95))},
    tuning_space=SCHEDULE_FREE_SPACE,
    # --tune-space paper, from the authors' package README (facebookresearch/schedule_free,
    # README.md, "Caveats"; read 2026-12-07): "For AdamW, learning rates in the range 1x-10x
    # larger than with schedule-based approaches seem to work", so lr from 1x to 10x the
    # preset's; beta's "default of 0.9 works on most problems but it may be necessary to
    # increase the value to 0.95 or 0.98", so beta1 from 0.9 to 0.98; "tuning regularization and
    # learning rate" (weight decay, to 1 as Wen et al. 2509.02046 search it) and "Using learning
    # rate warmup is recommended". The paper's own sweeps (2405.15682's appendix) were not read.
    paper_tuning_space=paper_space(
        SCHEDULE_FREE_SPACE,
        lr=TuningAxis(target="train", setting="lr", low=1.0, high=10.0, scale="log", relative_to="lr"),
        beta1=TuningAxis(target="optimizer", setting="beta1", low=0.9, high=0.98, scale="log1m",
                         limit_high=0.995)),
)
class ScheduleFreeAdamW(OptimizerComponent):
    batched = ScheduleFreeAdamWBatched

    def build(self, model: nn.Module, lr: float, weight_decay: float) -> ScheduleFreeAdamWOptimizer:
        return ScheduleFreeAdamWOptimizer(model.parameters(), lr=lr, weight_decay=weight_decay,
                                          **settings(self.config))
