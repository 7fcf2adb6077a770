"""Paired, equal-budget reproductions and scale ladders. From Python::

    from llmevo.experiments import ReproductionRequest, reproduce
    artifact = reproduce(ReproductionRequest(name="rope", data_dir="data", seeds=[42]))

    from llmevo.experiments import LadderRequest, run_ladder
    ladder = run_ladder(LadderRequest(name="rope", rungs=[-2, -1, 0, 1], data_dir="data"))

    from llmevo.experiments import ExternalRequest, plan_external, run_external
    artifact = run_external(plan_external(ExternalRequest(experiment="experiment.toml",
                                                          method="norm=rmsnorm")), base_env={})

The names are loaded on first use, so importing a submodule (``presets``) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmevo.experiments.evidence import EntryEvent, EvidenceRequest, run_evidence
    from llmevo.experiments.external import ExternalRequest, plan_external, run_external
    from llmevo.experiments.genome_comparison import read_genome
    from llmevo.experiments.ladder import LadderRequest, RungEvent, refit_ladder, run_ladder
    from llmevo.experiments.pipeline import (
        ReproductionOutputs,
        ReproductionPlan,
        ReproductionRequest,
        reproduce,
    )
    from llmevo.experiments.verdict import VerdictRecord, VerdictService, verdict_record

_HOMES = {
    "ReproductionOutputs": "pipeline", "ReproductionPlan": "pipeline", "ReproductionRequest": "pipeline",
    "reproduce": "pipeline", "LadderRequest": "ladder", "RungEvent": "ladder", "run_ladder": "ladder",
    "refit_ladder": "ladder",
    "EvidenceRequest": "evidence", "EntryEvent": "evidence", "run_evidence": "evidence",
    "read_genome": "genome_comparison",
    "ExternalRequest": "external", "plan_external": "external", "run_external": "external",
    "VerdictRecord": "verdict", "VerdictService": "verdict", "verdict_record": "verdict",
}
__all__ = ["EntryEvent", "EvidenceRequest", "ExternalRequest", "LadderRequest", "ReproductionOutputs", "ReproductionPlan", "ReproductionRequest", "RungEvent",
           "VerdictRecord", "VerdictService", "plan_external", "read_genome", "refit_ladder", "reproduce", "run_evidence", "run_external", "run_ladder", "verdict_record"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"llmevo.experiments.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
