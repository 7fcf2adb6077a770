"""Fixed sinusoidal absolute position encoding, added to the (scaled) token embeddings.

Vaswani et al., "Attention Is All You Need", arXiv 1706.03762, section 3.5:
``PE(pos, 2i) = sin(pos / base^(2i / d_model))``, ``PE(pos, 2i+1) = cos(pos / base^(2i /
d_model))``, and (section 3.4) the embeddings are multiplied by ``sqrt(d_model)`` before the
encoding is added. Reference test: the table against the formula evaluated element by
element with ``math.sin``/``math.cos`` (tests/reference/test_sinusoidal_reference.py).

Deviations: none in the formula. ``scale_embeddings=False`` drops the ``sqrt(d_model)``
factor (some implementations, e.g. fairseq's ``no_scale_embedding``, do this); with tied
embeddings the output head still sees the unscaled table, as in the paper.
"""

from __future__ import annotations

import math

import torch
from pydantic import model_validator
from torch import Tensor

from llmevo.components.base import ModelDims, PositionEncoding
from llmevo.registry import Paper, SearchDimension, StrictModel, register


class SinusoidalConfig(StrictModel):
    base: float = 10_000.0
    scale_embeddings: bool = True

    @model_validator(mode="after")
    def _base_above_one(self) -> SinusoidalConfig:
        if self.base <= 1.0:
            raise ValueError(f"base must be > 1, got {self.base}")
        return self


def sinusoidal_table(positions: Tensor, d_model: int, base: float) -> Tensor:
    """(T, d_model): sin on even channels, cos on odd channels, wavelengths base^(2i/d)."""
    exponents = torch.arange(0, d_model, 2, dtype=torch.float64) / d_model  # (ceil(D/2),)
    inv_freq = (base**-exponents).to(torch.float32).to(positions.device)
    angles = positions.to(torch.float32)[:, None] * inv_freq  # (T, ceil(D/2))
    table = torch.empty(positions.shape[0], d_model, device=positions.device)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()[:, : d_model // 2]
    return table


@register(
    slot="position",
    name="sinusoidal",
    config=SinusoidalConfig,
    paper=Paper(
        arxiv_id="1706.03762",
        title="Attention Is All You Need",
        url="https://arxiv.org/abs/1706.03762",
        organization="Google Brain",
    ),
    ablation="learned",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Fixed sin/cos table added to sqrt(d_model)-scaled token embeddings, compared with "
        "learned absolute positions (the paper's Table 3 row E); not the paper's translation tasks."
    ),
    search_space={"base": SearchDimension(choices=(1_000.0, 10_000.0))},
)
class SinusoidalPosition(PositionEncoding):
    def __init__(self, config: SinusoidalConfig, dims: ModelDims):
        super().__init__()
        self.base = config.base
        self.d_model = dims.d_model
        self.scale = math.sqrt(dims.d_model) if config.scale_embeddings else 1.0

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        table = sinusoidal_table(positions, self.d_model, self.base)  # (T, D)
        return x * self.scale + table.to(x.dtype)  # (B, T, D)
