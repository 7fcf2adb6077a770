"""NorMuon: Muon's orthogonalised update, normalised per neuron by its own second moment.

Li, Liu, Liang, Chen and Zhao, "NorMuon: Making Muon more efficient and scalable", arXiv
2510.05491 (Algorithm 1). For every hidden weight matrix ``W`` (m output rows x n inputs; the
``hidden_matrix`` role of ``optim/base.py``), at step ``t``:

    B <- mu B + (1 - mu) G;   M = G + mu (B - G) (Nesterov) or B       (Muon's momentum)
    O = newton_schulz(M, steps)                                         (muon.py's iteration)
    v <- beta2 v + (1 - beta2) mean_cols(O * O)                         (one scalar per row)
    O' = O / (sqrt(v) + eps)                                            (rows broadcast)
    W <- W (1 - lr wd) - lr * rms_scale * sqrt(m n) / ||O'||_F * O'

so the update's RMS is ``rms_scale * lr`` (0.2 lr, AdamW's, as Muon's in ``muon.py``) whatever
the normalisation does to its shape; ``v`` is not bias-corrected (a constant factor that the
Frobenius rescaling removes). Embeddings (with a tied head) and gains/biases are updated by
``MuonAdamW``'s AdamW groups, so NorMuon, like Muon, reuses the AdamW learning rate and weight
decay. ``NorMuonBatched`` is the same update for R stacked replicas (``train/replicas.py``).

``orthogonality_error`` (the artifact's ``muon_orthogonality_error``) is measured on ``O``,
the orthogonalised momentum before the per-row normalisation, as Muon's.

Reference tests (tests/reference/test_optim_new_reference.py): three steps on a tall and on a
wide matrix against Algorithm 1 written out by hand (numpy, with its own Newton-Schulz quintic);
on an orthogonal gradient (rows of equal norm after Newton-Schulz) with ``neuron_beta2 = 0`` the
normalisation only rescales: Muon's step (``MuonAdamW``) at an RMS of exactly 0.2 lr; the
batched twin against ``NorMuonAdamW`` per replica, and a frozen replica left bit for bit.

Deviations: Nesterov momentum is on by default, as in the authors' code and ``muon.py``
(Algorithm 1 uses plain momentum; ``nesterov=false`` gives it); the Newton-Schulz iteration
runs in float32 (``muon.py``); ``||O'||_F`` is floored at 1e-30 so that an all-zero momentum
(a frozen replica) gives no update instead of 0/0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from pydantic import Field, PositiveFloat
from torch import Tensor, nn

from llmevo.components.optim.base import arxiv, paper_space, register_optimizer
from llmevo.components.optim.muon import (
    MUON_SPACE,
    Muon,
    MuonAdamW,
    MuonBatched,
    MuonConfig,
    newton_schulz,
    orthogonality_error,
)
from llmevo.components.optim.optimizer import per_replica
from llmevo.registry import SearchDimension, TuningAxis

MIN_NORM = 1e-30  # floor of ||O'||_F: only an all-zero momentum reaches it


class NorMuonAdamW(MuonAdamW):
    """``MuonAdamW`` whose Muon groups normalise each row of the orthogonalised update by its
    second moment (``neuron_beta2``, ``neuron_eps``) before the RMS-matching step."""

    def __init__(self, muon_params: list[nn.Parameter], adamw_params: list[nn.Parameter], *,
                 neuron_beta2: float = 0.95, neuron_eps: float = 1e-8, **settings: Any):
        super().__init__(muon_params, adamw_params, **settings)
        for options in (self.defaults, *self.param_groups):
            options.update(neuron_beta2=neuron_beta2, neuron_eps=neuron_eps)

    def _apply_update(self, p: Tensor, update: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Each row of the orthogonalised update ``O`` over its second moment's root, then the
        whole step rescaled to Muon's RMS (``rms_scale * sqrt(numel)`` over its norm)."""
        if "neuron_sq" not in state:
            state["neuron_sq"] = p.new_zeros(p.shape[0], 1)  # (rows, 1)
        state["neuron_sq"].lerp_(update.square().mean(1, keepdim=True), 1 - group["neuron_beta2"])
        normalized = update / (state["neuron_sq"].sqrt() + group["neuron_eps"])
        scale = group["rms_scale"] * math.sqrt(p.numel()) / normalized.norm().clamp(min=MIN_NORM)
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.sub_(normalized * (group["lr"] * scale))


class NorMuonBatched(MuonBatched):
    """``NorMuonAdamW`` for R stacked replicas: Muon's settings per replica plus each replica's
    ``neuron_beta2`` and ``neuron_eps``; AdamW on the other roles, as ``MuonBatched``."""

    def __init__(self, configs: Sequence[Any], lr: Sequence[float], weight_decay: Sequence[float],
                 roles: dict[str, str], device: torch.device, steps: int):
        super().__init__(configs, lr, weight_decay, roles, device, steps)
        self.neuron_weight = self.column([1 - c.neuron_beta2 for c in configs])  # (R,) 1 - beta2
        self.neuron_eps = self.column([c.neuron_eps for c in configs])  # (R,)

    def update(self, name: str, param: Tensor, grad: Tensor, state: dict[str, Tensor],
               lr: Tensor) -> Tensor | None:
        if self.roles[name] != "hidden_matrix":
            return super().update(name, param, grad, state, lr)
        if not state:
            state["momentum_buffer"] = torch.zeros_like(param)
            state["neuron_sq"] = param.new_zeros(*param.shape[:2], 1)  # (R, rows, 1)
        buffer = state["momentum_buffer"]
        mu = per_replica(self.momentum, param)
        buffer.lerp_(grad, 1 - mu)
        momentum = grad.lerp(buffer, mu) if self.nesterov else buffer
        update = newton_schulz(momentum, self.ns_steps)  # O: (R, rows, cols)
        neuron_sq = state["neuron_sq"]
        neuron_sq.lerp_(update.square().mean(-1, keepdim=True), per_replica(self.neuron_weight, neuron_sq))
        normalized = update / (neuron_sq.sqrt() + per_replica(self.neuron_eps, neuron_sq))
        norms = normalized.flatten(1).norm(dim=1).clamp(min=MIN_NORM)  # (R,)
        scale = self.rms_scale * math.sqrt(param[0].numel()) / norms  # (R,)
        param.sub_(normalized * per_replica(lr * scale, param))
        return orthogonality_error(update)  # (R,)


NORMUON_SPACE = {"lr": MUON_SPACE["lr"], "momentum": MUON_SPACE["momentum"],
                 "neuron_beta2": TuningAxis(target="optimizer", setting="neuron_beta2", low=0.8, high=0.99,
                                            scale="log1m", limit_high=0.999),
                 "adamw_lr": MUON_SPACE["adamw_lr"]}
"""Muon's axes with the per-neuron second moment's beta2 (``--tune-space full``)."""


class NorMuonConfig(MuonConfig):
    """Muon's settings (momentum, Nesterov, Newton-Schulz steps, RMS scale, the AdamW groups'
    betas, eps and lr ratio) plus the per-neuron second moment's."""

    neuron_beta2: float = Field(default=0.95, ge=0.0, lt=1.0)
    neuron_eps: PositiveFloat = 1e-8


@register_optimizer(
    name="normuon",
    config=NorMuonConfig,
    paper=arxiv("2510.05491", "NorMuon: Making Muon more efficient and scalable", "Georgia Tech; Microsoft"),
    ablation="muon",
    scope=(
        "NorMuon (Muon's Newton-Schulz update, then a per-row second-moment normalisation and an "
        "AdamW-matched RMS) on hidden Linear weights, AdamW on embeddings and gains, against Muon "
        "with the same settings, so the arms differ only by the normalisation; both reuse AdamW's "
        "lr and weight decay, so AdamW (Muon's own ablation) is one step further away. The "
        "paper's FSDP2 distributed implementation and 1.1B runs are not reproduced."
    ),
    search_space={
        "momentum": SearchDimension(choices=(0.9, 0.95)),
        "neuron_beta2": SearchDimension(choices=(0.9, 0.95, 0.99)),
    },
    tuning_space=NORMUON_SPACE,
    # --tune-space paper: Muon's paper space (weight decay to 1, Liu et al. 2502.16982's change
    # that makes Muon hold at scale; warmup, Wen et al. 2509.02046) with the neuron beta2 held
    # at 0.95, not tuned. Source read (2026-12-07): the authors' code (zichongli5/NorMuon,
    # normuon.py) defaults lr 0.02, momentum 0.95, beta2 0.95 and its auxiliary Adam betas
    # (0.9, 0.95); no published sweep of beta2 was found, and the paper's (2510.05491) tuning
    # protocol was not read, so the full space's 0.8-0.99 range is no paper's.
    paper_tuning_space=paper_space({name: axis for name, axis in NORMUON_SPACE.items() if name != "neuron_beta2"}),
)
class NorMuon(Muon):
    """Muon's component (the parameter split, statistics, orthogonality error) with
    NorMuon's optimizer."""

    batched = NorMuonBatched
    optimizer_class = NorMuonAdamW
