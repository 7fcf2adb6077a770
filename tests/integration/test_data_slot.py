"""The data slot end to end: reproductions of each recipe against the fixed concatenation
(equal tokens, the recipe in the hash, the fingerprint and the cache key), bad recipe
settings refused in one line, and evolution genomes that vary the data gene."""

from __future__ import annotations

import dataclasses

import pytest
from cli_runner import files_under, run_cli
from evolve_support import tiny_plan

from llmevo.artifacts.schema import load_artifact
from llmevo.catalog import full_registry
from llmevo.evolve import workers
from llmevo.evolve.knockouts import knockout_variants
from llmevo.evolve.sampler import mutate, random_params
from llmevo.evolve.space import build_search_space
from llmevo.evolve.study import finished_trials, open_storage, open_study
from llmevo.experiments import ReproductionRequest
from llmevo.experiments.plans import plan_comparison
from llmevo.registry import ComponentChoice
from llmevo.runner.arm import CONCAT
from llmevo.runner.cache import arm_parts
from llmevo.runner.genome import Genome
from llmevo.runner.presets import get_preset

RECIPES = ("mixture", "curriculum", "ppl_filter")
BASELINE = {"rope", "mha", "swiglu", "rmsnorm", "pre_norm", "adamw", "none", "concat"}


def test_every_data_recipe_has_a_typed_config_a_paper_and_the_concat_ablation():
    registry = full_registry()
    assert set(registry.names("data")) >= {"concat", *RECIPES}
    for name in RECIPES:
        spec = registry.get("data", name)
        assert spec.manifest.ablation == "concat" and spec.manifest.paper is not None
        assert spec.config_cls.model_fields  # a typed config with fields
    assert registry.get("data", "concat").manifest.baseline


def test_a_data_comparison_differs_in_the_recipe_only():
    comparison = plan_comparison("mixture")
    baseline, method = comparison.arms
    assert baseline.model == method.model and baseline.optimizer == method.optimizer
    assert baseline.recipe == CONCAT and method.recipe.name == "mixture"
    assert "data_recipe" not in arm_parts(baseline)  # concat keys as before the slot
    assert arm_parts(method)["data_recipe"]["config"] == {"lm": 0.7, "narrative": 0.2,
                                                          "instruction": 0.1}
    against = plan_comparison("curriculum", against="mixture:lm=1,narrative=0,instruction=0")
    assert against.baseline.recipe == ComponentChoice.parse("mixture:lm=1,narrative=0,instruction=0")


@pytest.mark.slow
@pytest.mark.parametrize("name", RECIPES)
def test_reproduce_a_recipe_on_the_smoke_preset(name, tmp_path, data_dir, cache_dir):
    out = tmp_path / f"{name}.json"
    artifact = ReproductionRequest(name=name, preset="smoke", seeds=[42], threads=1, report=False,
                                   data_dir=data_dir, cache_dir=cache_dir, out=out,
                                   arm_cache=False).plan()
    from llmevo.experiments import reproduce

    result = reproduce(artifact)
    assert load_artifact(out).manifest_ref == result.manifest_ref
    setup, dataset = result.setup, result.dataset
    by_arm = setup.token_stream_sha256_by_arm
    assert by_arm["baseline"]["42"] != by_arm["method"]["42"]  # the hash covers the recipe
    assert setup.units_per_arm["baseline"]["units"] == setup.units_per_arm["method"]["units"] \
        == 12 * 4 * 64  # equal tokens
    recipes = dataset.data_recipes
    assert recipes["baseline"]["name"] == "concat" and recipes["method"]["name"] == name
    assert recipes["baseline"]["fingerprint"] == dataset.fingerprint
    assert recipes["method"]["fingerprint"].startswith(dataset.fingerprint + "+")
    assert result.method.genome["data"]["name"] == name


BAD = [
    (["--method-config", "lm=-0.5"], "lm: Input should be greater than or equal to 0"),
    (["--method-config", "lm=0,narrative=0,instruction=0"], "the mixture weights sum to zero"),
    (["--method-config", "wiki=0.5"], "unknown training source 'wiki'"),
]


@pytest.mark.parametrize(("extra", "message"), BAD, ids=[b[0][1] for b in BAD])
def test_bad_recipe_weights_are_one_line_and_exit_2(extra, message, capsys, workdir):
    before = files_under(workdir)
    status = run_cli(["reproduce", "mixture", "--preset", "smoke", *extra])
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err
    assert files_under(workdir) == before


def test_a_curriculum_endpoint_summing_to_zero_is_refused(capsys, workdir):
    status = run_cli(["reproduce", "curriculum", "--preset", "smoke", "--method-config",
                      "end_lm=0,end_narrative=0,end_instruction=0"])
    err = capsys.readouterr().err
    assert status == 2 and "end weights sum to zero" in err and len(err.strip().splitlines()) == 1


# --- evolution: the data gene ---------------------------------------------------------------


def _space(promoted: set[str]):
    return build_search_space(full_registry(), get_preset("smoke"),
                              promoted=frozenset(BASELINE | promoted))


def test_the_data_gene_is_in_the_space_only_with_promoted_recipes():
    plain = _space(set())
    assert plain.components["data"] == ("concat",)
    assert "data" not in plain.describe()["genes"]  # studies made before the gene resume
    assert plain.baseline.data == CONCAT
    assert plain.baseline.hash() == Genome.model_validate(
        plain.baseline.model_dump(exclude={"data"})).hash()
    varied = _space({"mixture", "ppl_filter"})
    assert varied.components["data"] == ("concat", "mixture", "ppl_filter")
    assert "data.mixture.narrative" in varied.genes and "data" in varied.describe()["genes"]


def test_the_sampler_and_the_knockouts_treat_the_data_gene_like_any_other():
    import random

    space = _space({"mixture", "curriculum", "layernorm"})
    rng = random.Random(0)
    seen = {random_params(space, rng)["data"] for _ in range(60)}
    assert seen == {"concat", "mixture", "curriculum"}
    parent = space.to_params(space.baseline)
    mutated = {gene for gene in (mutate(space, parent, rng)[1] for _ in range(200))}
    assert "data" in mutated
    params = dict(parent, data="mixture", norm="layernorm",
                  **{"data.mixture.narrative": 0.4, "data.mixture.instruction": 0.0})
    for gene in space.component_genes[("norm", "layernorm")]:
        params[gene] = space.genes[gene].choices[0]
    params["train.lr"] = parent["train.lr"] * 2
    champion = space.to_genome(params)
    assert champion.data == ComponentChoice.parse("mixture:narrative=0.4,instruction=0.0")
    assert champion.arm("method").recipe == champion.data
    variants = knockout_variants(champion, space.baseline, space)
    assert variants["revert data"].data == CONCAT
    assert variants["revert data"].train.lr == champion.train.lr
    assert variants["revert data"].model == champion.model
    # the data recipe is a training gene: it goes with the optimizer and the lr
    baseline_training = variants["champion architecture, baseline training"]
    assert baseline_training.data == CONCAT and baseline_training.model == champion.model
    champion_training = variants["baseline architecture, champion training"]
    assert champion_training.data == champion.data and champion_training.model.norm.name == "rmsnorm"


@pytest.mark.slow
def test_an_evolution_smoke_study_whose_genomes_vary_the_data_gene(tmp_path, data_dir, cache_dir):
    plan = tiny_plan(f"sqlite:///{tmp_path}/data.db", data_dir, cache_dir, trials=6,
                     rescore_seeds=0, population=2, tournament=1, sampler_seed=3)
    plan = dataclasses.replace(plan, promoted=frozenset(plan.promoted | set(RECIPES)))
    workers.run_workers(plan)
    study = open_study(plan, workers.build_space(plan), open_storage(plan, heartbeat=False))
    trials = finished_trials(study)
    recipes = {Genome.from_json(t.user_attrs["genome"]).data.name for t in trials}
    assert len(trials) == 6 and len(recipes) >= 2, recipes
    by_recipe: dict[tuple[str, int], set[str]] = {}
    for trial in trials:
        genome = Genome.from_json(trial.user_attrs["genome"])
        for seed, record in trial.user_attrs["metrics"].items():
            key = (genome.data.label(), int(seed))
            by_recipe.setdefault(key, set()).add(record["token_stream_sha256"])
    assert all(len(found) == 1 for found in by_recipe.values())  # one recipe, one seed: one stream
    seeds = {seed for _, seed in by_recipe}
    for seed in seeds:  # each recipe its own stream (the hash covers the recipe)
        streams = [next(iter(found)) for (_, s), found in by_recipe.items() if s == seed]
        assert len(set(streams)) == len(streams)
