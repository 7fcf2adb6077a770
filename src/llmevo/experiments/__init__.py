"""Paired, equal-budget reproductions. From Python::

    from llmevo.experiments import ReproductionRequest, reproduce
    artifact = reproduce(ReproductionRequest(name="rope", data_dir="data", seeds=[42]))

The names are loaded on first use, so importing a submodule (``presets``) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmevo.experiments.pipeline import (
        ReproductionOutputs,
        ReproductionPlan,
        ReproductionRequest,
        reproduce,
    )

__all__ = ["ReproductionOutputs", "ReproductionPlan", "ReproductionRequest", "reproduce"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from llmevo.experiments import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
