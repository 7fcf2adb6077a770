"""Dynamic Tanh (DyT) in place of a normalisation layer: ``gamma * tanh(alpha x) + beta``.

Zhu, Chen, He, LeCun and Liu, "Transformers without Normalization", arXiv 2503.10622
(equation 1: ``DyT(x) = gamma * tanh(alpha x) + beta`` with a learnable *scalar* alpha and
per-channel gamma, beta; alpha initialised to 0.5, gamma to ones, beta to zeros; section 7
on alpha's initialisation). Element-wise: no mean or variance over the features, so one
token's output depends only on its own entries. It fills every norm position of the model
(before attention, before the feed-forward, and the final norm). Reference test: the formula
against ``numpy.tanh`` and the gradient with respect to alpha against its closed form
``sum(gamma * x * (1 - tanh^2(alpha x)))`` (tests/reference/test_dyt_rezero_reference.py).

Deviations: one alpha initialisation (0.5) in every position; for its LLaMA models the paper
tunes a larger one before attention than elsewhere (0.8 / 0.2 at 7B) and adds a learnable
scalar after the embedding, neither used here. ``bias=False`` drops beta, as the paper's
LLaMA DyT does in place of RMSNorm; the default keeps it (equation 1).
"""

from __future__ import annotations

import torch
from pydantic import PositiveFloat
from torch import Tensor, nn

from llmevo.registry import Paper, SearchDimension, StrictModel, register


class DyTConfig(StrictModel):
    alpha_init: PositiveFloat = 0.5
    bias: bool = True


def dynamic_tanh(x: Tensor, alpha: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``weight * tanh(alpha * x) + bias``; x (..., D), alpha a scalar (1,), weight/bias (D,)."""
    out = torch.tanh(alpha * x) * weight
    return out if bias is None else out + bias


@register(
    slot="norm",
    name="dyt",
    config=DyTConfig,
    paper=Paper(
        arxiv_id="2503.10622",
        title="Transformers without Normalization",
        url="https://arxiv.org/abs/2503.10622",
        organization="FAIR, Meta; New York University; MIT; Princeton University",
    ),
    ablation="rmsnorm",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "DyT (alpha init 0.5, gain and bias) in every norm position of a 2-layer LM, compared "
        "with RMSNorm; the paper's per-position alpha tuning and large-model runs are not "
        "reproduced."
    ),
    search_space={"alpha_init": SearchDimension(low=0.1, high=1.0, log=True)},
)
class DynamicTanh(nn.Module):
    def __init__(self, config: DyTConfig, dim: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), config.alpha_init))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if config.bias else None

    def forward(self, x: Tensor) -> Tensor:
        return dynamic_tanh(x, self.alpha, self.weight, self.bias)  # (..., D)
