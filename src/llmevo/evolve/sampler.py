"""Regularized (aging) evolution as an Optuna sampler (Real et al. 2019, arXiv 1802.01548).

The study's trials are the population: the ``population`` most recent complete trials are
alive, older ones have aged out. A new trial is a copy of the winner of a tournament among
``tournament`` alive trials, with exactly one gene changed (a slot's component, one of the
chosen components' hyperparameters, or a training gene). Until the population is full,
genomes are drawn uniformly at random. A child that is invalid (``build_model`` refuses it or
its size is outside the parameter budget) or already in the study (same genome hash) is
redrawn, so nothing is trained twice. Deviation from the paper: selection uses each trial's
objective value (mean validation fitness over the seeds it was trained with), and the
parent's trial number is stored on the child as the ``parent`` user attribute.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, RandomSampler
from optuna.trial import FrozenTrial, TrialState

from llmevo.errors import ConfigError
from llmevo.evolve.space import GENOME_SLOTS, SearchSpace
from llmevo.runner.optuna_private import study_storage, trial_id

LOST_STATES = ("running", "interrupted")  # a FAIL trial in these states may be retried


def random_value(distribution: BaseDistribution, rng: random.Random) -> Any:
    if isinstance(distribution, CategoricalDistribution):
        return rng.choice(distribution.choices)
    if isinstance(distribution, IntDistribution):
        if distribution.log:
            return int(round(math.exp(rng.uniform(math.log(distribution.low),
                                                  math.log(distribution.high)))))
        return rng.randint(distribution.low, distribution.high)
    if isinstance(distribution, FloatDistribution):
        if distribution.log:
            return math.exp(rng.uniform(math.log(distribution.low), math.log(distribution.high)))
        return rng.uniform(distribution.low, distribution.high)
    raise ConfigError(f"unsupported distribution {type(distribution).__name__}")


def different_value(distribution: BaseDistribution, current: Any, rng: random.Random) -> Any:
    """A value of ``distribution`` other than ``current`` (categorical: another choice)."""
    if isinstance(distribution, CategoricalDistribution):
        others = [c for c in distribution.choices if c != current]
        return rng.choice(others) if others else current
    for _ in range(20):
        value = random_value(distribution, rng)
        if value != current:
            return value
    return current


def mutable_genes(space: SearchSpace, params: dict[str, Any]) -> list[str]:
    """Active genes that can take more than one value."""
    names = []
    for name in space.active_genes(params):
        distribution = space.genes[name]
        if isinstance(distribution, CategoricalDistribution) and len(distribution.choices) < 2:
            continue
        names.append(name)
    return names


def random_params(space: SearchSpace, rng: random.Random) -> dict[str, Any]:
    # a slot with one component draws nothing, so a new single-valued slot (post_training
    # with only "none") leaves the random stream, and so every sampled genome, unchanged
    params = {slot: space.components[slot][0] if len(space.components[slot]) == 1
              else rng.choice(space.components[slot]) for slot in GENOME_SLOTS}
    for name in space.active_genes(params)[len(GENOME_SLOTS):]:
        params[name] = random_value(space.genes[name], rng)
    return params


def mutate(space: SearchSpace, parent: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], str]:
    """The parent with one gene changed; returns (child params, name of the mutated gene).

    Changing a slot's component draws the new component's hyperparameters at random."""
    genes = mutable_genes(space, parent)
    if not genes:
        raise ConfigError("the search space has no gene with more than one value to mutate")
    gene = rng.choice(genes)
    child = dict(parent)
    child[gene] = different_value(space.genes[gene], parent[gene], rng)
    active = space.active_genes(child)
    for name in active:
        if name not in child:
            child[name] = random_value(space.genes[name], rng)
    return {name: child[name] for name in active}, gene


def taken_hashes(trials: Sequence[FrozenTrial]) -> set[str]:
    """Genome hashes already in the study (running or finished; lost trials excepted)."""
    taken = set()
    for trial in trials:
        genome_hash = trial.user_attrs.get("genome_hash")
        if genome_hash is None:
            continue
        if trial.state == TrialState.FAIL and trial.user_attrs.get("state") in LOST_STATES:
            continue
        taken.add(genome_hash)
    return taken


class RegularizedEvolutionSampler(BaseSampler):
    """Aging evolution over the genes of a ``SearchSpace`` (single objective, maximised)."""

    def __init__(
        self,
        space: SearchSpace,
        population: int = 8,
        tournament: int = 3,
        seed: int | None = None,
        max_attempts: int = 64,
    ):
        if population < 2 or not 1 <= tournament <= population:
            raise ConfigError(
                f"population {population} and tournament {tournament}: need population >= 2 "
                "and 1 <= tournament <= population"
            )
        self.space = space
        self.population = population
        self.tournament = tournament
        self.max_attempts = max_attempts
        self._rng = random.Random(seed)
        self._fallback = RandomSampler(seed=seed)

    def reseed_rng(self) -> None:
        self._rng = random.Random()
        self._fallback.reseed_rng()

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self.space.genes)

    def alive(self, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
        """The population: the most recent ``population`` complete trials (oldest retired)."""
        complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
        return sorted(complete, key=lambda t: t.number)[-self.population:]

    def propose(self, trials: Sequence[FrozenTrial]) -> tuple[dict[str, Any], int | None, str | None]:
        """Child params, its parent's trial number (None for a random genome), mutated gene."""
        taken = taken_hashes(trials)
        alive = self.alive(trials)
        candidate: tuple[dict[str, Any], int | None, str | None] | None = None
        for _ in range(self.max_attempts):
            if len(alive) < self.population:
                params, parent, gene = random_params(self.space, self._rng), None, None
            else:
                contestants = self._rng.sample(alive, self.tournament)
                winner = max(contestants, key=lambda t: t.value)
                params, gene = mutate(self.space, dict(winner.params), self._rng)
                parent = winner.number
            candidate = (params, parent, gene)
            genome = self.space.to_genome(params)
            if genome.hash() in taken:
                continue
            try:
                self.space.check(genome)
            except ConfigError:
                continue
            return candidate
        assert candidate is not None
        return candidate  # the objective records it as a duplicate or invalid

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space or trial.params or "fixed_params" in trial.system_attrs:
            return {}  # an enqueued genome (the baseline, a retried trial) keeps its values
        trials = study.get_trials(deepcopy=False)
        params, parent, gene = self.propose(trials)
        storage = study_storage(study)
        storage.set_trial_user_attr(trial_id(trial), "parent", parent)
        storage.set_trial_user_attr(trial_id(trial), "mutated_gene", gene)
        return params

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)
