"""Trials scored at their best learning rate.

A trial trains its genome at a small learning-rate grid around the genome's own lr (default
x0.5, x1, x2), all runs at once through ``train_many``, and is scored by its best setting
(``objective``); trial 0 (``llama_modern``) is treated the same way, so the baseline's
learning rate is searched as much as any candidate's. The final champion-versus-baseline
comparison is tuned as any reproduction is (``evolve.champion.comparison_plan``, through
``experiments.reproduction``), not here.

Public API: ``DEFAULT_TRIAL_LR_FACTORS``, ``trial_lr_grid``, ``with_lr``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llmevo.errors import ConfigError
from llmevo.runner.genome import Genome

DEFAULT_TRIAL_LR_FACTORS = (0.5, 1.0, 2.0)


def trial_lr_grid(lr: float, factors: Sequence[float]) -> list[float]:
    """The learning rates a trial tries: ``lr`` times each factor, ascending, distinct."""
    if len(set(factors)) < 2 or any(not (f > 0 and math.isfinite(f)) for f in factors):
        raise ConfigError(f"trial lr factors must be at least 2 distinct positive numbers, got {list(factors)}")
    return sorted({lr * f for f in factors})


def with_lr(genome: Genome, lr: float) -> Genome:
    return genome.model_copy(update={"train": genome.train.model_copy(update={"lr": lr})})
