"""Knockouts: the genes a champion differs in, its knockout variants, their readings."""

from __future__ import annotations

import pytest

from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.evolve.knockouts import differing_genes, knockout_lines, knockout_variants
from llmevo.evolve.space import build_search_space
from llmevo.runner.presets import get_preset

PROMOTED = frozenset({"rope", "mha", "relu2", "swiglu", "layernorm", "rmsnorm", "pre_norm", "adamw"})


@pytest.fixture(scope="module")
def space():
    return build_search_space(full_registry(), get_preset("quick"), promoted=PROMOTED)


@pytest.fixture(scope="module")
def champion(space):
    params = space.to_params(space.baseline)
    params.pop("feedforward.swiglu.hidden")
    params.update({"feedforward": "relu2", "feedforward.relu2.hidden": 384, "norm": "layernorm",
                   "position.rope.theta": 1e5, "optimizer.adamw.beta2": 0.95, "train.lr": 1.1e-2})
    return space.to_genome(params)


def test_differing_genes_name_components_hyperparameters_and_training(space, champion):
    assert differing_genes(space.baseline, space.baseline, space) == []
    assert differing_genes(champion, space.baseline, space) == [
        "position.rope.theta", "feedforward", "norm", "optimizer.adamw.beta2", "train.lr"]


def test_each_knockout_reverts_one_gene_alone(space, champion):
    variants = knockout_variants(champion, space.baseline, space)
    base = space.to_params(space.baseline)
    for gene in differing_genes(champion, space.baseline, space):
        reverted = space.to_params(variants[f"revert {gene}"])
        assert differing_genes(variants[f"revert {gene}"], space.baseline, space) == [
            g for g in differing_genes(champion, space.baseline, space) if g != gene]
        key = gene if gene != "feedforward" else "feedforward.swiglu.hidden"
        assert reverted[key] == base[key]
    ffn = variants["revert feedforward"].model.feedforward
    assert ffn.name == "swiglu" and ffn.config == {"hidden": 192}  # the component with its own genes
    arch = variants["champion architecture, baseline training"]
    assert arch.model == champion.model and arch.train == space.baseline.train
    assert arch.optimizer == space.baseline.optimizer
    training = variants["baseline architecture, champion training"]
    assert training.model == space.baseline.model and training.train == champion.train
    assert training.optimizer == champion.optimizer


def test_only_named_genes_and_unknown_genes_are_refused(space, champion):
    variants = knockout_variants(champion, space.baseline, space, ["norm"])
    assert "revert norm" in variants and "revert feedforward" not in variants
    for bad in (["attention"], ["no_such_gene"]):
        with pytest.raises(ConfigError, match="not a gene where the champion differs"):
            knockout_variants(champion, space.baseline, space, bad)
    with pytest.raises(ConfigError, match="names no gene"):  # not "all genes", not "none"
        knockout_variants(champion, space.baseline, space, [])


def test_knockout_readings():
    def row(name, change):
        block = {"summary": {"mean": -6.0, "std": 0.0, "n": 3}, "per_seed": [],
                 "vs_champion_percent": change, "vs_baseline_percent": None}
        return {"variant": name, "fitness": {"validation": block, "test": block}}

    def change(mean, low, high, significant):
        return {"mean": mean, "ci_low": low, "ci_high": high, "n": 3, "significant": significant}

    knockouts = {"seeds": [42, 43, 44], "claim_policy": "formal", "variants": [
        row("champion", None),
        row("revert a", change(-5.0, -7.0, -3.0, True)),
        row("revert b", change(-0.01, -0.02, -0.001, True)),
        row("revert c", change(0.5, -2.0, 3.0, False)),
        row("revert d", change(4.0, 2.0, 6.0, True)),
    ]}
    lines = "\n".join(knockout_lines(knockouts))
    assert "| revert a |" in lines and "carries gain" in lines.split("| revert a |")[1].split("\n")[0]
    assert "negligible" in lines.split("| revert b |")[1].split("\n")[0]
    assert "noise" in lines.split("| revert c |")[1].split("\n")[0]
    assert "reverting helps" in lines.split("| revert d |")[1].split("\n")[0]
