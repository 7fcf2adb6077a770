"""SOAP: Adam run in the eigenbasis of Shampoo's preconditioner.

Vyas, Morwani, Zhao, Shapira, Brandfonbrener, Janson and Kakade, "SOAP: Improving and
Stabilizing Shampoo using Adam", arXiv 2409.11321 (Algorithm 3, one SOAP step of an m x n
layer; Algorithm 4, the eigenvectors by one power iteration and a QR decomposition). For each
2-D parameter, with ``Q_L`` (m x m) and ``Q_R`` (n x n) the current eigenbases, at step ``t``:

    W <- W (1 - lr wd)
    M <- beta1 M + (1 - beta1) G                       (first moment, original space)
    G' = Q_L^T G Q_R;   M' = Q_L^T M Q_R                (rotated into the eigenbasis)
    V <- beta2 V + (1 - beta2) G' * G'                 (second moment, in the eigenbasis)
    N' = M' / (1 - beta1^t) / (sqrt(V) / sqrt(1 - beta2^t) + eps)
    W <- W - lr Q_L N' Q_R^T                           (rotated back)
    L <- b L + (1 - b) G G^T;   R <- b R + (1 - b) G^T G      (b = shampoo_beta, beta2 by default)
    every precondition_frequency steps, for (P, Q) in ((L, Q_L), (R, Q_R)):
        order = argsort(diag(Q^T P Q), descending);  Q, V <- Q and V's axis, in that order
        Q <- qr(P Q).Q                                  (Algorithm 4)

As the authors' code does, the first step only starts the preconditioner (L and R from its
gradient, their eigenbases by ``eigh``, eigenvalues descending) and moves no parameter; ``t``
counts the steps after it. A side longer than ``max_precond_dim`` keeps the identity basis;
tensors that are not matrices (gains, biases) get plain Adam (the identity on every side), so
with ``max_precond_dim`` 0 SOAP is AdamW one step late (the reference test).

No batched twin (``batched`` None: replica runs fall back to sequential ones). While L or R is
rank-deficient (L of the 512-row embedding gains at most one batch's worth of rank per step, an
MLP's 192-row L at most 64), the eigenbasis of its null space is arbitrary, and the rotated
first moment has real components there (the new gradient leaves the old span), so Adam's
per-coordinate normalisation makes the update depend on which basis ``eigh`` / ``qr`` happen to
return. A one-ulp change of L (``bmm`` against ``mm``, or a batched forward's rounding) picks
another basis: on identical gradients a stacked update moved parameters by ~6% of a step after
one update and by several steps' worth after three, so replicas could not follow their
sequential runs to float tolerance, as the contract requires. The sequential optimizer is
deterministic; the authors' code has the same dependence.

Reference tests (tests/reference/test_optim_new_reference.py): seven gradients on a 4 x 3
matrix (the start, six updates, three refreshes) against Algorithms 3 and 4 written out by hand
in numpy (numpy's ``eigh`` and ``qr``); with every side unpreconditioned, AdamW
(``torch.optim.AdamW``) on the gradients after the first; the state-dict round trip mid-run and
the refusal to batch (the contract suite).

Deviations: ``eps`` is added to ``sqrt(V / (1 - beta2^t))`` as in AdamW (the authors' code adds
it before the bias correction) and the weight decay is applied before the step (their code
after it), both as in the ``adamw`` component; ``merge_dims``, ``precondition_1d`` and
``normalize_grads`` of their code are not offered (their defaults are off), nor tensors of more
than two dimensions (Adam).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt
from torch import Tensor, nn

from llmevo.components.optim.base import (
    OptimizerComponent,
    arxiv,
    paper_space,
    register_optimizer,
    settings,
)
from llmevo.components.optim.optimizer import Optimizer
from llmevo.registry import (
    HIGH_LR_AXIS,
    WEIGHT_DECAY_AXIS,
    SearchDimension,
    StrictModel,
    TuningAxis,
)

SIDES = (("left", -2), ("right", -1))  # L acts on the rows (dim -2), R on the columns (dim -1)


def preconditioned_sides(shape: Sequence[int], max_dim: int) -> list[tuple[str, int]]:
    """The sides of a matrix of ``shape`` (m, n) that get a preconditioner (none for a tensor
    that is not a matrix)."""
    if len(shape) != 2:
        return []
    return [(side, dim) for side, dim in SIDES if shape[dim] <= max_dim]


def gram(grad: Tensor, dim: int) -> Tensor:
    """``G G^T`` (rows, ``dim`` -2) or ``G^T G`` (columns, -1)."""
    return grad @ grad.mT if dim == -2 else grad.mT @ grad


def rotate(x: Tensor, state: dict[str, Any]) -> Tensor:
    """``Q_L^T x Q_R`` with the bases ``state`` has (a missing one is the identity)."""
    if "q_left" in state:
        x = state["q_left"].mT @ x
    if "q_right" in state:
        x = x @ state["q_right"]
    return x


def rotate_back(x: Tensor, state: dict[str, Any]) -> Tensor:
    """``Q_L x Q_R^T``: the inverse of ``rotate``."""
    if "q_left" in state:
        x = state["q_left"] @ x
    if "q_right" in state:
        x = x @ state["q_right"].mT
    return x


def eigenbasis(matrix: Tensor) -> Tensor:
    """The eigenvectors of a symmetric ``matrix``, eigenvalues descending."""
    return torch.linalg.eigh(matrix).eigenvectors.flip(-1)


def refresh(state: dict[str, Any], side: str, dim: int) -> None:
    """Algorithm 4 for one side: reorder its basis (and the second moment's axis ``dim``) by the
    estimated eigenvalues ``diag(Q^T P Q)``, descending, then one power iteration ``qr(P Q)``."""
    basis, product = state[f"q_{side}"], state[f"gg_{side}"] @ state[f"q_{side}"]
    order = (basis * product).sum(-2).argsort(dim=-1, descending=True)  # (..., k)
    state[f"q_{side}"] = torch.linalg.qr(product.gather(-1, order.unsqueeze(-2).expand_as(product))).Q
    second = state["exp_avg_sq"]
    axis = order.unsqueeze(-1) if dim == -2 else order.unsqueeze(-2)
    state["exp_avg_sq"] = second.gather(dim, axis.expand_as(second))


def start_preconditioner(grad: Tensor, state: dict[str, Any], sides: list[tuple[str, int]],
                         shampoo_beta: float) -> None:
    """The first step: zero moments, L and R from the first gradient, their bases by ``eigh``."""
    state["step"] = torch.tensor(0.0, dtype=torch.float32)
    state["exp_avg"] = torch.zeros_like(grad)
    state["exp_avg_sq"] = torch.zeros_like(grad)
    for side, dim in sides:
        state[f"gg_{side}"] = grad.new_zeros(grad.shape[dim], grad.shape[dim])
    accumulate(grad, state, sides, shampoo_beta)
    for side, _ in sides:
        state[f"q_{side}"] = eigenbasis(state[f"gg_{side}"])


def accumulate(grad: Tensor, state: dict[str, Any], sides: list[tuple[str, int]],
               shampoo_beta: float) -> None:
    """``L <- b L + (1 - b) G G^T`` and ``R <- b R + (1 - b) G^T G``."""
    for side, dim in sides:
        state[f"gg_{side}"].lerp_(gram(grad, dim), 1 - shampoo_beta)


def soap_update(param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
    """One SOAP step of ``param`` in place (the first call only starts the preconditioner);
    ``state`` holds ``step``, ``exp_avg``, ``exp_avg_sq`` and per side ``gg_*`` and ``q_*``.
    ``group`` holds the settings (``SOAPOptimizer``'s). Call under ``torch.no_grad()``."""
    lr, eps, weight_decay, (beta1, beta2) = group["lr"], group["eps"], group["weight_decay"], group["betas"]
    shampoo_beta = group["shampoo_beta"]
    sides = preconditioned_sides(param.shape, group["max_precond_dim"])
    if not state:
        start_preconditioner(grad, state, sides, shampoo_beta)
        return
    state["step"] += 1
    step = state["step"].item()
    if weight_decay != 0:
        param.mul_(1 - lr * weight_decay)
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    exp_avg.lerp_(grad, 1 - beta1)
    rotated = rotate(grad, state)
    exp_avg_sq.mul_(beta2).addcmul_(rotated, rotated, value=1 - beta2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
    direction = rotate_back(rotate(exp_avg, state) / denom, state)
    param.add_(direction, alpha=-lr / (1 - beta1**step))
    accumulate(grad, state, sides, shampoo_beta)
    if step % group["precondition_frequency"] == 0:
        for side, dim in sides:
            refresh(state, side, dim)


class SOAPOptimizer(Optimizer):
    def __init__(self, params: Any, *, lr: float, betas: tuple[float, float] = (0.95, 0.95),
                 shampoo_beta: float | None = None, eps: float = 1e-8, weight_decay: float = 0.01,
                 precondition_frequency: int = 10, max_precond_dim: int = 10_000):
        super().__init__(params, dict(
            lr=lr, betas=betas, shampoo_beta=betas[1] if shampoo_beta is None else shampoo_beta,
            eps=eps, weight_decay=weight_decay, precondition_frequency=precondition_frequency,
            max_precond_dim=max_precond_dim))

    update = staticmethod(soap_update)


class SOAPConfig(StrictModel):
    beta1: float = Field(default=0.95, ge=0.0, lt=1.0)
    beta2: float = Field(default=0.95, ge=0.0, lt=1.0)
    shampoo_beta: float | None = Field(default=None, ge=0.0, lt=1.0)  # None: beta2 (Algorithm 3)
    eps: PositiveFloat = 1e-8
    precondition_frequency: PositiveInt = 10
    max_precond_dim: NonNegativeInt = 10_000  # a longer side keeps the identity basis


SOAP_SPACE = {
    "lr": HIGH_LR_AXIS,
    "beta2": TuningAxis(target="optimizer", setting="beta2", low=0.9, high=0.99, scale="log1m",
                        limit_high=0.999),
    "precondition_frequency": TuningAxis(target="optimizer", setting="precondition_frequency",
                                         low=2.0, high=30.0, scale="log", integer=True,
                                         limit_low=1.0),
    "weight_decay": WEIGHT_DECAY_AXIS,
}
"""SOAP's declared tuning space (``--tune-space full``); under ``paper`` the same axes with weight
decay up to 1 and warmup."""


@register_optimizer(
    name="soap",
    config=SOAPConfig,
    paper=arxiv("2409.11321", "SOAP: Improving and Stabilizing Shampoo using Adam", "Harvard University"),
    ablation="adamw",
    scope=(
        "SOAP (Adam in Shampoo's eigenbasis on every matrix, the embedding included, refreshed "
        "by power iteration and QR every precondition_frequency steps; Adam on gains) against "
        "AdamW at the same lr and weight decay; the paper's 360M / 660M large-batch runs and its "
        "wall-clock comparison are not reproduced."
    ),
    search_space={
        "beta2": SearchDimension(choices=(0.95, 0.99)),
        "precondition_frequency": SearchDimension(choices=(1, 10, 30)),
    },
    tuning_space=SOAP_SPACE,
    # --tune-space paper (issue 48, dial a): the declared axes, weight decay up to 1 and warmup,
    # which Wen et al. 2509.02046 tune for every optimizer, SOAP among them
    paper_tuning_space=paper_space(SOAP_SPACE),
)
class SOAP(OptimizerComponent):
    batched = None  # no twin: see the module docstring

    def build(self, model: nn.Module, lr: float, weight_decay: float) -> SOAPOptimizer:
        return SOAPOptimizer(model.parameters(), lr=lr, weight_decay=weight_decay, **settings(self.config))
