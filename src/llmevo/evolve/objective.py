"""One evolution trial: genome in, validation fitness out. The test split is never touched.

A trial suggests its genes, rejects an invalid or duplicate genome before training, trains
under the search seed with hurdle checkpoints (a cheap validation loss reported to the
pruner), then evaluates the whole validation split. A trial that would become champion —
its fitness beats the best score so far — is re-trained under ``rescore_seeds`` more seeds,
and its ``score`` is the mean fitness minus ``score_k`` standard errors; only trials with a
score can be champion. Everything is stored as user attributes: ``genome``,
``genome_hash``, ``parent``, ``seeds``, ``metrics`` (per seed), ``fitness_per_seed``,
``score``, ``parameters``, ``state`` (running, complete, pruned, diverged, failed, invalid,
duplicate, interrupted).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
import torch
from optuna.trial import TrialState
from torch import nn

from llmevo.catalog import build_model, build_optimizer
from llmevo.errors import ConfigError, LlmevoError
from llmevo.eval.lm import evaluate_lm
from llmevo.eval.stats import summarize
from llmevo.evolve.genome import Genome
from llmevo.evolve.space import SearchSpace
from llmevo.experiments.runner import evaluate_arm
from llmevo.runner.data import ArmData
from llmevo.runner.presets import Preset
from llmevo.train.logging import RunLogs
from llmevo.train.many import Execution, RunSpec, train_many
from llmevo.train.trainer import train

FINAL_STATES = ("complete", "pruned", "diverged", "failed", "invalid", "duplicate")


class TrialDiverged(LlmevoError):
    """A trial's training loss became non-finite (recorded, the search goes on)."""


@dataclass
class TrialContext:
    space: SearchSpace
    preset: Preset  # the trial preset (steps and validation budget of a search trial)
    data: ArmData
    device: torch.device
    search_seed: int = 1000
    rescore_seeds: int = 2
    score_k: float = 1.0
    hurdle_fractions: tuple[float, ...] = (0.5,)
    hurdle_windows: int = 16
    worker: int | None = None  # recorded on each trial
    execution_path: str = "auto"  # how rescoring seeds train (llmevo.train.many paths)
    replicas_max: int | None = None
    execution_workers: int | None = None  # worker processes for a parallel path (its core share)
    lr_factors: tuple[float, ...] = ()  # fair trials: train at lr x each factor, score the best (evolve.fair)
    logs: RunLogs | None = None  # per-step curves of each trial and seed; fitness and genome
    post_data: Any = None  # llmevo.components.post_training.tasks.PostTrainData, when post-training genes exist


def lower_bound_score(values: list[float], k: float) -> float:
    """Mean minus ``k`` standard errors (sample std / sqrt(n)); one value is its own score."""
    summary = summarize(values)
    return summary["mean"] - k * summary["std"] / math.sqrt(summary["n"])


def hurdle_steps(steps: int, fractions: tuple[float, ...]) -> set[int]:
    """0-based steps after which the intermediate fitness is reported (never the last)."""
    return {int(steps * f) - 1 for f in fractions if 0 < int(steps * f) < steps}


def best_score(study: optuna.Study) -> float | None:
    scores = [
        t.user_attrs["score"]
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("score") is not None
    ]
    return max(scores) if scores else None


def _finished_duplicate(study: optuna.Study, trial: optuna.Trial, genome_hash: str):
    """An earlier trial of the same genome: finished, or running and numbered before this one.

    Every trial records its genome hash before it gets here, so of two workers that drew
    the same genome at the same moment the higher-numbered one yields (claim, then check).
    """
    for other in study.get_trials(deepcopy=False):
        if other.number == trial.number or other.user_attrs.get("genome_hash") != genome_hash:
            continue
        state = other.user_attrs.get("state")
        if state == "duplicate":
            continue
        if state in FINAL_STATES:
            return other
        if other.state == TrialState.RUNNING and other.number < trial.number:
            return other
    return None


def train_and_validate(
    genome: Genome,
    context: TrialContext,
    seed: int,
    make_hook: Callable[[nn.Module], Callable[[int, float], bool]] | None = None,
    run_name: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """Train the genome under ``seed`` and evaluate the validation split only.

    ``make_hook(model)`` gives the per-step callback (hurdles). Returns (status, record):
    status "complete", "stopped" (a hurdle) or "diverged"."""
    preset = genome.apply_to(context.preset)
    torch.manual_seed(seed)
    model = build_model(genome.model)
    on_step = make_hook(model) if make_hook is not None else None
    logger = None
    if context.logs is not None:
        logger = context.logs.run(f"{run_name or 'trial'}-seed{seed}")
    try:
        result = train(
            model,
            context.data.stream,
            preset.train,
            seed,
            context.device,
            build_optimizer(preset.train.optimizer),
            description=f"trial seed {seed}",
            on_step=on_step,
            logger=logger,
        )
        stage = None
        if result.status == "complete" and genome.post_training.name != "none":
            from llmevo.components.post_training.presets import post_train_genome_model

            stage = post_train_genome_model(model, genome.post_training, context.post_data,
                                            context.preset.name, seed, context.device,
                                            result.steps_done)
        if result.status == "complete":
            metrics = evaluate_arm(model, context.data, preset, "validation", context.device)
            if logger is not None:
                logger.log_metrics("validation", metrics, result.steps_done)
    finally:
        if logger is not None:
            logger.close()
    record: dict[str, Any] = {
        "steps_done": result.steps_done,
        "wall_seconds": result.wall_seconds,
        "token_stream_sha256": result.token_stream_sha256,
        "initial_loss": result.initial_loss,
        "final_loss": result.final_loss,
    }
    if result.status != "complete":
        record["message"] = result.message
        return result.status, record
    if stage is not None:
        record["post_training_loss"] = stage.post_training_loss
        record["reward_bearing_group_rate"] = stage.reward_bearing_group_rate
    record.update({k: v for k, v in metrics.items() if v is not None})
    return "complete", record


def train_and_validate_many(
    genome: Genome, context: TrialContext, seeds: list[int]
) -> list[tuple[str, dict[str, Any]]]:
    """Train the genome under every seed at once (``train_many``); validation only.

    Returns (status, record) per seed, as ``train_and_validate`` does (no hurdles here)."""
    preset = genome.apply_to(context.preset)
    outcomes = train_many(
        lambda: build_model(genome.model), context.data.stream,
        [RunSpec(seed, preset.train) for seed in seeds], context.device,
        description="rescore", build_optimizer=build_optimizer, path=context.execution_path,
        replicas_max=context.replicas_max, workers=context.execution_workers,
    )
    results = []
    for outcome in outcomes:
        result = outcome.result
        record: dict[str, Any] = {
            "steps_done": result.steps_done,
            "wall_seconds": result.wall_seconds,
            "token_stream_sha256": result.token_stream_sha256,
            "initial_loss": result.initial_loss,
            "final_loss": result.final_loss,
            "training_path": outcome.path,
        }
        if result.status != "complete":
            record["message"] = result.message
            results.append((result.status, record))
            continue
        model = outcome.model.to(context.device)
        if genome.post_training.name != "none":
            from llmevo.components.post_training.presets import post_train_genome_model

            stage = post_train_genome_model(model, genome.post_training, context.post_data,
                                            context.preset.name, outcome.spec.seed,
                                            context.device, result.steps_done)
            record["post_training_loss"] = stage.post_training_loss
            record["reward_bearing_group_rate"] = stage.reward_bearing_group_rate
        metrics = evaluate_arm(model, context.data, preset, "validation", context.device)
        record.update({k: v for k, v in metrics.items() if v is not None})
        results.append(("complete", record))
    return results


def _best_of_grid(trial: optuna.Trial, genome: Genome, context: TrialContext) -> tuple[str, dict, Genome]:
    """Train the genome at every lr of its trial grid under the search seed; the best
    complete run's record and the genome at that lr (recorded as ``tuned_genome``)."""
    from llmevo.evolve.fair import train_genome, trial_lr_grid, with_lr

    grid = trial_lr_grid(genome.train.lr, context.lr_factors)
    runs = train_genome(genome, context.data, context.preset,
                        [(lr, context.search_seed) for lr in grid], context.device,
                        execution=Execution(context.execution_path, context.replicas_max),
                        post_data=context.post_data)
    trial.set_user_attr("lr_grid", [{"lr": r["lr"], "status": status,
                                     "fitness": r.get("validation", {}).get("fitness")}
                                    for status, r in runs])
    complete = [r for status, r in runs if status == "complete"]
    if not complete:
        return "diverged", runs[0][1], genome
    best = max(complete, key=lambda r: r["validation"]["fitness"])
    tuned = with_lr(genome, best["lr"])
    trial.set_user_attr("tuned_genome", tuned.model_dump(mode="json"))
    trial.set_user_attr("tuned_lr", best["lr"])
    record = {k: v for k, v in best.items() if k != "validation"} | best["validation"]
    return "complete", record, tuned


def _rescore(genome: Genome, context: TrialContext, seeds: list[int]) -> list[tuple[str, dict]]:
    """The (tuned) genome under each rescoring seed, all at once; validation only."""
    from llmevo.evolve.fair import train_genome

    runs = train_genome(genome, context.data, context.preset, [(genome.train.lr, s) for s in seeds],
                        context.device,
                        execution=Execution(context.execution_path, context.replicas_max),
                        post_data=context.post_data)
    return [(status, {k: v for k, v in record.items() if k != "validation"} | record["validation"]
             if status == "complete" else record) for status, record in runs]


def make_objective(context: TrialContext) -> Callable[[optuna.Trial], float]:
    """The Optuna objective (direction: maximize validation fitness)."""

    def objective(trial: optuna.Trial) -> float:
        params = context.space.suggest(trial)
        genome = context.space.to_genome(params)
        genome_hash = genome.hash()
        trial.set_user_attr("genome", genome.model_dump(mode="json"))
        trial.set_user_attr("genome_hash", genome_hash)
        trial.set_user_attr("label", genome.label())
        trial.set_user_attr("state", "running")
        trial.set_user_attr("worker", context.worker)
        try:
            return _run(trial, genome, genome_hash)
        except optuna.TrialPruned:
            raise
        except KeyboardInterrupt:
            trial.set_user_attr("state", "interrupted")
            raise
        except TrialDiverged:
            raise
        except Exception as error:
            trial.set_user_attr("state", "failed")
            trial.set_user_attr("error", f"{type(error).__name__}: {error}"[:500])
            raise

    def _run(trial: optuna.Trial, genome: Genome, genome_hash: str) -> float:
        study = trial.study
        try:
            parameters = context.space.check(genome)
        except ConfigError as error:
            trial.set_user_attr("state", "invalid")
            trial.set_user_attr("error", str(error))
            raise optuna.TrialPruned(f"invalid genome: {error}") from None
        trial.set_user_attr("parameters", parameters)
        duplicate = _finished_duplicate(study, trial, genome_hash)
        if duplicate is not None:
            trial.set_user_attr("duplicate_of", duplicate.number)
            trial.set_user_attr("state", "duplicate")
            if duplicate.state == TrialState.COMPLETE and duplicate.value is not None:
                return float(duplicate.value)
            raise optuna.TrialPruned(f"duplicate of trial {duplicate.number}")
        checkpoints = hurdle_steps(context.preset.train.steps, context.hurdle_fractions)

        def make_hook(model: nn.Module) -> Callable[[int, float], bool]:
            def on_step(step: int, loss: float) -> bool:
                if step not in checkpoints:
                    return True
                # a cheap estimate on a few validation windows, then back to training mode
                value = -evaluate_lm(
                    model,
                    context.data.validation,
                    context.preset.train.seq_len,
                    context.device,
                    context.data.token_bytes,
                    max_windows=context.hurdle_windows,
                )["lm_loss"]
                model.train()
                trial.report(value, step + 1)
                return not trial.should_prune()

            return on_step

        seeds = [context.search_seed]
        run_name = f"trial-{trial.number:04d}"
        if context.lr_factors:  # every lr of the grid at once (no hurdles), scored by its best
            status, record, genome = _best_of_grid(trial, genome, context)
        else:
            status, record = train_and_validate(genome, context, seeds[0], make_hook, run_name)
        per_seed = {str(seeds[0]): record}
        trial.set_user_attr("seeds", seeds)
        trial.set_user_attr("metrics", per_seed)
        if status == "stopped":
            trial.set_user_attr("state", "pruned")
            raise optuna.TrialPruned(record.get("message", "hurdle"))
        if status == "diverged":
            trial.set_user_attr("state", "diverged")
            raise TrialDiverged(f"trial {trial.number}: {record.get('message')}")
        fitness = [record["fitness"]]
        best = best_score(study)
        if context.rescore_seeds > 0 and (best is None or fitness[0] > best):
            extra = [context.search_seed + offset for offset in range(1, context.rescore_seeds + 1)]
            if context.lr_factors:  # fair trials: the genome at its tuned lr (evolve.fair)
                rescored = _rescore(genome, context, extra)
            elif context.logs is not None:  # per-step curves are written by the sequential trainer
                rescored = [train_and_validate(genome, context, seed, run_name=run_name) for seed in extra]
            else:
                rescored = train_and_validate_many(genome, context, extra)
            for seed, (status, record) in zip(extra, rescored, strict=True):
                if status == "diverged":
                    trial.set_user_attr("state", "diverged")
                    raise TrialDiverged(
                        f"trial {trial.number} seed {seed}: {record.get('message')}"
                    )
                seeds.append(seed)
                per_seed[str(seed)] = record
                fitness.append(record["fitness"])
            trial.set_user_attr("seeds", seeds)
            trial.set_user_attr("metrics", per_seed)
            trial.set_user_attr("score", lower_bound_score(fitness, context.score_k))
        trial.set_user_attr("fitness_per_seed", fitness)
        trial.set_user_attr("state", "complete")
        mean = summarize(fitness)["mean"]
        if context.logs is not None:
            log = context.logs.run("trials")
            log.log_metrics("evolve", {"fitness": mean, "score": trial.user_attrs.get("score")},
                            trial.number)
            log.log_text("evolve/genome", f"trial {trial.number} ({genome_hash}): {genome.label()}",
                         trial.number)
            log.close()
        return mean

    return objective
