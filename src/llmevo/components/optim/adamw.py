"""AdamW: Adam with decoupled weight decay.

Loshchilov and Hutter, "Decoupled Weight Decay Regularization", arXiv 1711.05101. This is
``torch.optim.AdamW`` itself (the reference); the component only fixes its configuration.
"""

from __future__ import annotations

import torch
from pydantic import PositiveFloat
from torch import nn

from llmevo.components.optim.base import OptimizerComponent
from llmevo.registry import Paper, SearchDimension, StrictModel, register


class AdamWConfig(StrictModel):
    beta1: float = 0.9
    beta2: float = 0.999
    eps: PositiveFloat = 1e-8


@register(
    slot="optimizer",
    name="adamw",
    config=AdamWConfig,
    paper=Paper(
        arxiv_id="1711.05101",
        title="Decoupled Weight Decay Regularization",
        url="https://arxiv.org/abs/1711.05101",
        organization="University of Freiburg",
    ),
    implementation_status="full",
    baseline=True,
    evolve_integrated=True,
    scope="torch.optim.AdamW over all parameters in one group.",
    search_space={"beta2": SearchDimension(choices=(0.95, 0.99, 0.999))},
)
class AdamW(OptimizerComponent):
    def build(self, model: nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
        config = self.config
        return torch.optim.AdamW(
            model.parameters(),
            lr=lr,
            betas=(config.beta1, config.beta2),
            eps=config.eps,
            weight_decay=weight_decay,
        )
