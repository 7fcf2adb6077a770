"""ScaleNorm: ``g * x / ||x||``, an l2 normalisation with one learned scalar ``g`` per norm.

Nguyen and Salazar, "Transformers without Tears: Improving the Normalization of
Self-Attention", arXiv 1910.05895 (section 2.3, "scaled l2 normalization":
``ScaleNorm(x; g) = g * x / ||x||`` projects each token's vector onto the sphere of radius
``g``, one scalar ``g`` per normalisation layer, initialised to ``sqrt(d)``). At
initialisation it equals RMSNorm with unit gains (``sqrt(d) / ||x|| = 1 / rms(x)``); it then
learns one radius instead of RMSNorm's per-channel gains. It fills every norm position of the
model (before attention, before the feed-forward, and the final norm). Reference test: the
module against ``x * g / ||x||`` composed from plain torch ops, the initial ``g``, the
equality with unit-gain RMSNorm at initialisation and ``g``'s gradient against its closed
form ``<dL/dy, x / ||x||>`` (tests/reference/test_block_new_reference.py).

Deviations: the norm is clamped below at ``eps`` (1e-5, the authors' released code) so a
zero vector maps to zero instead of NaN. The paper pairs ScaleNorm with FixNorm (unit-length
word embeddings) and PreNorm for translation; only ScaleNorm is taken here, inside the
model's block layout (pre-norm in llama_modern).
"""

from __future__ import annotations

import math

import torch
from pydantic import PositiveFloat
from torch import Tensor, nn

from llmevo.registry import Paper, StrictModel, register


class ScaleNormConfig(StrictModel):
    eps: PositiveFloat = 1e-5


def scale_norm(x: Tensor, scale: Tensor, eps: float) -> Tensor:
    """``scale * x / max(||x||, eps)`` over the last dimension; x (..., D), scale (1,)."""
    return x * (scale / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp(min=eps))


@register(
    slot="norm",
    name="scalenorm",
    config=ScaleNormConfig,
    paper=Paper(
        arxiv_id="1910.05895",
        title="Transformers without Tears: Improving the Normalization of Self-Attention",
        url="https://arxiv.org/abs/1910.05895",
        organization="University of Notre Dame; Amazon AWS AI",
    ),
    ablation="rmsnorm",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "ScaleNorm (one learned radius per norm, initialised to sqrt(d)) in every norm "
        "position of a 2-layer LM, compared with RMSNorm; the paper's FixNorm embeddings, "
        "warmup-free schedules and translation tasks are not reproduced."
    ),
)
class ScaleNorm(nn.Module):
    def __init__(self, config: ScaleNormConfig, dim: int):
        super().__init__()
        self.eps = config.eps
        self.scale = nn.Parameter(torch.full((1,), math.sqrt(dim)))

    def forward(self, x: Tensor) -> Tensor:
        return scale_norm(x, self.scale, self.eps)  # (..., D)
