"""One evolution trial: genome in, validation fitness out. The test split is never touched.

A trial suggests its genes, rejects an invalid or duplicate genome before training, trains
under the search seed with hurdle checkpoints (a cheap validation loss reported to the
pruner), then evaluates the whole validation split. A trial that would become champion —
its fitness beats the best score so far — is re-trained under ``rescore_seeds`` more seeds,
and its ``score`` is the mean fitness minus ``score_k`` standard errors; only trials with a
score can be champion. A trial interrupted by Ctrl-C or SIGTERM is failed by its worker
on the way out (``fail_interrupted``: state ``interrupted``, it does not count) and its
genome enqueued again (``retry_of``), so a resumed study trains it first. Everything is stored as user attributes: ``genome``,
``genome_hash``, ``parent``, ``seeds``, ``metrics`` (per seed), ``fitness_per_seed``,
``score``, ``parameters``, ``state`` (running, complete, pruned, diverged, failed, invalid,
duplicate, interrupted).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
import torch
from optuna.trial import TrialState
from torch import nn

from llmevo import interrupts
from llmevo.errors import ConfigError, LlmevoError
from llmevo.eval.lm import evaluate_lm
from llmevo.eval.stats import summarize
from llmevo.evolve.lr_grid import trial_lr_grid, with_lr
from llmevo.evolve.plan import EvolutionPlan
from llmevo.evolve.space import SearchSpace
from llmevo.runner.arm_run import ArmRun
from llmevo.runner.genome import Genome
from llmevo.runner.optuna_private import study_storage, trial_id
from llmevo.runner.presets import Preset
from llmevo.runner.run import PostData, run_arm
from llmevo.runner.views import DataView
from llmevo.train.logging import RunLogs

FINAL_STATES = ("complete", "pruned", "diverged", "failed", "invalid", "duplicate")
SEARCH_SEED = 1000  # every trial trains under it; rescoring seeds follow it
HURDLE_FRACTIONS = (0.5,)  # of the trial's steps: where its cheap validation loss is reported
HURDLE_WINDOWS = 16  # validation windows of that estimate
CHOOSING_POLL = 0.05  # seconds between reads while lower-numbered trials draw their genes
CHOOSING_TIMEOUT = 30.0  # seconds (default) a trial waits on a lower one that never claims
RETRIED_ATTRS = ("chosen_by", "proposer", "note")  # who chose a genome stays with its retry


class TrialDiverged(LlmevoError):
    """A trial's training loss became non-finite (recorded, the search goes on)."""


@dataclass(frozen=True)
class TrialContext:
    """The plan and what one process prepares from it once (``workers.prepare_context``)."""

    plan: EvolutionPlan
    space: SearchSpace
    data: DataView
    trial_preset: Preset  # plan.trial_preset resolved on the data (a one-epoch preset's steps)
    final_preset: Preset  # plan.final_preset resolved on the data
    device: torch.device
    logs: RunLogs | None = None  # per-step curves of each trial and seed; fitness and genome
    post_data: PostData = None  # the stage's data, or its loader (post-training genes)


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


def lower_trials_choosing(study: optuna.Study, number: int) -> list[int]:
    """RUNNING trials numbered before ``number`` that have not recorded their genome hash
    yet (still drawing their genes)."""
    return [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number < number and "genome_hash" not in t.user_attrs]


def wait_for_lower_claims(study: optuna.Study, number: int, timeout: float,
                          sleep: Callable[[float], None] = time.sleep) -> list[int]:
    """Wait until every RUNNING trial numbered before ``number`` has recorded its genome
    hash: Lamport's bakery algorithm's "choosing" wait, the trial number as the ticket.
    Without it the duplicate check races: a higher-numbered trial can check before a
    lower-numbered one that drew the same genome has recorded it, and that one never
    yields to a higher number, so both train it. A trial never waits for a higher number,
    so the lowest running one never waits (no deadlock). ``timeout`` (seconds) bounds the
    wait on a dead worker's trial (it is failed as stale, later); returns the trials
    still choosing when it ran out (empty: every claim is in)."""
    deadline = time.monotonic() + timeout
    while True:
        choosing = lower_trials_choosing(study, number)
        if not choosing or time.monotonic() >= deadline:
            return choosing
        sleep(CHOOSING_POLL)


def _finished_duplicate(study: optuna.Study, trial: optuna.Trial, genome_hash: str,
                        timeout: float = CHOOSING_TIMEOUT,
                        sleep: Callable[[float], None] = time.sleep):
    """An earlier trial of the same genome: finished, or running and numbered before this one.

    Every trial records its genome hash before it gets here, and waits here until every
    running lower-numbered trial has recorded its own (``wait_for_lower_claims``), so of two
    workers that drew the same genome at the same moment the higher-numbered one yields
    (claim, wait for lower claims, then check).
    """
    wait_for_lower_claims(study, trial.number, timeout, sleep)
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


def fail_interrupted(study: optuna.Study, trial_id: int, genes: set[str], tell: bool = True) -> bool:
    """Fail the trial that an interrupt (Ctrl-C, SIGTERM) stopped: state ``interrupted`` (it
    does not count) and its genome enqueued again, so the resumed study trains it next (the
    baseline too) rather than losing it; ``retry_of`` names the interrupted trial. Not
    retried: a trial interrupted while its genes were drawn (no whole genome). The objective
    calls it as the interrupt passes through (``tell`` False: Optuna then fails the trial);
    the worker calls it again on its way out for the trial it last started, which an
    interrupt landing in Optuna around the objective (the trial created or popped, its
    heartbeat starting or stopping) used to leave RUNNING. A trial that is no longer
    running is left as it is. Returns whether the trial was still running."""
    storage = study_storage(study)
    trial = storage.get_trial(trial_id)
    if trial.state != TrialState.RUNNING:
        return False
    if trial.user_attrs.get("state") != "interrupted":
        storage.set_trial_user_attr(trial_id, "state", "interrupted")
        if set(trial.params) == genes:
            attrs = trial.user_attrs
            study.enqueue_trial(dict(trial.params), user_attrs={
                "parent": attrs.get("parent"), "role": attrs.get("role"), "retry_of": trial.number,
                **{key: attrs[key] for key in RETRIED_ATTRS if key in attrs}})
    if tell:
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
    return True


def trial_record(run: ArmRun) -> dict[str, Any]:
    """What a trial stores per seed (user attribute ``metrics``): the run's training
    summary, its post-training stage's loss and reward-bearing rate (a stage gene), and
    its validation metrics; a run that did not complete has its message instead."""
    result = run.train
    record: dict[str, Any] = {
        "lr": run.lr, "seed": run.seed, "steps_done": result.steps_done,
        "wall_seconds": result.wall_seconds, "token_stream_sha256": result.token_stream_sha256,
        "initial_loss": result.initial_loss, "final_loss": result.final_loss,
        "training_path": run.path,
    }
    if run.status != "complete":
        record["message"] = result.message
        return record
    if run.stage is not None:
        record["post_training_loss"] = run.stage.post_training_loss
        record["reward_bearing_group_rate"] = run.stage.reward_bearing_group_rate
    record.update({k: v for k, v in run.validation.items() if v is not None})
    return record


def validate_genome(
    genome: Genome,
    context: TrialContext,
    runs: Sequence[tuple[float, int]],
    make_hook: Callable[[nn.Module], Callable[[int, float], bool]] | None = None,
    run_name: str | None = None,
    logged: bool = True,
) -> list[ArmRun]:
    """Train the genome once per ``(lr, seed)`` and evaluate the validation split only
    (``runner.run.run_arm``; the test split is never touched during the search).

    ``make_hook(model)`` gives the per-step callback (hurdles); with it, or with the
    context's per-step logs (``logged``: ``<run_name>-seed<seed>``), the runs train one
    after another, otherwise all at once through ``train_many``. A diverged or stopped
    run is returned unevaluated."""
    return run_arm(
        genome.arm("trial"), context.data, genome.apply_to(context.trial_preset),
        genome.runs(context.trial_preset, runs), context.device, splits=("validation",),
        on_diverged="record", execution=context.plan.execution,
        workers=context.plan.threads_per_worker, description=f"trial {genome.hash()}",
        logs=context.logs if logged else None, log_name=run_name or "trial", make_hook=make_hook,
        post_data=context.post_data)


def _best_of_grid(trial: optuna.Trial, genome: Genome, context: TrialContext) -> tuple[ArmRun, Genome]:
    """Train the genome at every lr of its trial grid under the search seed; the best
    complete run and the genome at that lr (recorded as ``tuned_genome``)."""
    grid = trial_lr_grid(genome.train.lr, context.plan.lr_factors)
    runs = validate_genome(genome, context, [(lr, SEARCH_SEED) for lr in grid], logged=False)
    trial.set_user_attr("lr_grid", [{"lr": run.lr, "status": run.status,
                                     "fitness": run.validation.get("fitness")} for run in runs])
    complete = [run for run in runs if run.status == "complete"]
    if not complete:
        return runs[0], genome
    best = max(complete, key=lambda run: run.validation["fitness"])
    tuned = with_lr(genome, best.lr)
    trial.set_user_attr("tuned_genome", tuned.model_dump(mode="json"))
    trial.set_user_attr("tuned_lr", best.lr)
    return best, tuned


def make_objective(context: TrialContext, worker: int | None = None) -> Callable[[optuna.Trial], float]:
    """The Optuna objective (direction: maximize validation fitness); ``worker`` (the
    worker's index) is recorded on each trial."""
    plan = context.plan

    def objective(trial: optuna.Trial) -> float:
        try:
            with interrupts.allowed():  # the worker defers Optuna's bookkeeping, not the trial
                try:
                    return _claimed(trial)
                except Exception as error:
                    if interrupts.wraps_interrupt(error):  # a library wrapped the stop in its own error
                        raise KeyboardInterrupt from error
                    raise
        except KeyboardInterrupt:
            with interrupts.deferred():  # a second Ctrl-C waits until the trial is recorded
                fail_interrupted(trial.study, trial_id(trial), set(context.space.genes), tell=False)
            raise

    def _claimed(trial: optuna.Trial) -> float:
        params = context.space.suggest(trial)
        genome = context.space.to_genome(params)
        genome_hash = genome.hash()
        trial.set_user_attr("genome", genome.model_dump(mode="json"))
        trial.set_user_attr("genome_hash", genome_hash)
        trial.set_user_attr("label", genome.label())
        trial.set_user_attr("state", "running")
        trial.set_user_attr("worker", worker)
        try:
            return _run(trial, genome, genome_hash)
        except optuna.TrialPruned:
            raise
        except TrialDiverged:
            raise
        except Exception as error:
            if interrupts.wraps_interrupt(error):  # e.g. pydantic's serializer wrapped it: a stop
                raise KeyboardInterrupt from error
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
        # a dead worker's trial that never claims: waited on for as long as it takes to be stale
        duplicate = _finished_duplicate(study, trial, genome_hash,
                                        timeout=plan.grace_period + plan.heartbeat)
        if duplicate is not None:
            trial.set_user_attr("duplicate_of", duplicate.number)
            trial.set_user_attr("state", "duplicate")
            if duplicate.state == TrialState.COMPLETE and duplicate.value is not None:
                return float(duplicate.value)
            raise optuna.TrialPruned(f"duplicate of trial {duplicate.number}")
        checkpoints = hurdle_steps(context.trial_preset.train.steps, HURDLE_FRACTIONS)

        def make_hook(model: nn.Module) -> Callable[[int, float], bool]:
            def on_step(step: int, loss: float) -> bool:
                if step not in checkpoints:
                    return True
                # a cheap estimate on a few validation windows, then back to training mode
                value = -evaluate_lm(
                    model,
                    context.data.validation,
                    context.trial_preset.train.seq_len,
                    context.device,
                    context.data.token_bytes,
                    max_windows=HURDLE_WINDOWS,
                )["lm_loss"]
                model.train()
                trial.report(value, step + 1)
                return not trial.should_prune()

            return on_step

        seeds = [SEARCH_SEED]
        run_name = f"trial-{trial.number:04d}"
        if plan.lr_factors:  # every lr of the grid at once (no hurdles), scored by its best
            run, genome = _best_of_grid(trial, genome, context)
        else:
            [run] = validate_genome(genome, context, [(genome.train.lr, seeds[0])], make_hook, run_name)
        status, record = run.status, trial_record(run)
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
        # a would-be champion is rescored under rescore_seeds more seeds and scored; with 0 it is
        # scored on its search seed alone (before, no trial was ever scored, and the report
        # failed after the whole search: "no re-evaluated complete trial yet")
        if best is None or fitness[0] > best:
            extra = [SEARCH_SEED + offset for offset in range(1, plan.rescore_seeds + 1)]
            # the genome at its tuned lr (fair trials), under every rescoring seed
            rescored = validate_genome(genome, context, [(genome.train.lr, s) for s in extra],
                                       run_name=run_name) if extra else []
            for seed, run in zip(extra, rescored, strict=True):
                record = trial_record(run)
                if run.status == "diverged":
                    trial.set_user_attr("state", "diverged")
                    raise TrialDiverged(
                        f"trial {trial.number} seed {seed}: {record.get('message')}"
                    )
                seeds.append(seed)
                per_seed[str(seed)] = record
                fitness.append(record["fitness"])
            trial.set_user_attr("seeds", seeds)
            trial.set_user_attr("metrics", per_seed)
            trial.set_user_attr("score", lower_bound_score(fitness, plan.score_k))
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
