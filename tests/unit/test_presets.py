"""Presets are resolved in one place; an explicit step count wins over one_epoch; each preset
names its post-training stage settings (no fallback)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from llmevo.components.post_training.stage import PostTrainSettings
from llmevo.errors import ConfigError
from llmevo.runner.presets import PRESETS, Preset, get_preset


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

    from llmevo.catalog import full_registry
    from llmevo.evolve.space import build_search_space
    from llmevo.evolve.workers import prepare_context

    preset = get_preset("smoke").override({"one_epoch": True, "eval_max_windows": 4})
    plan = tiny_plan(f"sqlite:///{tmp_path}/s.db", data_dir, cache_dir, trial_preset=preset)
    context = prepare_context(plan, build_search_space(full_registry(), preset))
    assert context.trial_preset.train.steps == math.ceil(120_000 / (4 * 64)) == 469


def test_each_preset_names_its_post_training_stage():
    stages = {name: preset.post_training for name, preset in PRESETS.items()}
    assert stages == {
        "smoke": PostTrainSettings(steps=4, batch_size=4, lr=1e-3, held_out_pairs=64),
        "quick": PostTrainSettings(steps=120, batch_size=16, lr=1e-3),
        "standard": PostTrainSettings(steps=240, batch_size=16, lr=1e-3),
    }
    quick = get_preset("quick")
    assert quick.override({"steps": 5}).post_training == quick.post_training  # pretraining only
    assert get_preset("standard").resolved(10**6).post_training == stages["standard"]


def test_a_preset_without_stage_settings_or_an_unknown_name_is_an_error():
    values = get_preset("smoke").model_dump()
    del values["post_training"]
    with pytest.raises(ValidationError, match="post_training"):
        Preset.model_validate(values)
    with pytest.raises(ConfigError, match="--preset fast: unknown preset; known: smoke, quick, standard"):
        get_preset("fast")


def test_stage_overrides_are_validated_in_one_line():
    smoke = get_preset("smoke").post_training
    chosen = smoke.override({"steps": 7, "lr": None, "arithmetic.max_operand": 12})
    assert (chosen.steps, chosen.lr, chosen.arithmetic.max_operand) == (7, smoke.lr, 12)
    with pytest.raises(ConfigError, match="steps"):
        smoke.override({"steps": 0})


def test_a_study_stores_the_preset_as_before_the_stage_settings_joined_it():
    """Studies created before keep resuming: their stored preset has no ``post_training``."""
    from llmevo.evolve.study import preset_description

    smoke = get_preset("smoke")
    assert preset_description(smoke) == {
        k: v for k, v in smoke.model_dump(mode="json").items() if k != "post_training"}
