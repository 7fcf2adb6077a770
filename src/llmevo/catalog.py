"""The catalog: every registered component and architecture, declared by name.

``llmevo.registry`` defines the registry and imports no component; the modules declared in
``llmevo.components.COMPONENTS`` and ``ARCHITECTURES`` here register themselves when imported
(``@register``), which the registry does when a lookup first names them. This module sits
above the model layer: anything that looks components up or builds a model or an optimizer
by name goes through it; the trainer below it receives what was built (``build_optimizer``'s
component).

Adding a component: write its module, then add its line to ``llmevo.components.COMPONENTS``.
Adding an architecture: register its class in its own module and add it to ``ARCHITECTURES``.

Plugins: a separate distribution registers components with no edit to llmevo by declaring
an entry point in the group ``llmevo.components`` whose value is a module (``[project.entry-
points."llmevo.components"] scaled = "llmevo_scaled.component"``); ``full_registry`` imports
each such module once, its ``@register`` decorators add the components, and each is marked
with the distribution's name as its origin (``llmevo components`` shows it). A plugin that
fails to import, registers a name twice or registers nothing is a one-line ``ConfigError``
naming the plugin. Entry points are the one place llmevo discovers code; it reads installed
distributions' metadata, never scans files.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from torch import nn

import llmevo.components  # noqa: F401  (declares every component: llmevo.components.COMPONENTS)
from llmevo.components.data.base import DataRecipe
from llmevo.components.optim.base import OptimizerComponent
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import REGISTRY, ComponentChoice, Registry

PLUGIN_GROUP = "llmevo.components"
# the architectures, declared like the components (each module imported when a run names it)
ARCHITECTURES = {
    "transformer": "llmevo.model.transformer",  # llama_modern
    "blt-bytes": "llmevo.model.blt.model",
    "blt": "llmevo.model.blt.standin",  # the token-level proxy
}
for _name, _module in ARCHITECTURES.items():
    REGISTRY.declare("architecture", _name, _module)
_loaded_plugins: set[tuple[str, str, str]] = set()  # (plugin, entry point, module)
_all_loaded = False


def _plugin_name(entry_point: EntryPoint) -> str:
    return entry_point.dist.name if entry_point.dist is not None else entry_point.value


def load_plugin(entry_point: EntryPoint, registry: Registry = REGISTRY) -> list[str]:
    """Import one plugin's module and mark what it registered with its distribution's name;
    ``slot/name`` of each. Any failure is one ``ConfigError`` naming the plugin."""
    plugin = _plugin_name(entry_point)
    where = f"plugin '{plugin}' (entry point {entry_point.name} = {entry_point.value})"
    before = {(spec.slot, spec.name) for spec in registry.all()}
    try:
        entry_point.load()
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    except (KeyboardInterrupt, GeneratorExit):  # the user's interrupt is not the plugin's failure
        raise
    except BaseException as error:  # an arbitrary package's import: any error is the plugin's,
        # SystemExit included (a module that calls sys.exit() would end llmevo silently)
        detail = f"SystemExit({error.code!r})" if isinstance(error, SystemExit) else \
            f"{type(error).__name__}: {error}"
        raise ConfigError(f"{where} failed to load: {detail}") from None
    added = sorted({(spec.slot, spec.name) for spec in registry.all()} - before)
    if not added:
        raise ConfigError(f"{where} registered no component; its module must use "
                          "llmevo.registry.register")
    for slot, name in added:
        registry.set_origin(slot, name, plugin)
    return [f"{slot}/{name}" for slot, name in added]


def full_registry() -> Registry:
    """The registry, with every component and architecture of the catalog registered and
    every installed plugin loaded (once per process)."""
    global _all_loaded
    if not _all_loaded:
        found = sorted(entry_points(group=PLUGIN_GROUP), key=lambda ep: (_plugin_name(ep), ep.name))
        for entry_point in found:
            key = (_plugin_name(entry_point), entry_point.name, entry_point.value)
            if key not in _loaded_plugins:  # a plugin that failed is tried again next call
                load_plugin(entry_point)
                _loaded_plugins.add(key)
        _all_loaded = True
    return REGISTRY


def build_model(config: ModelConfig) -> nn.Module:
    """Build the model a config describes; invalid choices fail here, before any training."""
    registry = full_registry()
    if not registry.has("architecture", config.architecture):
        raise ConfigError(f"unknown architecture '{config.architecture}'; "
                          f"known: {', '.join(registry.names('architecture'))}")
    spec = registry.get("architecture", config.architecture)
    spec.make_config(config.extra)  # the architecture's typed settings; unknown keys fail here
    return spec.cls(config)


def build_optimizer(choice: ComponentChoice) -> OptimizerComponent:
    """The optimizer component a choice names, with its typed settings (an unknown name or key
    fails here, before any training); the trainer builds the run's ``Optimizer`` from it."""
    spec = full_registry().get("optimizer", choice.name)
    return spec.cls(spec.make_config(choice.config))


def build_recipe(choice: ComponentChoice) -> DataRecipe:
    """The data-recipe component a choice names, with its typed settings (an unknown name or
    key, a negative weight or weights summing to zero fail here, before any training)."""
    spec = full_registry().get("data", choice.name)
    return spec.cls(spec.make_config(choice.config))
