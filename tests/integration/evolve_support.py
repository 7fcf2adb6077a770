"""Tiny evolution plans for the integration tests (trials of about a second)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from llmevo.evolve import EvolutionSettings
from llmevo.evolve.plan import EvolutionPlan
from llmevo.runner.presets import Preset


def tiny_plan(storage_url: str, data_dir: Path, cache_dir: Path,
                  trial_preset: Preset | None = None, **values) -> EvolutionPlan:
    """The plan of a tiny study: ``values`` are ``EvolutionSettings`` fields; ``trial_preset``
    replaces the plan's (a preset no request names, e.g. a one-epoch smoke)."""
    defaults = dict(study="tiny", storage=storage_url, preset="smoke", trial_steps=8,
                    eval_windows=4, trials=5, workers=1, threads=1, population=3, tournament=2,
                    rescore_seeds=1, sampler_seed=0, data_dir=data_dir, cache_dir=cache_dir,
                    heartbeat=1, grace_period=3, device="cpu", trial_lr_factors=[],
                    promotion="manifest")
    plan = EvolutionSettings(**{**defaults, **values}).plan()
    return plan if trial_preset is None else dataclasses.replace(plan, trial_preset=trial_preset)
