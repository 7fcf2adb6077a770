"""What an optimizer component provides, and how parameters are sorted into roles.

An optimizer component is one module: its typed config, its ``Optimizer`` (the sequential
update), its ``BatchedOptimizer`` (the same update for R stacked replicas, the component's
``batched``; None where it has none, and such an optimizer trains sequentially only) and the
registered component that builds them. The trainer receives the component
(``llmevo.catalog.build_optimizer``) and never looks an optimizer up by name.

Roles come from the module a parameter belongs to, not from its shape: Muon must treat
the tied embedding (a 2-D matrix) differently from the hidden projections.

Per-parameter learning rates (a parametrization's, ``model/parametrization.py``: μP's
``lr / m`` for hidden weights): a model may carry ``lr_multipliers`` (parameter name ->
multiplier, empty for the standard model); ``scale_learning_rates`` splits the built
optimizer's groups by multiplier, each with its lr multiplied and its weight decay divided
(the decay per step ``lr x wd`` unchanged), before the schedule reads the groups' base rates.
Only a component that declares ``per_group_lr`` (its update reads each group's lr and decay
and nothing shared across groups: AdamW, cautious AdamW, Lion, AdEMAMix) accepts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, ClassVar, Literal

from torch import nn

from llmevo.components.optim.optimizer import BatchedOptimizer, Optimizer
from llmevo.errors import ConfigError
from llmevo.registry import (
    PAPER_WEIGHT_DECAY_AXIS,
    WARMUP_AXIS,
    ComponentChoice,
    Paper,
    StrictModel,
    TuningAxis,
    register,
)

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
    # whether per-parameter learning rates (a parametrization's) may split its param groups
    per_group_lr: ClassVar[bool] = False

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


def scale_learning_rates(optimizer: Optimizer, model: nn.Module, component: OptimizerComponent,
                         name: str) -> None:
    """Apply ``model.lr_multipliers`` (name -> multiplier; absent or empty: nothing happens)
    to the built ``optimizer``: each group split by multiplier, in first-seen order, each part
    with ``lr x multiplier`` and ``weight_decay / multiplier``. ``name`` is the optimizer's
    registered name, for the refusal of a component without ``per_group_lr``."""
    multipliers: dict[str, float] = getattr(model, "lr_multipliers", None) or {}
    if not multipliers:
        return
    if not component.per_group_lr:
        raise ConfigError(f"optimizer '{name}' does not take per-parameter learning rates, which the "
                          "mup parametrization needs (adamw, cautious_adamw, lion, ademamix do); "
                          "use --param standard")
    by_id = {id(p): multipliers[n] for n, p in model.named_parameters() if n in multipliers}
    groups: list[dict[str, Any]] = []
    for group in optimizer.param_groups:
        parts: dict[float, list[nn.Parameter]] = {}
        for p in group["params"]:
            parts.setdefault(by_id.get(id(p), 1.0), []).append(p)
        for multiplier, params in parts.items():
            groups.append({**group, "params": params, "lr": group["lr"] * multiplier,
                           "weight_decay": group["weight_decay"] / multiplier})
    optimizer.param_groups = groups


register_optimizer = partial(register, slot="optimizer", evolve_integrated=True)
"""``register`` for an optimizer component: its slot, and a gene of evolution's search space."""


def arxiv(arxiv_id: str, title: str, organization: str) -> Paper:
    """An optimizer's paper: an arXiv preprint, its abstract page the url."""
    return Paper(arxiv_id=arxiv_id, title=title, url=f"https://arxiv.org/abs/{arxiv_id}", organization=organization)


def settings(config: StrictModel, betas: int = 2) -> dict[str, Any]:
    """A component's config as its optimizer's keyword arguments: every field, with ``beta1`` ..
    ``beta<betas>`` as one ``betas`` tuple (``torch.optim``'s form)."""
    values = config.model_dump()
    grouped = tuple(values.pop(f"beta{index}") for index in range(1, betas + 1))
    return {**values, "betas": grouped}


def paper_space(space: dict[str, TuningAxis], **axes: TuningAxis) -> dict[str, TuningAxis]:
    """An optimizer's ``paper_tuning_space`` (``--tune-space paper``, issue 48, dial a): its
    ``space`` with weight decay up to 1 and warmup, which Wen et al. 2509.02046 tune for every
    optimizer they compare, then ``axes``, the paper's own; an axis keeps its place, new ones follow."""
    return {**space, "weight_decay": PAPER_WEIGHT_DECAY_AXIS, "warmup": WARMUP_AXIS, **axes}


OptimizerFactory = Callable[[ComponentChoice], OptimizerComponent]
"""A run's optimizer component from its ``TrainConfig.optimizer`` (``llmevo.catalog.build_optimizer``)."""


def count(params: Iterator[nn.Parameter] | list[nn.Parameter]) -> int:
    return sum(p.numel() for p in params)
