"""Squared-ReLU MLP: ``W2 relu(W1 x)^2``, one of Primer's two modifications.

So et al., "Primer: Searching for Efficient Transformers for Language Modeling", arXiv
2109.08668 (section 3: squared ReLU activations in the feed-forward block). Reference
test: the formula with ``torch.clamp(x, min=0) ** 2`` on explicit matrices
(tests/reference/test_feedforward_reference.py).

Deviations: only the squared ReLU is taken from Primer; its depthwise convolutions after
the q/k/v projections (Multi-DConv-Head Attention) are not part of this component. No
biases; hidden 288 by default (parameter-matched to SwiGLU 192).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from llmevo.components.feedforward.gelu import PlainConfig, PlainFeedForward
from llmevo.registry import Paper, SearchDimension, register


def squared_relu(x: Tensor) -> Tensor:
    return F.relu(x).square()


@register(
    slot="feedforward",
    name="relu2",
    config=PlainConfig,
    paper=Paper(
        arxiv_id="2109.08668",
        title="Primer: Searching for Efficient Transformers for Language Modeling",
        url="https://arxiv.org/abs/2109.08668",
        organization="Google Research, Brain Team",
    ),
    ablation="gelu",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Squared-ReLU MLP against a GELU MLP of the same size; Primer's depthwise-convolution "
        "attention and its search are not reproduced."
    ),
    search_space={"hidden": SearchDimension(choices=(192, 288, 384))},
)
class SquaredReluMLP(PlainFeedForward):
    def activation(self, x: Tensor) -> Tensor:
        return squared_relu(x)
