"""Layer normalisation: ``(x - mean) / sqrt(var + eps) * g + b`` over the feature dimension.

Ba, Kiros and Hinton, "Layer Normalization", arXiv 1607.06450 (equations 3-4; the biased
variance). Reference test: ``layer_norm`` against ``torch.nn.functional.layer_norm`` and a
hand computation (tests/reference/test_norm_reference.py).

Deviations: ``bias=False`` drops the additive term (as in some modern LLMs); the default
keeps it, as in the paper.
"""

from __future__ import annotations

import torch
from pydantic import PositiveFloat
from torch import Tensor, nn

from llmevo.registry import Paper, StrictModel, register


class LayerNormConfig(StrictModel):
    eps: PositiveFloat = 1e-5
    bias: bool = True


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
    """Normalise the last dimension to zero mean, unit (biased) variance; then gain and bias."""
    mean = x.mean(-1, keepdim=True)
    variance = (x - mean).pow(2).mean(-1, keepdim=True)
    out = (x - mean) * torch.rsqrt(variance + eps) * weight
    return out if bias is None else out + bias


@register(
    slot="norm",
    name="layernorm",
    config=LayerNormConfig,
    paper=Paper(
        arxiv_id="1607.06450",
        title="Layer Normalization",
        url="https://arxiv.org/abs/1607.06450",
        organization="University of Toronto",
    ),
    ablation="rmsnorm",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope="LayerNorm with learned gain and bias in every norm position, compared with RMSNorm.",
)
class LayerNorm(nn.Module):
    def __init__(self, config: LayerNormConfig, dim: int):
        super().__init__()
        self.eps = config.eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if config.bias else None

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)
