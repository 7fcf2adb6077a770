"""Evolution of model designs on an Optuna study. From Python::

    from llmevo.evolve import EvolutionSettings, run
    summary = run(EvolutionSettings(preset="smoke", trials=4, data_dir="data"))

The names are loaded on first use, so importing a submodule (``space``) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmevo.evolve.pipeline import (
        EvolutionSettings,
        EvolutionSummary,
        explain,
        run,
        search_space,
    )

__all__ = ["EvolutionSettings", "EvolutionSummary", "explain", "run", "search_space"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from llmevo.evolve import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
