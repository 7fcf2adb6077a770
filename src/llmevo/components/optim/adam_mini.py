"""Adam-mini: AdamW with one second-moment scalar per parameter block instead of per entry.

Zhang, Chen, Li, Ding, Wu, Kingma, Ye, Luo and Sun, "Adam-mini: Use Fewer Learning Rates To
Gain More", arXiv 2406.16793 (Algorithm 1, Adam-mini; Algorithm 3, the partition for
Transformers). Each parameter tensor is viewed as ``(blocks, -1)``; block ``b`` shares one
second moment ``v_b``, so one learning rate. At step ``t``:

    W <- W (1 - lr wd)
    m <- beta1 m + (1 - beta1) g                           (per entry, as Adam)
    v_b <- beta2 v_b + (1 - beta2) mean_{i in b} g_i^2     (one scalar per block)
    W_b <- W_b - lr / (1 - beta1^t) * m_b / (sqrt(v_b) / sqrt(1 - beta2^t) + eps)

The partition (``adam_mini_blocks``), from the model's structure: query and key projections of
an attention module (one with ``query``, ``key`` Linears and a ``head_dim``), one block per
head (``head_dim`` output rows; grouped key heads count as heads); every other hidden Linear
weight (value, output projection, MLPs), one block per output neuron (row); the embedding
(with a tied output head) and an untied output Linear named ``head``, Adam's per-entry ``v``
(blocks of one entry); gains, biases and other tensors, one block per tensor (Algorithm 3's
default partition). With blocks of one entry the update is AdamW's (the reference test).
``AdamMiniBatched`` is the same update for R stacked replicas (``train/replicas.py``); it reads
the partition from the template replica (``BatchedOptimizer.bind``).

Reference tests (tests/reference/test_optim_new_reference.py): three steps on a tiny matrix
against the update written out by hand in numpy (per-row, per-head and per-tensor blocks);
blocks of one entry against ``torch.optim.AdamW``; the partition of ``llama_modern`` (grouped
keys, an untied head); the batched twin against ``AdamMiniOptimizer`` per replica, and a frozen
replica left bit for bit.

Deviations: weight decay applies to every parameter, as in the ``adamw`` component (the
authors' code skips norms and biases). The embedding and output layer keep per-entry ``v`` as
in the paper's first version and the authors' code before v1.1.0 (its v1.1.0 gives them one
``v`` per token); biases share one block per tensor (that code keeps Adam's ``v`` for them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from pydantic import Field, PositiveFloat
from torch import Tensor, nn

from llmevo.components.optim.adamw import ADAMW_PAPER_SPACE, ADAMW_TUNING_SPACE, AdamWBatched
from llmevo.components.optim.base import (
    OptimizerComponent,
    arxiv,
    parameter_roles,
    register_optimizer,
)
from llmevo.components.optim.optimizer import Optimizer, per_replica
from llmevo.errors import ConfigError
from llmevo.registry import SearchDimension, StrictModel


def adam_mini_blocks(model: nn.Module) -> dict[str, int]:
    """Parameter name -> its number of second-moment blocks (the tensor viewed as (blocks, -1)).

    Query/key weights: one block per head; other hidden Linear weights: one per output row;
    embeddings and an output Linear named ``head``: one per entry; everything else: one."""
    heads: dict[int, int] = {}  # id(weight) -> heads, for query and key projections
    outputs: set[int] = set()
    for module_name, module in model.named_modules():
        head_dim = getattr(module, "head_dim", None)
        for projection in (getattr(module, "query", None), getattr(module, "key", None)):
            if isinstance(head_dim, int) and isinstance(projection, nn.Linear):
                if projection.out_features % head_dim:
                    raise ConfigError(f"adam_mini: {module_name} has {projection.out_features} "
                                      f"query/key rows, not a multiple of head_dim {head_dim}")
                heads[id(projection.weight)] = projection.out_features // head_dim
        if isinstance(module, nn.Linear) and module_name.rsplit(".", 1)[-1] == "head":
            outputs.add(id(module.weight))
    named = dict(model.named_parameters())
    blocks: dict[str, int] = {}
    for name, role in parameter_roles(model).items():
        if name not in named:  # a tied weight: named once, under its embedding's name
            continue
        param = named[name]
        if role == "embedding" or id(param) in outputs:
            blocks[name] = param.numel()
        elif id(param) in heads:
            blocks[name] = heads[id(param)]
        elif role == "hidden_matrix":
            blocks[name] = param.shape[0]
        else:
            blocks[name] = 1
    return blocks


def adam_mini_update(param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], blocks: int) -> None:
    """One Adam-mini step of ``param`` in place at ``group``'s settings (AdamW's), its second
    moment one scalar per block of the tensor viewed as ``(blocks, -1)``; ``state`` (``step``,
    ``exp_avg``, ``exp_avg_sq`` (blocks, 1)) is created on the first call. Call under
    ``torch.no_grad()``."""
    lr, eps, weight_decay, (beta1, beta2) = group["lr"], group["eps"], group["weight_decay"], group["betas"]
    if not state:
        state["step"] = torch.tensor(0.0, dtype=torch.float32)
        state["exp_avg"] = torch.zeros_like(param)
        state["exp_avg_sq"] = param.new_zeros(blocks, 1)  # (blocks, 1)
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    state["step"] += 1
    step = state["step"].item()
    if weight_decay != 0:
        param.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).add_(grad.reshape(blocks, -1).square().mean(1, keepdim=True), alpha=1 - beta2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)  # (blocks, 1)
    param.view(blocks, -1).addcdiv_(exp_avg.view(blocks, -1), denom, value=-lr / (1 - beta1**step))


class AdamMiniOptimizer(Optimizer):
    """One group; its ``blocks`` list gives each parameter's number of blocks, in order."""

    def __init__(self, params: Sequence[Tensor], blocks: Sequence[int], *, lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01):
        params, blocks = list(params), list(blocks)
        if len(params) != len(blocks) or any(p.numel() % b for p, b in zip(params, blocks, strict=True)):
            raise ConfigError("adam_mini: each parameter needs a number of blocks dividing its size")
        super().__init__([{"params": params, "blocks": blocks}],
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def update_group(self, group: dict[str, Any]) -> None:
        for p, blocks in zip(group["params"], group["blocks"], strict=True):
            if p.grad is not None:
                adam_mini_update(p, p.grad, self.state.setdefault(p, {}), group, blocks)


class AdamMiniBatched(AdamWBatched):
    """``AdamMiniOptimizer`` for R stacked replicas: per-replica lr, weight decay, betas and eps;
    the partition (``adam_mini_blocks``) is the template replica's (``bind``)."""

    def __init__(self, configs: Sequence[Any], lr: Sequence[float], weight_decay: Sequence[float],
                 roles: dict[str, str], device: torch.device, steps: int):
        super().__init__(configs, lr, weight_decay, roles, device, steps)
        self.blocks: dict[str, int] | None = None

    def bind(self, model: nn.Module) -> None:
        self.blocks = adam_mini_blocks(model)

    def update(self, name: str, param: Tensor, grad: Tensor, state: dict[str, Tensor],
               lr: Tensor) -> Tensor | None:
        if self.blocks is None:
            raise ConfigError("adam_mini's batched twin needs the model's partition: call bind(model)")
        replicas, blocks = len(param), self.blocks[name]
        if not state:
            state["exp_avg"] = torch.zeros_like(param)
            state["exp_avg_sq"] = param.new_zeros(replicas, blocks, 1)  # (R, blocks, 1)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, per_replica(self.one_minus_beta1, param))
        mean_sq = grad.reshape(replicas, blocks, -1).square().mean(2, keepdim=True)  # (R, blocks, 1)
        exp_avg_sq.mul_(per_replica(self.beta2, exp_avg_sq)).add_(mean_sq * per_replica(self.one_minus_beta2, mean_sq))
        bias2_sqrt = self.bias2_sqrt[self.step_count - 1]  # (R,)
        denom = (exp_avg_sq.sqrt() / per_replica(bias2_sqrt, exp_avg_sq)).add_(per_replica(self.eps, exp_avg_sq))
        step = per_replica(-lr / self.bias1[self.step_count - 1], exp_avg_sq)  # (R, 1, 1)
        param.view(replicas, blocks, -1).addcdiv_(exp_avg.view(replicas, blocks, -1) * step, denom)
        return None


class AdamMiniConfig(StrictModel):
    beta1: float = Field(default=0.9, ge=0.0, lt=1.0)
    beta2: float = Field(default=0.999, ge=0.0, lt=1.0)
    eps: PositiveFloat = 1e-8


@register_optimizer(
    name="adam_mini",
    config=AdamMiniConfig,
    paper=arxiv("2406.16793", "Adam-mini: Use Fewer Learning Rates To Gain More",
                "The Chinese University of Hong Kong, Shenzhen"),
    ablation="adamw",
    scope=(
        "Adam-mini (one second moment per query/key head, per output row of the other hidden "
        "matrices, per tensor of gains; Adam's per-entry one for embeddings and output) against "
        "AdamW at the same lr and weight decay; the memory and throughput gains that motivate "
        "it, and the paper's SFT / RLHF runs, are not measured."
    ),
    search_space={"beta2": SearchDimension(choices=(0.95, 0.99, 0.999))},
    tuning_space=ADAMW_TUNING_SPACE,  # AdamW's settings (lr, beta2, weight decay, warmup)
    paper_tuning_space=ADAMW_PAPER_SPACE,  # the paper reuses AdamW's; Wen et al. tune them
)
class AdamMini(OptimizerComponent):
    batched = AdamMiniBatched

    def __init__(self, config: AdamMiniConfig):
        super().__init__(config)
        self._statistics: dict[str, Any] = {}

    def build(self, model: nn.Module, lr: float, weight_decay: float) -> AdamMiniOptimizer:
        config = self.config
        blocks = adam_mini_blocks(model)
        named = dict(model.named_parameters())
        per_entry = sum(named[n].numel() for n, b in blocks.items() if b == named[n].numel())
        self._statistics = {
            "second_moment_entries": sum(blocks.values()),
            "per_entry_parameters": per_entry,
            "blockwise_parameters": sum(p.numel() for p in named.values()) - per_entry,
        }
        return AdamMiniOptimizer(
            [named[n] for n in blocks], list(blocks.values()),
            lr=lr, betas=(config.beta1, config.beta2), eps=config.eps, weight_decay=weight_decay,
        )

    def statistics(self) -> dict[str, Any]:
        return dict(self._statistics)
