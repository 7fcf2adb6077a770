"""Root-mean-square layer normalisation: ``x / sqrt(mean(x^2) + eps) * g``.

Zhang and Sennrich, "Root Mean Square Layer Normalization", arXiv 1910.07467. Reference
test: the formula written out element by element and a hand computation, in float32 and
float64 (tests/reference/test_norm_reference.py).

Speed: where input and gain share a dtype, ``rms_norm`` calls torch's fused
``F.rms_norm`` (one kernel forward and backward instead of five element-wise ones; equal
to the formula in float32 on the llama_modern step, docs/LOG.md 2026-12-01 "A cheaper
single-model step"). Mixed dtypes (a bf16 input under autocast against a float32 gain)
keep the written-out formula, whose type promotion returns float32 as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import PositiveFloat
from torch import Tensor, nn

from llmevo.registry import Paper, StrictModel, register


class RMSNormConfig(StrictModel):
    eps: PositiveFloat = 1e-6


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2, last dim) + eps) * weight; x (..., D), weight (D,)."""
    if x.dtype == weight.dtype:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@register(
    slot="norm",
    name="rmsnorm",
    config=RMSNormConfig,
    paper=Paper(
        arxiv_id="1910.07467",
        title="Root Mean Square Layer Normalization",
        url="https://arxiv.org/abs/1910.07467",
        organization="University of Edinburgh",
    ),
    ablation="layernorm",
    implementation_status="full",
    baseline=True,
    evolve_integrated=True,
    scope="RMSNorm with a learned gain and no bias, in place of LayerNorm.",
)
class RMSNorm(nn.Module):
    def __init__(self, config: RMSNormConfig, dim: int):
        super().__init__()
        self.eps = config.eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)
