"""The classic two-matrix MLP with a GELU activation: ``W2 GELU(W1 x)``.

Hendrycks and Gimpel, "Gaussian Error Linear Units (GELUs)", arXiv 1606.08415 (the
activation; the two-layer position-wise MLP is Vaswani et al., arXiv 1706.03762). The
default hidden size 288 gives ``2 * 64 * 288 = 36,864`` weights per layer, exactly the
count of SwiGLU with hidden 192 (``3 * 64 * 192``), so the two compare at equal size.
Reference test: the formula with ``0.5 x (1 + erf(x / sqrt 2))`` on explicit matrices
(tests/reference/test_feedforward_reference.py).

Deviations: no biases (the llama_modern convention; the original MLP has them).
``PlainFeedForward`` is shared with the squared-ReLU component.
"""

from __future__ import annotations

from typing import Annotated

import torch.nn.functional as F
from pydantic import PositiveInt
from torch import Tensor, nn

from llmevo.components.base import FeedForward, ModelDims
from llmevo.registry import Paper, Scaling, SearchDimension, StrictModel, register


class PlainConfig(StrictModel):
    hidden: Annotated[PositiveInt, Scaling.WIDTH] = 288


class PlainFeedForward(FeedForward):
    """``down(activation(up(x)))``; subclasses choose the activation."""

    def __init__(self, config: PlainConfig, dims: ModelDims):
        super().__init__()
        self.up = nn.Linear(dims.d_model, config.hidden, bias=False)
        self.down = nn.Linear(config.hidden, dims.d_model, bias=False)

    def activation(self, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.activation(self.up(x)))  # (B, T, D)


@register(
    slot="feedforward",
    name="gelu",
    config=PlainConfig,
    paper=Paper(
        arxiv_id="1606.08415",
        title="Gaussian Error Linear Units (GELUs)",
        url="https://arxiv.org/abs/1606.08415",
        organization="University of California, Berkeley; Toyota Technological Institute at Chicago",
    ),
    ablation="swiglu",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Two-matrix GELU MLP (hidden 288, parameter-matched to SwiGLU 192) compared with the "
        "llama_modern SwiGLU; the paper's activation benchmarks (MNIST, CIFAR, TIMIT) are not run."
    ),
    search_space={"hidden": SearchDimension(choices=(192, 288, 384))},
)
class GeluMLP(PlainFeedForward):
    def activation(self, x: Tensor) -> Tensor:
        return F.gelu(x)
