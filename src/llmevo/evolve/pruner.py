"""Hurdles as an Optuna pruner (the "hurdles" of So et al. 2019, arXiv 1901.11117).

At a checkpoint step a trial reports a cheap intermediate fitness (minus the validation loss
over a few windows). It is stopped when that value is clearly worse than the population's:
below the ``quantile`` of the values the most recent ``population`` complete trials
reported at the same step, by more than ``margin`` (nats). Nothing is pruned until
``min_trials`` complete trials have reported at that step.
"""

from __future__ import annotations

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from llmevo.errors import ConfigError


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default method)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def is_clearly_worse(value: float, population: list[float], q: float, margin: float) -> bool:
    return value < quantile(population, q) - margin


class HurdlePruner(BasePruner):
    def __init__(self, population: int = 8, quantile: float = 0.25, margin: float = 0.05,
                 min_trials: int = 4):
        if not 0.0 <= quantile <= 1.0 or margin < 0 or min_trials < 1:
            raise ConfigError(
                f"hurdle pruner: quantile {quantile} must be in [0, 1], margin {margin} >= 0, "
                f"min_trials {min_trials} >= 1"
            )
        self.population = population
        self.quantile = quantile
        self.margin = margin
        self.min_trials = min_trials

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        value = trial.intermediate_values[step]
        complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                    if step in t.intermediate_values]
        recent = sorted(complete, key=lambda t: t.number)[-self.population:]
        if len(recent) < self.min_trials:
            return False
        reported = [t.intermediate_values[step] for t in recent]
        return is_clearly_worse(value, reported, self.quantile, self.margin)
