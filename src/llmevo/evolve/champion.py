"""The champion: the trial with the best noise-robust score, its lineage, and the one final
comparison of champion and baseline.

The score of a trial is its mean validation fitness over the seeds it was re-evaluated
with, minus ``k`` standard errors (see ``objective.lower_bound_score``); only re-evaluated
trials have one. The baseline (trial 0) is always re-evaluated, so the champion's score is
at least the baseline's.

The final comparison is the comparison ``reproduce --genome`` makes
(``experiments.genome_comparison``: llama_modern against the champion genome), planned here
(``comparison_plan``) from the study's final preset, report seeds, tuning plan, data, cache,
device and execution path and run by the one comparison path
(``experiments.reproduction.run_reproduction``: both arms tuned, paired seeds, statistics, the
classed verdict): its typed artifact holds the verdict of record. ``FinalEvaluation`` reads
the summary's view of the same runs (validation and test metrics, fitness included); the
test split is touched there and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from llmevo.errors import ConfigError
from llmevo.eval.stats import claim_policy, paired_relative_change, summarize, verdict
from llmevo.evolve.plan import EvolutionPlan
from llmevo.experiments.genome_comparison import genome_comparison
from llmevo.experiments.plans import ReproductionPlan
from llmevo.runner.arm_run import ArmRun
from llmevo.runner.genome import NO_POST_TRAINING, Genome
from llmevo.runner.presets import Preset

REPORTED_METRICS = ("fitness", "lm_loss", "bits_per_byte", "instruction_loss",
                    "preference_loss", "reasoning_nll", "public_composite")
FINAL_COMPARISON = "final-comparison.json"  # the typed artifact, in the study's report folder


def scored_trials(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("score") is not None]


def select_champion(study: optuna.Study) -> FrozenTrial:
    scored = scored_trials(study)
    if not scored:
        raise ConfigError(f"study '{study.study_name}' has no re-evaluated complete trial yet; "
                          "run more trials")
    return max(scored, key=lambda t: (t.user_attrs["score"], -t.number))


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    for trial in study.get_trials(deepcopy=False):
        if trial.user_attrs.get("role") == "baseline" and trial.state == TrialState.COMPLETE:
            return trial
    return None


def lineage(study: optuna.Study, trial: FrozenTrial) -> list[FrozenTrial]:
    """The champion and its ancestors, oldest first (parent links set by the sampler)."""
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    chain = [trial]
    seen = {trial.number}
    parent = trial.user_attrs.get("parent")
    while parent is not None and parent in by_number and parent not in seen:
        chain.append(by_number[parent])
        seen.add(parent)
        parent = by_number[parent].user_attrs.get("parent")
    return list(reversed(chain))


@dataclass
class FinalEvaluation:
    """The final comparison's report runs as the summary shows them: champion and baseline
    under the same seeds, validation and test metrics of each run (test evaluated once)."""

    seeds: list[int]
    runs: dict[str, dict[int, dict[str, dict[str, float]]]]  # arm -> seed -> split -> metrics
    # arm -> seed -> sha256 of the training windows it consumed (equal across arms per seed)
    token_streams: dict[str, dict[int, str]] | None = None
    training_path: dict[str, dict[int, str]] = field(default_factory=dict)  # arm -> seed -> path

    @classmethod
    def from_runs(cls, runs: dict[str, dict[int, ArmRun]], seeds: list[int]) -> FinalEvaluation:
        """The summary's view of a comparison's report runs (``ReproductionOutcome.runs``,
        whose ``method`` arm is the champion)."""
        metrics: dict[str, dict[int, dict[str, dict[str, float]]]] = {}
        paths: dict[str, dict[int, str]] = {}
        streams: dict[str, dict[int, str]] = {}
        for label, arm in (("baseline", "baseline"), ("champion", "method")):
            metrics[label], paths[label], streams[label] = {}, {}, {}
            for seed in seeds:
                run = runs[arm][seed]
                clean = {split: {k: float(v) for k, v in values.items() if v is not None}
                         for split, values in (("validation", run.validation), ("test", run.test))}
                clean["validation"]["parameters"] = float(run.parameters)
                metrics[label][seed] = clean
                paths[label][seed] = run.path
                streams[label][seed] = run.train.token_stream_sha256
        return cls(seeds=list(seeds), runs=metrics, token_streams=streams, training_path=paths)

    def values(self, arm: str, split: str, metric: str) -> list[float]:
        return [self.runs[arm][seed][split][metric] for seed in self.seeds]

    def summary(self) -> dict[str, Any]:
        formal, policy = claim_policy(len(self.seeds))
        block: dict[str, Any] = {"seeds": self.seeds, "formal_comparison": formal,
                                 "claim_policy": policy, "splits": {}}
        for split in ("validation", "test"):
            metrics: dict[str, Any] = {}
            for metric in REPORTED_METRICS:
                if not all(metric in self.runs[arm][s][split] for arm in self.runs for s in self.seeds):
                    continue
                baseline = self.values("baseline", split, metric)
                champion = self.values("champion", split, metric)
                metrics[metric] = {
                    "baseline": summarize(baseline),
                    "champion": summarize(champion),
                    "paired_relative_change_percent": paired_relative_change(baseline, champion),
                }
            block["splits"][split] = metrics
        block["verdict"] = {
            split: verdict("fitness", self.values("baseline", split, "fitness"),
                           self.values("champion", split, "fitness"), lower_is_better=False,
                           method_name="the champion")
            for split in ("validation", "test")
        }
        if self.token_streams is not None:
            block["token_stream_sha256"] = {
                arm: {str(s): self.token_streams[arm][s] for s in self.seeds}
                for arm in ("baseline", "champion")
            }
        block["per_seed"] = [
            {"seed": s, **{arm: {split: self.runs[arm][s][split] for split in ("validation", "test")}
                           for arm in ("baseline", "champion")}}
            for s in self.seeds
        ]
        if self.training_path:
            block["training_path"] = {arm: {str(s): path for s, path in paths.items()}
                                      for arm, paths in self.training_path.items()}
        return block


def comparison_plan(plan: EvolutionPlan, genome: Genome, trial: int, preset: Preset,
                    device: torch.device) -> ReproductionPlan:
    """The final comparison of ``genome`` (the champion, ``trial``) as a reproduction plan:
    ``reproduce --genome <report>/summary.json`` at the study's final ``preset``, report seeds,
    tuning plan (``None``: untuned, both arms at the preset's lr), data, cache, ``device`` and
    execution path; named ``<study>-champion``. A champion that builds llama_modern itself is
    compared anyway and classed no-op; one with a post-training stage is refused (a tuned
    comparison of pretraining does not apply to it), before anything trains."""
    source = plan.report_folder / "summary.json"
    if genome.post_training != NO_POST_TRAINING:
        raise ConfigError(
            f"the champion (trial {trial}) has a post-training stage ({genome.post_training.label()}): "
            "the final comparison is llama_modern against the champion's pretraining (`reproduce "
            "--genome`), which a stage does not fit; the study's trials are kept (evolve with "
            "--no-report, or compare the stage with `llmevo reproduce "
            f"{genome.post_training.name}`)")
    comparison = genome_comparison(genome, f"{plan.study_name.lower()}-champion", source,
                                   plan.base_model, allow_noop=True)
    return ReproductionPlan(
        comparison=comparison, preset=preset, seeds=list(plan.seeds), data_dir=plan.data_dir,
        cache_dir=plan.cache_dir, device=device, execution=plan.execution, tuning=plan.tuning,
        arm_cache="off", command=plan.command, repo_root=plan.repo_root, size=plan.size,
        allow_noop=True,
    )
