"""Regularized evolution: one-gene mutation, tournament, aging, dedup, pruner hurdles."""

from __future__ import annotations

import random

import numpy as np
import optuna
import pytest

from llmevo.catalog import full_registry
from llmevo.evolve.pruner import HurdlePruner, quantile
from llmevo.evolve.sampler import RegularizedEvolutionSampler, mutate, random_params
from llmevo.evolve.space import build_search_space
from llmevo.runner.presets import get_preset

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def space():
    return build_search_space(full_registry(), get_preset("quick"))


def _complete(study, space, params, value, intermediate=None):
    genome = space.to_genome(params)
    study.add_trial(optuna.create_trial(
        params=params, distributions={k: space.genes[k] for k in params}, value=value,
        user_attrs={"genome_hash": genome.hash(), "state": "complete"},
        intermediate_values=intermediate or {}))


def test_mutation_changes_exactly_one_gene(space):
    rng = random.Random(0)
    parent = space.to_params(space.baseline)
    for _ in range(50):
        child, gene = mutate(space, parent, rng)
        changed = {k for k in set(parent) | set(child) if parent.get(k) != child.get(k)}
        assert gene in changed
        if "." in gene:  # a hyperparameter gene: nothing else moves
            assert changed == {gene}
        else:  # a slot: only that slot's component genes come and go
            assert all(k == gene or k.startswith(f"{gene}.") for k in changed)
        assert set(child) == set(space.active_genes(child))


def test_tournament_parent_comes_from_the_alive_population(space):
    study = optuna.create_study(direction="maximize")
    rng = random.Random(1)
    for value in range(10):
        _complete(study, space, random_params(space, rng), float(value))
    sampler = RegularizedEvolutionSampler(space, population=4, tournament=4, seed=0)
    alive = sampler.alive(study.get_trials())
    assert [t.number for t in alive] == [6, 7, 8, 9]  # the oldest are retired
    params, parent, gene = sampler.propose(study.get_trials())
    assert parent == 9  # a full tournament always picks the best alive trial
    assert gene is not None and space.to_genome(params).hash() not in {
        t.user_attrs["genome_hash"] for t in study.get_trials()}


def test_sampler_never_repeats_a_genome_and_records_parents(space):
    sampler = RegularizedEvolutionSampler(space, population=3, tournament=2, seed=3)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial):
        params = space.suggest(trial)
        genome = space.to_genome(params)
        trial.set_user_attr("genome_hash", genome.hash())
        return -abs(np.log(params["train.lr"] / 3e-3))

    study.optimize(objective, n_trials=25)
    hashes = [t.user_attrs["genome_hash"] for t in study.trials]
    assert len(set(hashes)) == len(hashes)
    parents = [t.user_attrs.get("parent") for t in study.trials]
    assert parents[:3] == [None, None, None] and all(p is not None for p in parents[3:])
    assert all(p < t.number for p, t in zip(parents[3:], study.trials[3:], strict=True))


def test_quantile_matches_numpy():
    values = [0.3, -1.0, 2.5, 0.7, 0.1]
    for q in (0.0, 0.25, 0.5, 0.9, 1.0):
        assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)))


def test_hurdle_prunes_only_clearly_worse_trials(space):
    study = optuna.create_study(direction="maximize", pruner=HurdlePruner(margin=0.05, min_trials=4))
    rng = random.Random(2)
    pruner = study.pruner
    trial = study.ask()
    trial.report(-9.0, 5)
    assert not pruner.prune(study, study.trials[-1])  # no population yet
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    for value in (-5.0, -5.1, -5.2, -5.3):
        _complete(study, space, random_params(space, rng), value, {5: value})
    bad, close = study.ask(), study.ask()
    bad.report(-6.0, 5)
    close.report(-5.26, 5)  # below the quartile (-5.225) but within the margin
    trials = {t.number: t for t in study.get_trials()}
    assert pruner.prune(study, trials[bad.number])
    assert not pruner.prune(study, trials[close.number])


@pytest.mark.parametrize("name", ["regularized", "nsga2", "tpe", "random"])
def test_every_offered_sampler_drives_the_conditional_space(space, name, tmp_path):
    from llmevo.evolve.study import GENOME_SAMPLERS

    study = optuna.create_study(direction="maximize",
                                sampler=GENOME_SAMPLERS[name](space, 3, 2, 0))  # population, tournament, seed

    def objective(trial):
        genome = space.to_genome(space.suggest(trial))
        return -abs(np.log(genome.train.lr / 3e-3))

    study.optimize(objective, n_trials=8)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert all(set(t.params) == set(space.active_genes(t.params)) for t in study.trials)
