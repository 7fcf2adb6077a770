"""Paired, equal-budget reproductions and scale ladders. From Python::

    from llmevo.experiments import ReproductionRequest, RunSection, reproduce
    run = RunSection(data_dir="data", threads=1)
    artifact = reproduce(ReproductionRequest(name="rope", seeds=[42], run=run))

    from llmevo.experiments import LadderRequest, run_ladder
    ladder = run_ladder(LadderRequest(name="rope", rungs=[-2, -1, 0, 1], run=run))

    from llmevo.experiments import ExternalRequest, plan_external, compare_external
    artifact = compare_external(plan_external(ExternalRequest(experiment="experiment.toml",
                                                          method="norm=rmsnorm")), base_env={})
    # run_comparison: the same, published too (--publish: the experiment's Holm family);
    # ExternalLadderRequest, plan_external_ladder, run_external_ladder: across a declared size

The names are loaded on first use, so importing a submodule (``presets``) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmevo.experiments.evidence import EntryEvent, EvidenceRequest, run_evidence
    from llmevo.experiments.external import ExternalRequest, compare_external, plan_external
    from llmevo.experiments.external_family import run_comparison
    from llmevo.experiments.external_ladder import (
        ExternalLadderRequest,
        plan_external_ladder,
        run_external_ladder,
    )
    from llmevo.experiments.genome_comparison import read_genome
    from llmevo.experiments.ladder import LadderRequest, RungEvent, refit_ladder, run_ladder
    from llmevo.experiments.pipeline import (
        ReproductionOutputs,
        ReproductionPlan,
        ReproductionRequest,
        reproduce,
    )
    from llmevo.experiments.sections import (
        PostTrainingSection,
        RunSection,
        SizeSection,
        TrainingSection,
        TuningSection,
    )
    from llmevo.experiments.verdict import VerdictRecord, VerdictService, verdict_record

_HOMES = {
    "ReproductionOutputs": "pipeline", "ReproductionPlan": "pipeline", "ReproductionRequest": "pipeline",
    "reproduce": "pipeline", "LadderRequest": "ladder", "RungEvent": "ladder", "run_ladder": "ladder",
    "refit_ladder": "ladder",
    "EvidenceRequest": "evidence", "EntryEvent": "evidence", "run_evidence": "evidence",
    "read_genome": "genome_comparison",
    "ExternalRequest": "external", "plan_external": "external", "compare_external": "external",
    "run_comparison": "external_family", "ExternalLadderRequest": "external_ladder",
    "plan_external_ladder": "external_ladder", "run_external_ladder": "external_ladder",
    "VerdictRecord": "verdict", "VerdictService": "verdict", "verdict_record": "verdict",
    "RunSection": "sections", "TrainingSection": "sections", "TuningSection": "sections",
    "SizeSection": "sections", "PostTrainingSection": "sections",
}
__all__ = ["EntryEvent", "EvidenceRequest", "ExternalLadderRequest", "ExternalRequest", "LadderRequest", "PostTrainingSection",
           "ReproductionOutputs", "ReproductionPlan", "ReproductionRequest", "RunSection", "RungEvent",
           "SizeSection", "TrainingSection", "TuningSection", "VerdictRecord", "VerdictService", "plan_external", "plan_external_ladder", "read_genome", "refit_ladder", "reproduce", "run_comparison", "run_evidence", "compare_external", "run_external_ladder", "run_ladder", "verdict_record"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"llmevo.experiments.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
