"""Tiny evolution settings for the integration tests (trials of about a second)."""

from __future__ import annotations

from pathlib import Path

from llmevo.evolve.engine import EvolveSettings
from llmevo.runner.presets import get_preset


def tiny_settings(storage_url: str, data_dir: Path, cache_dir: Path, **values) -> EvolveSettings:
    preset = get_preset("smoke").override({"steps": 8, "eval_max_windows": 4})
    defaults = dict(study_name="tiny", storage_url=storage_url, preset=preset, trials=5,
                    workers=1, population=3, tournament=2, rescore_seeds=1, sampler_seed=0,
                    data_dir=data_dir, cache_dir=cache_dir, heartbeat_interval=1, grace_period=3)
    defaults.update(values)
    return EvolveSettings(**defaults)
