"""Gene knockouts: which of the champion's genes carry its gain.

For every gene where the champion differs from the baseline, the champion with that gene
alone reverted (a component gene reverts the component with its hyperparameters); plus the
champion's architecture at the baseline's training settings (optimizer, data recipe, lr,
warmup, weight decay) and the baseline's architecture at the champion's. Each variant is trained under the
report seeds and compared, paired by seed, with the champion and with the baseline.

Public API: ``differing_genes``, ``knockout_variants``, ``explain``, ``knockout_lines``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from llmevo.errors import ConfigError
from llmevo.eval.stats import claim_policy, paired_relative_change, summarize
from llmevo.evolve.space import GENOME_SLOTS, TRAIN_GENES, SearchSpace
from llmevo.runner.genome import Genome
from llmevo.runner.presets import Preset
from llmevo.runner.run import PostData, run_arm
from llmevo.runner.views import DataView
from llmevo.train.trainer import Progress


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
    """The optimizer and the data recipe (each with its hyperparameters) and the ``train.*``
    genes: how the model is trained, not what is built."""
    return gene in TRAIN_GENES or any(gene == slot or gene.startswith(f"{slot}.")
                                      for slot in ("optimizer", "data"))


def knockout_variants(
    champion: Genome, baseline: Genome, space: SearchSpace, genes: Sequence[str] | None = None
) -> dict[str, Genome]:
    """``{name: genome}``: ``revert <gene>`` for each differing gene (or each of ``genes``),
    ``champion architecture, baseline training`` and ``baseline architecture, champion
    training``. An empty ``genes``, or an unknown or non-differing gene, is a ``ConfigError``."""
    differing = differing_genes(champion, baseline, space)
    if genes is not None and not genes:
        raise ConfigError("--genes names no gene; leave it out to knock out every gene where "
                          f"the champion differs: {', '.join(differing) or 'none'}")
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
    data: DataView,
    preset: Preset,
    seeds: list[int],
    device: torch.device,
    genes: Sequence[str] | None = None,
    progress: Progress | None = None,
    post_data: PostData = None,  # the stage's data, or its loader (post-training genes)
) -> dict[str, Any]:
    """Train champion, baseline and every knockout variant under ``seeds``; per variant the
    paired relative change of validation and test fitness against the champion (negative:
    reverting the gene loses fitness, so the gene carries gain) and against the baseline."""
    variants = knockout_variants(champion, baseline, space, genes)
    genomes = {"champion": champion, "baseline": baseline, **variants}
    fitness: dict[str, dict[str, list[float]]] = {}
    for name, genome in genomes.items():
        runs = run_arm(genome.arm(name), data, genome.apply_to(preset),
                       genome.runs(preset, [(genome.train.lr, s) for s in seeds]), device,
                       on_diverged="record", progress=progress, description=genome.hash(),
                       post_data=post_data)
        diverged = [run.seed for run in runs if run.status != "complete"]
        if diverged:
            raise ConfigError(f"knockout '{name}' diverged under seed(s) {diverged}")
        fitness[name] = {"validation": [run.validation["fitness"] for run in runs],
                         "test": [run.test["fitness"] for run in runs]}
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
