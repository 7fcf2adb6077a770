"""The catalog: every registered component and architecture, imported by name.

``llmevo.registry`` defines the registry and imports no component; the modules listed here
register themselves when imported (``@register``). This module sits above the model layer:
anything that looks components up or builds a model or an optimizer by name goes through
it; the trainer below it receives what was built (``build_optimizer``'s component).

Adding a component: write its module, then add one import line to ``llmevo.components``.
Adding an architecture: register its class in its own module and import that module here.
"""

from __future__ import annotations

from torch import nn

import llmevo.components  # noqa: F401  (every component, by explicit import)
import llmevo.model.blt.model  # noqa: F401  (architecture "blt-bytes")
import llmevo.model.blt.standin  # noqa: F401  (architecture "blt", the token-level proxy)
import llmevo.model.transformer  # noqa: F401  (architecture "transformer": llama_modern)
from llmevo.components.optim.base import OptimizerComponent
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import REGISTRY, ComponentChoice, Registry


def full_registry() -> Registry:
    """The registry, with every component and architecture of the catalog registered."""
    return REGISTRY


def build_model(config: ModelConfig) -> nn.Module:
    """Build the model a config describes; invalid choices fail here, before any training."""
    names = REGISTRY.names("architecture")
    if config.architecture not in names:
        raise ConfigError(
            f"unknown architecture '{config.architecture}'; known: {', '.join(names)}"
        )
    spec = REGISTRY.get("architecture", config.architecture)
    spec.make_config(config.extra)  # the architecture's typed settings; unknown keys fail here
    return spec.cls(config)


def build_optimizer(choice: ComponentChoice) -> OptimizerComponent:
    """The optimizer component a choice names, with its typed settings (an unknown name or key
    fails here, before any training); the trainer builds the run's ``Optimizer`` from it."""
    spec = REGISTRY.get("optimizer", choice.name)
    return spec.cls(spec.make_config(choice.config))
