"""Evolve's final comparison is the reproduction of its champion (issue 33 item 3): planned as
``reproduce --genome`` plans it, run by the same function
(``experiments.reproduction.run_reproduction``), written as a typed ``ReproductionArtifact``
with its margin class beside the study's ``summary.json``, which names it."""

from __future__ import annotations

import json

import optuna
import pytest
import torch
from evolve_support import tiny_plan

from llmevo.artifacts.schema import ReproductionArtifact, load_artifact
from llmevo.errors import ConfigError
from llmevo.evolve import EvolutionSettings, run
from llmevo.evolve import pipeline as evolve_pipeline
from llmevo.evolve.champion import comparison_plan
from llmevo.experiments import ReproductionRequest, reproduce, reproduction
from llmevo.registry import ComponentChoice
from llmevo.runner.genome import Genome, TrainGenes

CLASSES = {"better", "non-inferior", "inconclusive", "worse", "no-op"}


def _genome(**update) -> Genome:
    """llama_modern at smoke's training genes, with ``update`` (model slots or genes)."""
    from llmevo.model.config import ModelConfig

    genome = Genome(model=ModelConfig(), optimizer=ComponentChoice(name="adamw"),
                    train=TrainGenes(lr=6e-4, warmup_steps=0, weight_decay=0.01))
    model = update.pop("model", {})
    return genome.model_copy(update={"model": genome.model.model_copy(update=model), **update})


@pytest.mark.slow
def test_the_final_comparison_is_the_champions_reproduction(tmp_path, data_dir, cache_dir, monkeypatch):
    calls: list[str] = []
    real = reproduction.run_reproduction

    def counted(plan, *args, **kwargs):
        calls.append(plan.comparison.spec.name)
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(reproduction, "run_reproduction", counted)
    # the champion is a known genome (ReLU² feed-forward), whichever trial the tiny search crowns
    champion = _genome(model={"feedforward": ComponentChoice(name="relu2")})
    monkeypatch.setattr(evolve_pipeline, "_champion_genome", lambda trial: champion)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds, grid = [42, 43, 44], [1e-3, 3e-3]
    summary = run(EvolutionSettings(
        study="final", storage=f"sqlite:///{tmp_path}/final.db", preset="smoke", trial_steps=8,
        eval_windows=4, trials=1, workers=1, threads=1, population=2, tournament=2, rescore_seeds=1,
        sampler_seed=0, data_dir=data_dir, cache_dir=cache_dir, device="cpu", seeds=seeds,
        tune_grid=grid, trial_lr_factors=[], promotion="manifest", out=tmp_path / "report"))
    assert calls == ["final-champion"]  # the final comparison went through the reproduction

    final = summary.final_evaluation
    artifact = load_artifact(tmp_path / "report" / final["artifact"])  # validated on loading
    assert isinstance(artifact, ReproductionArtifact)
    assert artifact.verdict is not None and artifact.verdict.classification in CLASSES
    assert artifact.verdict.margin_percent == 1.0 and artifact.verdict.metric == "lm_loss"
    assert summary.verdict == artifact.verdict.summary  # the verdict of record is the artifact's
    assert final["verdict_of_record"] == artifact.verdict.model_dump(mode="json")
    assert artifact.method.genome["model"]["feedforward"]["name"] == "relu2"
    assert artifact.tuning is not None and artifact.tuning.seeds == [2000]
    assert summary.model_dump()["final_tuning"]["grid"] == artifact.tuning.grid
    # the summary's view is of the same runs: validation numbers per seed, token streams
    for row in artifact.per_seed:
        shown = next(p for p in final["per_seed"] if p["seed"] == row.seed)
        assert shown["champion"]["validation"]["lm_loss"] == row.method["lm_loss"]
        assert shown["baseline"]["validation"]["lm_loss"] == row.baseline["lm_loss"]
        assert final["token_stream_sha256"]["champion"][str(row.seed)] == \
            artifact.setup.token_stream_sha256_by_arm["method"][str(row.seed)]
    assert "Verdict of record" in (tmp_path / "report" / "README.md").read_text()

    # `reproduce --genome` of that champion at the study's final settings: the same function,
    # the same runs, the same verdict
    genome_file = tmp_path / "champion.json"
    genome_file.write_text(json.dumps(champion.model_dump(mode="json")))
    again = reproduce(ReproductionRequest(
        name="final-champion", genome=genome_file, preset="smoke", steps=8, seeds=seeds,
        tune_grid=grid, tune_seeds=[2000], data_dir=data_dir, cache_dir=cache_dir, device="cpu",
        threads=1, arm_cache=False, report=False, out=tmp_path / "genome.json"))
    assert calls == ["final-champion", "final-champion"]
    assert again.per_seed == artifact.per_seed
    assert again.statistics == artifact.statistics and again.verdict == artifact.verdict
    # the same tuning; each arm's budget records its own CPU seconds, so it is compared apart
    def without_budgets(tuning):
        dumped = tuning.model_dump(mode="json")
        return dumped, {label: dumped["arms"][label].pop("budget") for label in dumped["arms"]}

    (tuned, budgets), (tuned_again, budgets_again) = without_budgets(artifact.tuning), without_budgets(again.tuning)
    assert tuned_again == tuned
    assert {label: b["runs"] for label, b in budgets_again.items()} == {label: b["runs"] for label, b in budgets.items()}


def test_a_champion_the_final_comparison_cannot_compare_is_refused_before_training(
        tmp_path, data_dir, cache_dir):
    plan = tiny_plan(f"sqlite:///{tmp_path}/plan.db", data_dir, cache_dir, seeds=[42, 43, 44])
    device = torch.device("cpu")
    staged = _genome(post_training=ComponentChoice(name="sft"))
    with pytest.raises(ConfigError, match=r"champion \(trial 7\) has a post-training stage \(sft\)"):
        comparison_plan(plan, staged, 7, plan.final_preset, device)
    # a data recipe is compared, as `reproduce --genome` compares it: the method arm draws it
    mixed = comparison_plan(plan, _genome(data=ComponentChoice(name="mixture")), 3, plan.final_preset,
                            device)
    assert mixed.comparison.method.recipe.name == "mixture" and mixed.seeds == [42, 43, 44]
    assert mixed.tuning == plan.tuning and mixed.preset == plan.final_preset
    # llama_modern itself (e.g. trial 0 crowned): planned, run anyway and classed no-op
    itself = comparison_plan(plan, _genome(), 0, plan.final_preset, device)
    assert itself.allow_noop and itself.comparison.method.model == itself.comparison.baseline.model
