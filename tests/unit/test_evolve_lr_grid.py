"""Fair trials: each trial's learning-rate grid, and a genome moved to another lr."""

from __future__ import annotations

import math

import pytest

from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.evolve.lr_grid import trial_lr_grid, with_lr
from llmevo.evolve.space import build_search_space
from llmevo.runner.presets import get_preset


def test_trial_grid_is_the_lr_times_each_factor():
    assert trial_lr_grid(3e-3, (0.5, 1.0, 2.0)) == pytest.approx([1.5e-3, 3e-3, 6e-3])
    for bad in ((1.0,), (1.0, 1.0), (0.0, 1.0), (-1.0, 2.0), (1.0, math.inf)):
        with pytest.raises(ConfigError, match="factors"):
            trial_lr_grid(3e-3, bad)


def test_with_lr_changes_only_the_lr():
    baseline = build_search_space(full_registry(), get_preset("quick")).baseline
    other = with_lr(baseline, 1e-2)
    assert other.train.lr == 1e-2 and other.model == baseline.model
    assert other.train.warmup_steps == baseline.train.warmup_steps
