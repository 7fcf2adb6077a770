"""What an optimizer component provides, and how parameters are sorted into roles.

An optimizer component is one module: its typed config, its ``Optimizer`` (the sequential
update), its ``BatchedOptimizer`` (the same update for R stacked replicas, the component's
``batched``; None where it has none, and such an optimizer trains sequentially only) and the
registered component that builds them. The trainer receives the component
(``llmevo.catalog.build_optimizer``) and never looks an optimizer up by name.

Roles come from the module a parameter belongs to, not from its shape: Muon must treat
the tied embedding (a 2-D matrix) differently from the hidden projections.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Literal

from torch import nn

from llmevo.components.optim.optimizer import BatchedOptimizer, Optimizer
from llmevo.registry import ComponentChoice, StrictModel

Role = Literal["embedding", "hidden_matrix", "gain_or_bias"]


def parameter_roles(model: nn.Module) -> dict[str, Role]:
    """Name -> role: embedding tables, hidden Linear weights, everything else.

    A Linear whose weight is shared with an embedding (a tied output head) is an embedding.
    """
    roles: dict[str, Role] = {}
    embedding_ids = {
        id(module.weight) for module in model.modules() if isinstance(module, nn.Embedding)
    }
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            name = f"{module_name}.{param_name}" if module_name else param_name
            if id(param) in embedding_ids:
                roles[name] = "embedding"
            elif isinstance(module, nn.Linear) and param_name == "weight":
                roles[name] = "hidden_matrix"
            else:
                roles[name] = "gain_or_bias"
    return roles


def parameters_by_role(model: nn.Module) -> dict[Role, list[nn.Parameter]]:
    groups: dict[Role, list[nn.Parameter]] = {"embedding": [], "hidden_matrix": [], "gain_or_bias": []}
    named = dict(model.named_parameters())
    for name, role in parameter_roles(model).items():
        if name in named:  # shared parameters appear once in named_parameters()
            groups[role].append(named[name])
    return groups


class OptimizerComponent:
    """Builds an ``Optimizer`` (``optim/optimizer.py``, not ``torch.optim``: no dynamo import)
    for a model and reports optimizer statistics; ``batched`` is its batched twin, or None."""

    batched: ClassVar[type[BatchedOptimizer] | None] = None

    def __init__(self, config: StrictModel):
        self.config = config

    def build(self, model: nn.Module, lr: float, weight_decay: float) -> Optimizer:  # pragma: no cover
        raise NotImplementedError

    def statistics(self) -> dict[str, Any]:
        """Figures for ``architecture_stats`` (e.g. a parameter split)."""
        return {}

    def orthogonality_error(self) -> float:
        """``muon_orthogonality_error`` of the artifact; 0 for optimizers that don't orthogonalise."""
        return 0.0


OptimizerFactory = Callable[[ComponentChoice], OptimizerComponent]
"""A run's optimizer component from its ``TrainConfig.optimizer`` (``llmevo.catalog.build_optimizer``)."""


def count(params: Iterator[nn.Parameter] | list[nn.Parameter]) -> int:
    return sum(p.numel() for p in params)
