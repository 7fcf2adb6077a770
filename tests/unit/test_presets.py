"""Presets are resolved in one place; an explicit step count wins over one_epoch."""

from __future__ import annotations

import math

from llmevo.runner.presets import get_preset


def test_standard_resolves_to_one_pass_over_the_stream():
    standard = get_preset("standard")
    resolved = standard.resolved(1_000_000)
    assert resolved.train.steps == math.ceil(1_000_000 / (48 * 64)) == 326
    assert resolved.one_epoch is False
    assert resolved.resolved(5) == resolved  # concrete steps stay put


def test_explicit_steps_win_over_one_epoch():
    chosen = get_preset("standard").override({"steps": 10})
    assert chosen.one_epoch is False
    assert chosen.resolved(2_000_000).train.steps == 10
    assert get_preset("standard").override({"train.steps": 7}).resolved(2_000_000).train.steps == 7


def test_other_overrides_keep_the_one_epoch_rule():
    chosen = get_preset("standard").override({"steps": None, "lr": 1e-3})
    assert chosen.one_epoch is True
    assert chosen.resolved(48 * 64 * 3 + 1).train.steps == 4


def test_fixed_step_presets_are_unchanged_by_resolution():
    quick = get_preset("quick")
    assert quick.resolved(10**9) == quick


def test_evolution_trains_one_epoch_presets_for_the_full_epoch(tmp_path, data_dir, cache_dir):
    """``evolve --preset standard`` used to train trials (and the final comparison) for 1 step."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
    from evolve_support import tiny_plan

    from llmevo.catalog import ensure_registered
    from llmevo.evolve.space import build_search_space
    from llmevo.evolve.workers import prepare_context

    preset = get_preset("smoke").override({"one_epoch": True, "eval_max_windows": 4})
    plan = tiny_plan(f"sqlite:///{tmp_path}/s.db", data_dir, cache_dir, trial_preset=preset)
    context = prepare_context(plan, build_search_space(ensure_registered(), preset))
    assert context.trial_preset.train.steps == math.ceil(120_000 / (4 * 64)) == 469
