"""SwiGLU feed-forward: ``W2 (SiLU(W1 x) * W3 x)``.

Shazeer, "GLU Variants Improve Transformer", arXiv 2002.05202. Reference test: the formula
written out with torch.sigmoid on explicit weight matrices, and a hand-computed case
(tests/reference/test_feedforward_reference.py).
"""

from __future__ import annotations

from typing import Annotated

import torch.nn.functional as F
from pydantic import PositiveInt
from torch import Tensor, nn

from llmevo.components.base import FeedForward, ModelDims
from llmevo.registry import Paper, Scaling, SearchDimension, StrictModel, register

GLU_PAPER = Paper(
    arxiv_id="2002.05202",
    title="GLU Variants Improve Transformer",
    url="https://arxiv.org/abs/2002.05202",
    organization="Google",
)


class GatedConfig(StrictModel):
    hidden: Annotated[PositiveInt, Scaling.WIDTH] = 192


class GatedFeedForward(FeedForward):
    """``down(activation(gate(x)) * up(x))``; subclasses choose the activation."""

    def __init__(self, config: GatedConfig, dims: ModelDims):
        super().__init__()
        self.gate = nn.Linear(dims.d_model, config.hidden, bias=False)
        self.up = nn.Linear(dims.d_model, config.hidden, bias=False)
        self.down = nn.Linear(config.hidden, dims.d_model, bias=False)

    def activation(self, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.activation(self.gate(x)) * self.up(x))  # (B, T, D)


@register(
    slot="feedforward",
    name="swiglu",
    config=GatedConfig,
    paper=GLU_PAPER,
    ablation="gelu",
    implementation_status="full",
    baseline=True,
    evolve_integrated=True,
    scope="SwiGLU MLP (no biases) in place of a GELU MLP of similar parameter count.",
    search_space={"hidden": SearchDimension(choices=(128, 192, 256))},
)
class SwiGLU(GatedFeedForward):
    def activation(self, x: Tensor) -> Tensor:
        return F.silu(x)
