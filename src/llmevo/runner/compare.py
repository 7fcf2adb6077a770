"""One paired comparison: two arms tuned the same way, trained under the same report seeds,
their budgets checked equal, their per-seed values paired into statistics and a verdict.

Every comparison llmevo publishes is measured here: a reproduction
(``experiments.reproduction.run_reproduction``), which is also each rung of a ladder, each
comparison of ``reproduce --all``, ``reproduce --genome`` and evolve's final comparison of
its champion. The caller plans (which two arms, on which data views, under which tuner) and
records (the artifact); ``compare_arms`` measures, ``paired_statistics`` turns the paired
values into the artifact's statistics and ``eval.stats.decide`` into its verdict (the verdict
``reproduce --experiment`` gives anyone's training command too, without importing torch).

In order, before anything trains: each arm fits its data and the memory
(``runner.resources``); the no-op check (``runner.equivalence``) compares the two arms'
functions and refuses arms that compute the same one unless asked to class them no-op.
Then each arm is tuned (``runner.tuner.tune_arms``, when there is a tuner), each arm's report
seeds train at its choice (``runner.run.run_arm``, all seeds of an arm at once), and each
seed's budget is verified equal (``check_equal_budget``).

What "equal budget" means is ``match``: ``tokens`` (the default) trains both arms the same
steps on the same token stream; ``flops`` counts each arm's training FLOPs per token
(``runner.flops``) and sets the method arm's steps, for its tuning runs and its report runs
alike, so that its total training FLOPs equal the baseline's (rounded to whole steps), and
the budget check then compares FLOPs. The baseline trains exactly as under ``tokens``.

Public API: ``Paired``, ``FlopsBudget``, ``compare_arms``, ``match_flops``, ``check_equal_budget``,
``paired_rows``, ``paired_statistics``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from llmevo.artifacts.schema import CachedTuningRun
from llmevo.errors import ConfigError
from llmevo.eval.metrics import STATISTICS_METRICS
from llmevo.eval.stats import build_statistics
from llmevo.runner.arm import Arm, resolved_recipe
from llmevo.runner.arm_run import ArmRun
from llmevo.runner.cache import ArmCache
from llmevo.runner.equivalence import Equivalence, check_equivalence, refusal
from llmevo.runner.flops import FlopCount, count_flops_per_token, flops_ratio, matched_steps
from llmevo.runner.presets import Preset
from llmevo.runner.resources import check_memory, concurrent_runs
from llmevo.runner.run import arm_train_config, build_arm_model, check_fits_data, run_arm, seed_runs
from llmevo.runner.tuner import Tuner, tune_arms
from llmevo.runner.views import DataView
from llmevo.train.execution import Execution, check_path
from llmevo.train.logging import RunLogs
from llmevo.train.trainer import Progress


@dataclass
class Paired:
    """What a paired comparison measured: both arms at their tuned choice, each arm's preset
    at its chosen training settings, every report run by arm and seed, the tuner's block and
    the tuning runs loaded from the arm cache, and the no-op check's finding."""

    baseline: Arm
    method: Arm
    presets: dict[str, Preset]
    runs: dict[str, dict[int, ArmRun]]
    equivalence: Equivalence
    tuning: dict[str, Any] | None = None
    cached_tuning: dict[str, list[CachedTuningRun]] | None = None
    flops: FlopsBudget | None = None  # ``match="flops"``: each arm's FLOPs per token and steps

    @property
    def arms(self) -> tuple[Arm, Arm]:
        return self.baseline, self.method

    @property
    def learning_rates(self) -> dict[str, float] | None:
        """Each arm's tuned learning rate (None: untuned)."""
        return None if self.tuning is None else {arm.label: self.presets[arm.label].train.lr
                                                  for arm in self.arms}


COUNTED_BY = ("torch.utils.flop_counter.FlopCounterMode over one forward and backward pass of the "
              "language-modelling loss on the first training batch (B x T tokens), attention on the "
              "math backend; matrix products only (no elementwise ops, no optimizer step); routed "
              "experts at their active share")


@dataclass(frozen=True)
class FlopsBudget:
    """Compute-matched arms (``match="flops"``): each arm's training FLOPs per token and its
    training steps; both arms train ``tokens_per_step`` tokens a step."""

    flops: dict[str, FlopCount]
    steps: dict[str, int]
    tokens_per_step: int

    @property
    def ratio(self) -> float:
        """The method's total training FLOPs over the baseline's."""
        return flops_ratio(self.steps["baseline"], self.flops["baseline"].counted,
                           self.steps["method"], self.flops["method"].counted)

    def block(self) -> dict[str, Any]:
        """The artifact's ``setup.flops`` block (``artifacts.schema.FlopsMatch``)."""
        labels = ("baseline", "method")
        return {"counted_by": COUNTED_BY,
                "flops_per_token": {label: {"counted": self.flops[label].counted,
                                            "computed": self.flops[label].computed} for label in labels},
                "steps": dict(self.steps),
                "tokens": {label: self.steps[label] * self.tokens_per_step for label in labels},
                "total_flops": {label: self.flops[label].counted * self.steps[label] * self.tokens_per_step
                                for label in labels},
                "ratio": self.ratio}


def match_flops(baseline: Arm, method: Arm, views: dict[str, DataView], preset: Preset) -> FlopsBudget:
    """Count each arm's training FLOPs per token (``runner.flops``) on the first training batch
    of its data view (the model built on the CPU, the torch seed left as it was) and set the
    method's steps so that its total equals the baseline's at ``preset``'s steps. The arms
    must share a data view: a FLOP per token of another tokenization is another unit."""
    if baseline.data != method.data:
        raise ConfigError(f"--match flops: the arms read different data views ({baseline.data}, {method.data}), "
                          "so a FLOP per token is not one unit across them; use --match tokens")
    data = views[baseline.data]
    train = arm_train_config(baseline, data, preset)  # the window is the data view's
    needed = train.batch_size * (train.seq_len + 1)
    if data.stream.numel() < needed:
        raise ConfigError(f"--match flops: the training stream holds {data.stream.numel():,} tokens, fewer "
                          f"than one batch ({needed:,})")
    batch = data.stream[:needed].reshape(train.batch_size, train.seq_len + 1).long()  # (B, T + 1)
    counts = {}
    for arm in (baseline, method):
        with torch.random.fork_rng(devices=[]):  # building a model draws from the global generator
            model = build_arm_model(arm).cpu()
        counts[arm.label] = count_flops_per_token(model, batch)
    steps = {"baseline": train.steps,
             "method": matched_steps(train.steps, counts["baseline"].counted, counts["method"].counted)}
    return FlopsBudget(counts, steps, train.batch_size * train.seq_len)


def compare_arms(
    name: str,
    baseline: Arm,
    method: Arm,
    views: dict[str, DataView],
    preset: Preset,
    seeds: Sequence[int],
    device: torch.device,
    *,
    metric: str,
    objective: str,
    tuner: Tuner | None = None,
    execution: Execution = Execution(),
    cache: ArmCache | None = None,
    allow_noop: bool = False,
    progress: Progress | None = None,
    on_arm_done: Callable[[str, int, ArmRun], None] | None = None,
    logs: RunLogs | None = None,
    match: Literal["tokens", "flops"] = "tokens",
) -> Paired:
    """Measure ``baseline`` against ``method`` (``name`` names the comparison in a refusal):
    checks, the no-op check, tuning with ``tuner``, the report seeds, the equal budget (see the
    module docstring). ``cache`` (``runner.cache.ArmCache``, opened by the caller: its keys
    cover the caller's code) loads runs trained before under identical settings when it reads,
    and stores every run trained; ``logs`` gets one run per arm and seed; ``match``: equal
    tokens, or equal training FLOPs (the method's steps set by ``match_flops``)."""
    seeds = list(seeds)
    check_path(execution.path, execution.replicas_max)
    most_runs = max(len(seeds), 0 if tuner is None else tuner.runs_at_once())
    for arm in (baseline, method):  # an invalid genome, or one that cannot fit, fails before training
        data = views[arm.data]
        check_fits_data(arm, data)
        check_memory(f"{arm.label} arm '{arm.name}'", arm.model, arm_train_config(arm, data, preset),
                     device, concurrent_runs(execution, device, most_runs))
    equivalence = check_equivalence(baseline, method, views, preset, seeds[0], device, cache)
    if equivalence.same_function and not allow_noop:
        raise ConfigError(refusal(name, equivalence))  # before anything is trained or written
    arms, presets = [baseline, method], {arm.label: preset for arm in (baseline, method)}
    budget = None
    if match == "flops":  # the method at the steps that spend the baseline's FLOPs
        budget = match_flops(baseline, method, views, preset)
        presets["method"] = preset.model_copy(update={"train": preset.train.model_copy(
            update={"steps": budget.steps["method"]})})
    paired = Paired(baseline, method, presets, {"baseline": {}, "method": {}}, equivalence, flops=budget)
    if tuner is not None:  # each arm at its choice: the lr grid's, or its space's
        tuned = tune_arms(arms, views, preset, tuner, metric, objective, device, progress,
                          execution=execution, cache=cache, arm_presets=presets)
        arms, paired.presets = tuned.arms, tuned.presets
        paired.baseline, paired.method = arms
        paired.tuning, paired.cached_tuning = tuned.block, tuned.cached
    for arm in arms:  # all seeds of an arm at once
        data, arm_preset = views[arm.data], paired.presets[arm.label]
        entries = None if cache is None else cache.report(arm, data, arm_preset, metric, objective)
        for run in run_arm(arm, data, arm_preset, seed_runs(arm, data, arm_preset, seeds), device,
                           objective=objective, execution=execution, progress=progress, logs=logs,
                           cache=entries):
            paired.runs[arm.label][run.seed] = run
            if on_arm_done:
                on_arm_done(arm.label, run.seed, run)
            run.model = run.model.cpu()
    check_equal_budget(paired.baseline, paired.method, paired.runs, seeds, flops=budget)
    return paired


def check_equal_budget(baseline: Arm, method: Arm, runs: dict[str, dict[int, ArmRun]],
                       seeds: Sequence[int], flops: FlopsBudget | None = None) -> None:
    """Verify each seed's budget: arms of one data view and one data recipe consumed the same
    token stream (equal hashes); arms whose recipes differ (a data-slot comparison, whose
    hashes differ by design: each covers its recipe) consumed equally many tokens. With
    ``flops`` (compute-matched arms) each seed's training FLOPs (counted per token x tokens
    seen) must agree within half of one step of the method's."""
    if flops is not None:
        _check_equal_flops(runs, seeds, flops)
        return
    if baseline.data != method.data:
        return  # different tokenizations: equal text per window, checked by the data views
    same_recipe = resolved_recipe(baseline.recipe) == resolved_recipe(method.recipe)
    for seed in seeds:
        trained = [runs[label][seed].train for label in ("baseline", "method")]
        if same_recipe and len({t.token_stream_sha256 for t in trained}) != 1:
            raise ConfigError(f"seed {seed}: the arms consumed different token streams")
        if len({t.tokens_seen for t in trained}) != 1:
            raise ConfigError(f"seed {seed}: the arms consumed different numbers of tokens "
                              f"({trained[0].tokens_seen:,} and {trained[1].tokens_seen:,})")


def _check_equal_flops(runs: dict[str, dict[int, ArmRun]], seeds: Sequence[int], flops: FlopsBudget) -> None:
    """Compute-matched arms: equal training FLOPs per seed, to the rounding of one step."""
    per_token = {label: flops.flops[label].counted for label in ("baseline", "method")}
    tolerance = 0.5 * per_token["method"] * flops.tokens_per_step  # rounding to whole steps
    for seed in seeds:
        seen = {label: runs[label][seed].train.tokens_seen for label in ("baseline", "method")}
        total = {label: per_token[label] * seen[label] for label in seen}
        if abs(total["method"] - total["baseline"]) > tolerance:
            raise ConfigError(f"seed {seed}: the arms spent different training FLOPs ({total['baseline']:.4g} and "
                              f"{total['method']:.4g}: {seen['baseline']:,} and {seen['method']:,} tokens at "
                              f"{per_token['baseline']:,.0f} and {per_token['method']:,.0f} FLOPs per token)")


def paired_rows(runs: dict[str, dict[int, ArmRun]], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One row per report seed: its seed and each arm's validation values (None dropped)."""
    return [{"seed": seed, **{label: {k: v for k, v in runs[label][seed].validation.items() if v is not None}
                              for label in ("baseline", "method")}}
            for seed in seeds]


def paired_statistics(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The paired statistics (``eval.stats.build_statistics``) of every statistics metric both
    arms measured, nonzero, under every seed."""
    metrics = [m for m in STATISTICS_METRICS if all(
        m in row["baseline"] and m in row["method"] and row["baseline"][m] != 0 for row in rows)]
    return build_statistics(list(rows), metrics)
