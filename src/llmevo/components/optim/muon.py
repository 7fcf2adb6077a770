"""Muon: momentum orthogonalised by a Newton-Schulz iteration, for hidden weight matrices.

Jordan et al., "Muon: An optimizer for hidden layers in neural networks" (2024,
https://kellerjordan.github.io/posts/muon/); Liu et al., "Muon is Scalable for LLM
Training", arXiv 2502.16982 (Moonshot AI), whose update scale is used here. For every
parameter whose role (``optim/base.py``, ``parameter_roles``) is ``hidden_matrix``:

    B <- mu B + (1 - mu) G;   M = G + mu (B - G) (Nesterov) or B
    O = newton_schulz(M, steps)            # approximately U V^T of M = U S V^T
    W <- W (1 - lr wd) - lr * rms_scale * sqrt(max(rows, cols)) * O

``rms_scale = 0.2`` makes the update's RMS match AdamW's, so Muon reuses the AdamW
learning rate and weight decay (Liu et al., section 2.2). Embeddings (including a tied
output head) and gains/biases are updated by AdamW inside the same optimizer, one param
group per role, so an LR scheduler scales every group and ``state_dict`` covers both. The
AdamW group's lr is ``adamw_lr_ratio`` times the Muon group's (default 1: the same lr, as
above; its weight decay is then ``lr · ratio · wd``, as a torch param group with its own lr
has); tuning it is the "AdamW groups' lr" axis of Muon's tuning space.
``MuonBatched`` is the same update for R stacked replicas (``train/replicas.py``), each with
its own numeric settings; ``nesterov`` and ``ns_steps`` choose the code, so the replicas of
one batched run share them.

``muon_orthogonality_error`` (the artifact metric): for each hidden matrix's last
orthogonalised update O, oriented so that it has r <= c rows, ``||O O^T - I_r||_F /
sqrt(r)``, averaged over the hidden matrices. It is the RMS deviation of O's squared
singular values from 1; five quintic steps do not converge exactly (their singular values
land in roughly [0.7, 1.2]), so it is non-zero in practice.

Reference tests (tests/reference/test_muon_reference.py): ``newton_schulz`` singular values
in a band around 1 and close to the exact polar factor ``U V^T`` from ``torch.linalg.svd``;
one step on a matrix against ``torch.optim.Muon(adjust_lr_fn="match_rms_adamw")``; the
AdamW groups (``adamw_update`` of the ``adamw`` component) bit-identical to
``torch.optim.AdamW``. The batched twin against ``MuonAdamW``, replica by replica:
tests/reference/test_optim_reference.py. ``MuonAdamW`` runs on the dynamo-free
``optim/optimizer.py`` base.

Deviations: the iteration runs in float32 (Keller Jordan's and torch's run it in
bfloat16); weight decay applies to every group, as in the ``adamw`` component.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from pydantic import Field, PositiveFloat, PositiveInt
from torch import Tensor, nn

from llmevo.components.optim.adamw import AdamWBatched, adamw_update
from llmevo.components.optim.base import (
    OptimizerComponent,
    arxiv,
    count,
    paper_space,
    parameters_by_role,
    register_optimizer,
    settings,
)
from llmevo.components.optim.optimizer import Optimizer, per_replica, with_grads
from llmevo.registry import (
    HIGH_LR_AXIS,
    SearchDimension,
    StrictModel,
    TuningAxis,
)

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz(G: Tensor, steps: int = 5) -> Tensor:
    """Approximate the orthogonal polar factor ``U V^T`` of a 2-D ``G`` (quintic iteration).

    ``X <- a X + (b A + c A^2) X`` with ``A = X X^T``, after scaling ``G`` to unit Frobenius
    norm (so every singular value starts at most 1); a tall matrix is transposed so that
    ``A`` is the smaller Gram matrix. Returns a tensor of ``G``'s shape and dtype.
    """
    a, b, c = NS_COEFFICIENTS
    X = G.to(torch.float32)
    transposed = G.shape[-2] > G.shape[-1]
    if transposed:
        X = X.mT  # (c, r) -> (r, c) with r <= c
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT  # (r, r)
        X = a * X + (b * A + c * A @ A) @ X
    if transposed:
        X = X.mT
    return X.to(G.dtype)


def orthogonality_error(update: Tensor) -> Tensor:
    """``||O O^T - I||_F / sqrt(r)`` for ``O`` oriented with its r <= c rows (a 0-d tensor)."""
    oriented = update.to(torch.float32)
    if oriented.shape[-2] > oriented.shape[-1]:
        oriented = oriented.mT  # (r, c) with r <= c
    rows = oriented.shape[-2]
    eye = torch.eye(rows, device=oriented.device)
    return torch.linalg.matrix_norm(oriented @ oriented.mT - eye) / math.sqrt(rows)


class MuonAdamW(Optimizer):
    """One optimizer: Muon for groups with ``use_muon=True``, AdamW for the others."""

    def __init__(
        self,
        muon_params: list[nn.Parameter],
        adamw_params: list[nn.Parameter],
        *,
        lr: float,
        weight_decay: float,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        rms_scale: float = 0.2,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        adamw_lr_ratio: float = 1.0,
    ):
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            rms_scale=rms_scale,
            betas=betas,
            eps=eps,
        )
        groups = [
            {"params": params, "use_muon": use_muon, **({} if use_muon else {"lr": lr * adamw_lr_ratio})}
            for params, use_muon in ((muon_params, True), (adamw_params, False))
            if params
        ]
        super().__init__(groups, defaults)
        self._last_errors: Tensor | None = None
        self._step_errors: list[Tensor] = []

    def step(self) -> None:
        self._step_errors = []
        super().step()
        if self._step_errors:
            self._last_errors = torch.stack(self._step_errors)

    update = staticmethod(adamw_update)  # the AdamW groups' step

    def update_group(self, group: dict[str, Any]) -> None:
        if group["use_muon"]:
            self._step_errors += self._muon_step(group)
        else:
            super().update_group(group)

    def _muon_step(self, group: dict[str, Any]) -> list[Tensor]:
        errors = []
        for p, state in with_grads(group, self.state):
            grad = p.grad
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p)
            buffer = state["momentum_buffer"]
            buffer.lerp_(grad, 1 - group["momentum"])
            momentum = grad.lerp(buffer, group["momentum"]) if group["nesterov"] else buffer
            update = newton_schulz(momentum, group["ns_steps"])  # (rows, cols)
            errors.append(orthogonality_error(update))
            self._apply_update(p, update, state, group)
        return errors

    def _apply_update(self, p: Tensor, update: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Decoupled weight decay, then the orthogonalised ``update`` at Muon's RMS scale (a
        variant such as NorMuon normalises it first)."""
        scale = group["rms_scale"] * math.sqrt(max(p.shape[-2], p.shape[-1]))
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.add_(update, alpha=-group["lr"] * scale)

    def orthogonality_error(self) -> float:
        """Mean ``muon_orthogonality_error`` over the hidden matrices of the last step (0 before)."""
        return 0.0 if self._last_errors is None else float(self._last_errors.mean())


class MuonBatched(AdamWBatched):
    """``MuonAdamW`` for R stacked replicas: Muon on the hidden matrices, AdamW on the rest."""

    shared = ("nesterov", "ns_steps")

    def __init__(self, configs: Sequence[Any], lr: Sequence[float], weight_decay: Sequence[float],
                 roles: dict[str, str], device: torch.device, steps: int):
        super().__init__(configs, lr, weight_decay, roles, device, steps)
        self.momentum = self.column([c.momentum for c in configs])  # (R,)
        self.one_minus_momentum = self.column([1 - c.momentum for c in configs])  # (R,), as AdamW's betas
        self.rms_scale = self.column([c.rms_scale for c in configs])  # (R,)
        self.adamw_lr_ratio = self.column([c.adamw_lr_ratio for c in configs])  # (R,)
        self.nesterov = configs[0].nesterov
        self.ns_steps = configs[0].ns_steps

    def parameter_lr(self, name: str, lr: Tensor) -> Tensor:
        """The AdamW roles train at ``adamw_lr_ratio`` times the step's lr (the sequential
        optimizer's AdamW param group)."""
        return lr if self.roles[name] == "hidden_matrix" else lr * self.adamw_lr_ratio

    def update(self, name: str, param: Tensor, grad: Tensor, state: dict[str, Tensor],
               lr: Tensor) -> Tensor | None:
        if self.roles[name] != "hidden_matrix":
            return super().update(name, param, grad, state, lr)
        if not state:
            state["momentum_buffer"] = torch.zeros_like(param)
        buffer = state["momentum_buffer"]
        mu = per_replica(self.momentum, param)
        buffer.lerp_(grad, per_replica(self.one_minus_momentum, param))
        momentum = grad.lerp(buffer, mu) if self.nesterov else buffer
        update = newton_schulz(momentum, self.ns_steps)  # (R, rows, cols)
        scale = self.rms_scale * math.sqrt(max(param.shape[-2], param.shape[-1]))  # (R,)
        param.sub_(update * per_replica(lr * scale, param))
        return orthogonality_error(update)  # (R,)


class MuonConfig(StrictModel):
    momentum: float = Field(default=0.95, ge=0.0, lt=1.0)
    nesterov: bool = True
    ns_steps: PositiveInt = 5
    rms_scale: PositiveFloat = 0.2
    beta1: float = Field(default=0.9, ge=0.0, lt=1.0)
    beta2: float = Field(default=0.999, ge=0.0, lt=1.0)
    eps: PositiveFloat = 1e-8
    adamw_lr_ratio: PositiveFloat = 1.0  # the AdamW groups' lr over the Muon group's


MUON_SPACE = {
    "lr": HIGH_LR_AXIS,
    "momentum": TuningAxis(target="optimizer", setting="momentum", low=0.8, high=0.98,
                           scale="log1m", limit_high=0.99),
    "adamw_lr": TuningAxis(target="optimizer", setting="adamw_lr_ratio", low=1 / 3, high=3.0,
                           scale="log"),
}
"""Muon's declared tuning space (``--tune-space full``)."""

MUON_PAPER_SPACE = paper_space(MUON_SPACE)
"""Muon's space under ``--tune-space paper`` (issue 48, dial a): its own axes plus weight decay,
which the paper (Liu et al. 2502.16982) adds as one of the two changes that make Muon hold at
scale, and
warmup, which Wen et al. 2509.02046 tune for every optimizer."""


@register_optimizer(
    name="muon",
    config=MuonConfig,
    paper=arxiv("2502.16982", "Muon is Scalable for LLM Training", "Moonshot AI"),
    ablation="adamw",
    scope=(
        "Muon (5 Newton-Schulz steps, Nesterov momentum, AdamW-matched RMS) on hidden Linear "
        "weights, AdamW on embeddings and gains, against AdamW on everything at the same lr; "
        "not the paper's large-scale MoE training or its distributed implementation."
    ),
    search_space={
        "momentum": SearchDimension(choices=(0.9, 0.95)),
        "ns_steps": SearchDimension(choices=(3, 5)),
    },
    tuning_space=MUON_SPACE,
    paper_tuning_space=MUON_PAPER_SPACE,
)
class Muon(OptimizerComponent):
    batched: ClassVar[type[MuonBatched]] = MuonBatched
    optimizer_class: ClassVar[type[MuonAdamW]] = MuonAdamW  # over the two groups (NorMuon: its own)

    def __init__(self, config: MuonConfig):
        super().__init__(config)
        self._optimizer: MuonAdamW | None = None
        self._statistics: dict[str, Any] = {}

    def build(self, model: nn.Module, lr: float, weight_decay: float) -> MuonAdamW:
        roles = parameters_by_role(model)
        muon_params = roles["hidden_matrix"]
        adamw_params = roles["embedding"] + roles["gain_or_bias"]
        self._statistics = {
            "muon_parameters": count(muon_params),
            "adamw_parameters": count(adamw_params),
            "muon_tensors": len(muon_params),
            "adamw_tensors": len(adamw_params),
        }
        self._optimizer = self.optimizer_class(muon_params, adamw_params, lr=lr, weight_decay=weight_decay,
                                               **settings(self.config))
        return self._optimizer

    def statistics(self) -> dict[str, Any]:
        return dict(self._statistics)

    def orthogonality_error(self) -> float:
        return 0.0 if self._optimizer is None else self._optimizer.orthogonality_error()
