"""GEGLU feed-forward: ``W2 (GELU(W1 x) * W3 x)``.

Shazeer, "GLU Variants Improve Transformer", arXiv 2002.05202 (equation 6, no biases).
Reference test: the formula written out with the erf form of GELU on explicit weight
matrices (tests/reference/test_feedforward_reference.py).

Deviations: none; the exact (erf) GELU is used, not the tanh approximation.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from llmevo.components.feedforward.swiglu import GLU_PAPER, GatedConfig, GatedFeedForward
from llmevo.registry import SearchDimension, register


@register(
    slot="feedforward",
    name="geglu",
    config=GatedConfig,
    paper=GLU_PAPER,
    ablation="gelu",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope="GEGLU MLP (no biases) against a 2-matrix GELU MLP of equal parameter count.",
    search_space={"hidden": SearchDimension(choices=(128, 192, 256))},
)
class GEGLU(GatedFeedForward):
    def activation(self, x: Tensor) -> Tensor:
        return F.gelu(x)
