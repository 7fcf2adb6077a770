"""The search space comes from the registry; the baseline is inside it; genomes hash stably."""

from __future__ import annotations

import pytest

from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.evolve.space import GENOME_SLOTS, build_search_space
from llmevo.registry import ComponentChoice
from llmevo.runner.genome import Genome
from llmevo.runner.presets import get_preset


@pytest.fixture(scope="module")
def space():
    return build_search_space(full_registry(), get_preset("quick"))


def test_only_baseline_components_enter_without_evidence(space):
    registry = full_registry()
    baseline_names = {space.baseline.optimizer.name, space.baseline.post_training.name} | {
        getattr(space.baseline.model, slot).name for slot in GENOME_SLOTS[:5]}
    for slot in GENOME_SLOTS:
        for name in space.components[slot]:
            assert registry.get(slot, name).manifest.baseline or name in baseline_names
        for name in registry.names(slot):
            if registry.get(slot, name).manifest.baseline:
                assert name in space.components[slot]


def test_baseline_is_llama_modern_and_round_trips(space):
    assert space.baseline_parameters == 139_584
    params = space.to_params(space.baseline)
    assert space.to_genome(params).hash() == space.baseline.hash()
    assert space.check(space.baseline) == 139_584
    for name, value in params.items():  # every baseline value is a point of its distribution
        distribution = space.genes[name]
        assert distribution._contains(distribution.to_internal_repr(value))


def test_hash_is_stable_and_sensitive(space):
    genome = Genome.from_json(space.baseline.canonical_json())
    assert genome.hash() == space.baseline.hash()
    changed = space.baseline.model_copy(update={"train": space.baseline.train.model_copy(
        update={"lr": 1e-3})})
    assert changed.hash() != space.baseline.hash()


def test_invalid_and_over_budget_genomes_are_rejected(space):
    too_wide = space.baseline.model_copy(update={"model": space.baseline.model.with_slot(
        "feedforward", ComponentChoice(name="swiglu", config={"hidden": 1024}))})
    with pytest.raises(ConfigError, match="budget"):
        space.check(too_wide)
    bad_rope = space.baseline.model_copy(update={"model": space.baseline.model.with_slot(
        "position", ComponentChoice(name="rope", config={"rotary_dim": 32}))})
    with pytest.raises(ConfigError, match="rotary_dim"):
        space.check(bad_rope)


def test_active_genes_follow_the_chosen_components(space):
    params = space.to_params(space.baseline)
    active = space.active_genes(params)
    assert "position.rope.theta" in active and "train.lr" in active
    params["position"] = "learned"
    assert not any(name.startswith("position.rope.") for name in space.active_genes(params))
