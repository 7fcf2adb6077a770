"""The champion: the trial with the best noise-robust score, its lineage, and the one final
evaluation of champion and baseline on the test split under the same seeds.

The score of a trial is its mean validation fitness over the seeds it was re-evaluated
with, minus ``k`` standard errors (see ``objective.lower_bound_score``); only re-evaluated
trials have one. The baseline (trial 0) is always re-evaluated, so the champion's score is
at least the baseline's. The test split is touched here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from llmevo.errors import ConfigError
from llmevo.eval.stats import claim_policy, paired_relative_change, summarize, verdict
from llmevo.runner.genome import Genome
from llmevo.runner.presets import Preset
from llmevo.runner.run import PostData, run_arm, seed_runs
from llmevo.runner.views import DataView
from llmevo.train.execution import Execution
from llmevo.train.logging import RunLogs
from llmevo.train.trainer import Progress

REPORTED_METRICS = ("fitness", "lm_loss", "bits_per_byte", "instruction_loss",
                    "preference_loss", "reasoning_nll", "public_composite")


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
    """Champion and baseline, trained under the same seeds, each evaluated on test once."""

    seeds: list[int]
    runs: dict[str, dict[int, dict[str, dict[str, float]]]]  # arm -> seed -> split -> metrics
    # arm -> seed -> sha256 of the training windows it consumed (equal across arms per seed)
    token_streams: dict[str, dict[int, str]] | None = None
    training_path: dict[str, dict[int, str]] = field(default_factory=dict)  # arm -> seed -> path

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


def final_evaluation(
    champion: Genome,
    baseline: Genome,
    data: DataView,
    preset: Preset,
    seeds: list[int],
    device: torch.device,
    progress: Progress | None = None,
    execution: Execution = Execution(),
    logs: RunLogs | None = None,
    post_data: PostData = None,  # the stage's data, or its loader (post-training genes)
) -> FinalEvaluation:
    """Train both genomes under every seed (all seeds of a genome at once, ``train_many``);
    validation and test metrics per run.

    When the champion is the baseline genome, its runs are the baseline's (same seeds).
    Both arms of a seed must consume the same token stream (the trainer's hash) when they
    share a data recipe; a mismatch is an error, so the comparison's equal budget is checked,
    not declared. Genomes with different data recipes draw different windows by design (each
    hash covers its recipe) from equal steps x batch x seq_len tokens."""
    runs: dict[str, dict[int, dict[str, dict[str, float]]]] = {"baseline": {}, "champion": {}}
    paths: dict[str, dict[int, str]] = {"baseline": {}, "champion": {}}
    streams: dict[str, dict[int, str]] = {"baseline": {}, "champion": {}}
    genomes = {"baseline": baseline, "champion": champion}
    for label, genome in genomes.items():
        if label == "champion" and genome.hash() == baseline.hash():
            runs[label] = dict(runs["baseline"])
            paths[label] = dict(paths["baseline"])
            streams[label] = dict(streams["baseline"])
            continue
        arm, arm_preset = genome.arm(label), genome.apply_to(preset)
        trained = run_arm(arm, data, arm_preset, seed_runs(arm, data, arm_preset, seeds), device,
                          execution=execution, progress=progress, logs=logs,
                          log_name=f"final-{label}", post_data=post_data)
        for seed, run in zip(seeds, trained, strict=True):
            clean = {split: {k: float(v) for k, v in metrics.items() if v is not None}
                     for split, metrics in (("validation", run.validation), ("test", run.test))}
            clean["validation"]["parameters"] = float(run.parameters)
            runs[label][seed] = clean
            paths[label][seed] = run.path
            streams[label][seed] = run.train.token_stream_sha256
    same_recipe = champion.data == baseline.data
    for seed in seeds:
        if same_recipe and streams["baseline"][seed] != streams["champion"][seed]:
            raise ConfigError(f"final evaluation, seed {seed}: champion and baseline consumed "
                              "different token streams")
    return FinalEvaluation(seeds=list(seeds), runs=runs, token_streams=streams,
                           training_path=paths)
