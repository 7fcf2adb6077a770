"""Fair evolution: trials scored at their best learning rate, a tuned final comparison, and
gene knockouts that say which of the champion's genes carry its gain.

- A trial trains its genome at a small learning-rate grid around the genome's own lr
  (default ×0.5, ×1, ×2), all runs at once through ``train_many``, and is scored by its best
  setting; trial 0 (``llama_modern``) is treated the same way, so the baseline's learning
  rate is searched as much as any candidate's.
- The final champion-versus-baseline comparison tunes both arms on one shared grid
  (``llmevo.runner.tuning``, tuning seeds disjoint from the report seeds) and then
  trains each at its chosen lr under the report seeds (default 5 fresh seeds).
- Knockouts: for every gene where the champion differs from the baseline, the champion with
  that gene alone reverted (a component gene reverts the component with its
  hyperparameters); plus the champion's architecture at the baseline's training settings
  (optimizer, lr, warmup, weight decay) and the baseline's architecture at the champion's.
  Each variant is trained under the report seeds and compared, paired by seed, with the
  champion and with the baseline.

Public API: ``DEFAULT_TRIAL_LR_FACTORS``, ``trial_lr_grid``, ``with_lr``, ``train_genome``,
``tuned_final_evaluation``, ``differing_genes``, ``knockout_variants``, ``explain``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from llmevo.catalog import build_model, build_optimizer
from llmevo.components.post_training.presets import post_train_genome_model
from llmevo.errors import ConfigError
from llmevo.eval.stats import claim_policy, paired_relative_change, summarize
from llmevo.evolve.champion import FinalEvaluation, final_evaluation
from llmevo.evolve.genome import Genome
from llmevo.evolve.space import GENOME_SLOTS, TRAIN_GENES, SearchSpace
from llmevo.experiments.runner import evaluate_arm
from llmevo.runner.data import ArmData
from llmevo.runner.presets import Preset
from llmevo.runner.tuning import TuningPlan, tune_arm, tuning_block
from llmevo.train.logging import RunLogs
from llmevo.train.many import Execution, RunSpec, train_many
from llmevo.train.trainer import Progress

DEFAULT_TRIAL_LR_FACTORS = (0.5, 1.0, 2.0)


def trial_lr_grid(lr: float, factors: Sequence[float]) -> list[float]:
    """The learning rates a trial tries: ``lr`` times each factor, ascending, distinct."""
    if len(set(factors)) < 2 or any(not (f > 0 and math.isfinite(f)) for f in factors):
        raise ConfigError(f"trial lr factors must be at least 2 distinct positive numbers, got {list(factors)}")
    return sorted({lr * f for f in factors})


def with_lr(genome: Genome, lr: float) -> Genome:
    return genome.model_copy(update={"train": genome.train.model_copy(update={"lr": lr})})


def train_genome(
    genome: Genome,
    data: ArmData,
    preset: Preset,
    runs: Sequence[tuple[float, int]],
    device: torch.device,
    splits: tuple[str, ...] = ("validation",),
    progress: Progress | None = None,
    execution: Execution = Execution(),
    post_data: Any = None,  # llmevo.components.post_training.tasks.PostTrainData (or its loader)
) -> list[tuple[str, dict[str, Any]]]:
    """Train ``genome`` once per ``(lr, seed)`` in one ``train_many`` call; per run its status
    and a record with the training summary and the metrics of each split in ``splits``.
    A genome with a post-training gene runs its stage on each trained model first (the
    stage seed follows the run's seed), and the record gets the stage's loss and
    reward-bearing rate."""
    train = genome.apply_to(preset).train
    specs = [RunSpec(seed, train.model_copy(update={"lr": lr}), label=f"lr {lr:.3g} seed {seed}")
             for lr, seed in runs]
    outcomes = train_many(lambda: build_model(genome.model), data.stream, specs, device, progress,
                          description=genome.hash(), build_optimizer=build_optimizer,
                          path=execution.path, replicas_max=execution.replicas_max)
    results = []
    for outcome in outcomes:
        result = outcome.result
        record: dict[str, Any] = {
            "lr": outcome.spec.config.lr, "seed": outcome.spec.seed, "steps_done": result.steps_done,
            "wall_seconds": result.wall_seconds, "token_stream_sha256": result.token_stream_sha256,
            "initial_loss": result.initial_loss, "final_loss": result.final_loss,
        }
        if result.status != "complete":
            record["message"] = result.message
            results.append((result.status, record))
            continue
        if genome.post_training.name != "none":
            stage = post_train_genome_model(outcome.model.to(device), genome.post_training,
                                            post_data, preset.name, outcome.spec.seed, device,
                                            result.steps_done)
            record["post_training_loss"] = stage.post_training_loss
            record["reward_bearing_group_rate"] = stage.reward_bearing_group_rate
        for split in splits:
            metrics = evaluate_arm(outcome.model, data, preset, split, device)
            record[split] = {k: float(v) for k, v in metrics.items() if v is not None}
        outcome.model.cpu()
        results.append(("complete", record))
    return results


def tuned_final_evaluation(
    champion: Genome,
    baseline: Genome,
    data: ArmData,
    preset: Preset,
    seeds: list[int],
    plan: TuningPlan,
    device: torch.device,
    progress: Progress | None = None,
    logs: RunLogs | None = None,
    execution: Execution = Execution(),
    post_data: Any = None,  # llmevo.components.post_training.tasks.PostTrainData (or its loader)
) -> tuple[FinalEvaluation, dict[str, Any], dict[str, Genome]]:
    """Tune champion and baseline on ``plan`` (validation fitness), then train both at their
    chosen lr under ``seeds`` and evaluate each once on test.

    A genome with a post-training gene is scored after its stage, during tuning too; the
    tuning runs' stages use the first tuning seed's stage seed (the score callback does
    not see the run's seed)."""
    tunings = {}
    tuned: dict[str, Genome] = {}
    for label, genome in (("baseline", baseline), ("champion", champion)):
        train = genome.apply_to(preset).train

        def negative_fitness(model: torch.nn.Module, genome: Genome = genome,
                             steps: int = train.steps) -> float:
            if genome.post_training.name != "none":
                post_train_genome_model(model.to(device), genome.post_training, post_data,
                                        preset.name, plan.seeds[0], device, steps)
            return -evaluate_arm(model, data, preset, "validation", device)["fitness"]

        tunings[label] = tune_arm(label, lambda genome=genome: build_model(genome.model), data.stream,
                                  train, plan, negative_fitness, device, progress, execution)
        tuned[label] = with_lr(genome, tunings[label].best().lr)
    final = final_evaluation(tuned["champion"], tuned["baseline"], data, preset, seeds, device,
                             progress, execution=execution, logs=logs, post_data=post_data)
    block = tuning_block(plan, "negative validation fitness", tunings)
    return final, block, tuned


# --- knockouts ------------------------------------------------------------------------------


def differing_genes(champion: Genome, baseline: Genome, space: SearchSpace) -> list[str]:
    """Genes where the champion differs from the baseline: a slot whose component differs
    (its hyperparameters go with it), a hyperparameter of a shared component, a training gene."""
    mine, theirs = space.to_params(champion), space.to_params(baseline)
    genes = []
    for slot in GENOME_SLOTS:
        if mine[slot] != theirs[slot]:
            genes.append(slot)
            continue
        genes += [g for g in space.component_genes.get((slot, mine[slot]), ()) if mine[g] != theirs[g]]
    genes += [g for g in TRAIN_GENES if mine[g] != theirs[g]]
    return genes


def _revert(champion: Genome, baseline: Genome, space: SearchSpace, genes: Sequence[str]) -> Genome:
    mine, theirs = space.to_params(champion), space.to_params(baseline)
    for gene in genes:
        if gene in GENOME_SLOTS:
            for name in space.component_genes.get((gene, mine[gene]), ()):
                mine.pop(name, None)
            mine[gene] = theirs[gene]
            for name in space.component_genes.get((gene, theirs[gene]), ()):
                mine[name] = theirs[name]
        else:
            mine[gene] = theirs[gene]
    return space.to_genome(mine)


def _is_training_gene(gene: str) -> bool:
    """The optimizer (with its hyperparameters) and the ``train.*`` genes."""
    return gene in TRAIN_GENES or gene == "optimizer" or gene.startswith("optimizer.")


def knockout_variants(
    champion: Genome, baseline: Genome, space: SearchSpace, genes: Sequence[str] | None = None
) -> dict[str, Genome]:
    """``{name: genome}``: ``revert <gene>`` for each differing gene (or each of ``genes``),
    ``champion architecture, baseline training`` and ``baseline architecture, champion
    training``. An unknown or non-differing gene is a ``ConfigError``."""
    differing = differing_genes(champion, baseline, space)
    if genes is not None:
        unknown = [g for g in genes if g not in differing]
        if unknown:
            raise ConfigError(
                f"--genes: {', '.join(unknown)} is not a gene where the champion differs from the "
                f"baseline; those are: {', '.join(differing) or 'none'}")
    chosen = list(genes) if genes is not None else differing
    variants = {f"revert {gene}": _revert(champion, baseline, space, [gene]) for gene in chosen}
    training = [g for g in differing if _is_training_gene(g)]
    architecture = [g for g in differing if not _is_training_gene(g)]
    if training and architecture:
        variants["champion architecture, baseline training"] = _revert(champion, baseline, space, training)
        variants["baseline architecture, champion training"] = _revert(champion, baseline, space, architecture)
    return variants


def _paired(values_a: list[float], values_b: list[float]) -> dict[str, Any]:
    change = paired_relative_change(values_a, values_b)
    formal, _ = claim_policy(change["n"])
    low, high = change["ci_low"], change["ci_high"]
    change["significant"] = None if not formal else (low is not None and (low > 0 or high < 0))
    return change


def explain(
    champion: Genome,
    baseline: Genome,
    space: SearchSpace,
    data: ArmData,
    preset: Preset,
    seeds: list[int],
    device: torch.device,
    genes: Sequence[str] | None = None,
    progress: Progress | None = None,
    post_data: Any = None,  # llmevo.components.post_training.tasks.PostTrainData (or its loader)
) -> dict[str, Any]:
    """Train champion, baseline and every knockout variant under ``seeds``; per variant the
    paired relative change of validation and test fitness against the champion (negative:
    reverting the gene loses fitness, so the gene carries gain) and against the baseline."""
    variants = knockout_variants(champion, baseline, space, genes)
    genomes = {"champion": champion, "baseline": baseline, **variants}
    fitness: dict[str, dict[str, list[float]]] = {}
    for name, genome in genomes.items():
        runs = train_genome(genome, data, preset, [(genome.train.lr, s) for s in seeds], device,
                            splits=("validation", "test"), progress=progress, post_data=post_data)
        diverged = [r["seed"] for status, r in runs if status != "complete"]
        if diverged:
            raise ConfigError(f"knockout '{name}' diverged under seed(s) {diverged}")
        fitness[name] = {split: [r[split]["fitness"] for _, r in runs] for split in ("validation", "test")}
    rows = []
    for name, genome in genomes.items():
        row: dict[str, Any] = {"variant": name, "genome": genome.model_dump(mode="json"),
                               "label": genome.label(), "fitness": {}}
        for split in ("validation", "test"):
            row["fitness"][split] = {
                "summary": summarize(fitness[name][split]),
                "per_seed": fitness[name][split],
                "vs_champion_percent": None if name == "champion" else _paired(
                    fitness["champion"][split], fitness[name][split]),
                "vs_baseline_percent": None if name == "baseline" else _paired(
                    fitness["baseline"][split], fitness[name][split]),
            }
        rows.append(row)
    formal, policy = claim_policy(len(seeds))
    return {
        "seeds": list(seeds),
        "formal_comparison": formal,
        "claim_policy": policy,
        "differing_genes": differing_genes(champion, baseline, space),
        "metric": "fitness (higher is better); changes are paired per seed, percent",
        "variants": rows,
    }


NEGLIGIBLE_PERCENT = 1.0  # a change whose whole interval lies within ±this is read as negligible


def knockout_lines(knockouts: dict[str, Any]) -> list[str]:
    """The study README's knockout section."""
    lines = ["## Which genes carry the gain (knockouts)", "",
             f"Each variant trained under seeds {knockouts['seeds']}; Δ% is its paired relative "
             "change in fitness (95% CI) against the champion (negative: the reverted gene "
             "carried gain) and against the baseline. " + knockouts["claim_policy"] + ". A change whose "
             f"whole interval lies within ±{NEGLIGIBLE_PERCENT:g}% is read as negligible.", "",
             "| variant | validation fitness | Δ% vs champion (val) | Δ% vs champion (test) "
             "| Δ% vs baseline (test) | reading |",
             "|---|---|---|---|---|---|"]

    def cell(change: dict[str, Any] | None) -> str:
        if change is None:
            return "—"
        if change["ci_low"] is None:
            return f"{change['mean']:+.2f}%"
        return f"{change['mean']:+.2f}% ({change['ci_low']:+.2f}, {change['ci_high']:+.2f})"

    for row in knockouts["variants"]:
        val, test = row["fitness"]["validation"], row["fitness"]["test"]
        versus = val["vs_champion_percent"]
        if versus is None:
            reading = "reference"
        elif versus.get("significant") is None:
            reading = "too few seeds"
        elif max(abs(versus["ci_low"]), abs(versus["ci_high"])) < NEGLIGIBLE_PERCENT:
            reading = f"negligible (interval within ±{NEGLIGIBLE_PERCENT:g}%)"
        elif versus["significant"] and versus["mean"] < 0:
            reading = "carries gain" if row["variant"].startswith("revert") else "worse than champion"
        elif versus["significant"]:
            reading = "reverting helps"
        else:
            reading = "noise (no significant change)"
        lines.append(f"| {row['variant']} | {val['summary']['mean']:.4f} | {cell(versus)} | "
                     f"{cell(test['vs_champion_percent'])} | {cell(test['vs_baseline_percent'])} | {reading} |")
    return lines + [""]
