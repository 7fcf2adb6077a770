"""One paired comparison: two arms tuned the same way, run under the same report seeds,
their budgets checked equal, their per-seed values paired into statistics and a verdict.

Every comparison llmevo makes is measured here, whoever runs its arms
(``runner.arm_runner.ArmRunner``): a built-in reproduction
(``experiments.reproduction.run_reproduction``: ``InProcessRunner``), which is also each rung
of a ladder, each comparison of ``reproduce --all``, ``reproduce --genome`` and evolve's final
comparison of its champion; a post-training method (``experiments.post_training``:
``PostTrainingRunner``); and anyone's training command (``reproduce --experiment``:
``experiments.external.SubprocessRunner``). The caller plans (which two arms, under which
tuner) and records (the artifact); ``compare_arms`` measures, ``paired_statistics`` turns a
built-in's paired values into the artifact's statistics and ``eval.stats.decide`` into its
verdict (an external comparison's values come from its command's metrics, the same
``decide``).

In order: the runner's checks (``ArmRunner.check``: for built-ins, each arm fits its data and
the memory and the no-op check compares the arms' functions; arms that compute the same one
are refused unless asked to class them no-op). Then each arm is tuned
(``runner.tuner.tune_arms``, when there is a tuner: the lr grid with its edge extension,
probe and re-scoring, or the declared space), each arm's report seeds run at its choice
(``ArmRunner.report``), and each seed's budget is verified equal (``ArmRunner.check_budget``).

Public API: ``Paired``, ``compare_arms``, ``paired_rows``, ``paired_statistics``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmevo.artifacts.schema import CachedTuningRun
from llmevo.eval.metrics import STATISTICS_METRICS
from llmevo.eval.stats import build_statistics
from llmevo.runner.arm_run import ArmRun
from llmevo.runner.arm_runner import ArmRunner
from llmevo.runner.equivalence import Equivalence
from llmevo.runner.tuner import Tuner, tune_arms


@dataclass
class Paired:
    """What a paired comparison measured: both arms at their tuned choice, every report run by
    arm and seed, the no-op check's finding, the tuner's block and the tuning runs loaded from
    a cache."""

    baseline: Any
    method: Any
    runs: dict[str, dict[int, Any]] = field(default_factory=lambda: {"baseline": {}, "method": {}})
    equivalence: Equivalence | None = None
    tuning: dict[str, Any] | None = None
    cached_tuning: dict[str, list[CachedTuningRun]] | None = None

    @property
    def arms(self) -> tuple[Any, Any]:
        return self.baseline, self.method

    @property
    def learning_rates(self) -> dict[str, float] | None:
        """Each arm's tuned learning rate (None: untuned)."""
        return None if self.tuning is None else {label: float(arm["chosen"]["lr"])
                                                  for label, arm in self.tuning["arms"].items()}


def compare_arms(
    name: str,
    runner: ArmRunner,
    baseline: Any,
    method: Any,
    seeds: Sequence[int],
    *,
    metric: str,
    tuner: Tuner | None = None,
    allow_noop: bool = False,
    on_arm_done: Callable[[str, int, Any], None] | None = None,
) -> Paired:
    """Measure ``baseline`` against ``method`` through ``runner`` (``name`` names the comparison
    in a refusal): the runner's checks, tuning with ``tuner`` scored by ``metric``, the report
    seeds, the equal budget (see the module docstring). ``on_arm_done(label, seed, run)`` as
    each report run is done."""
    seeds = list(seeds)
    equivalence = runner.check(name, baseline, method, seeds, tuner, allow_noop)
    paired = Paired(baseline, method, equivalence=equivalence)
    arms = [baseline, method]
    if tuner is not None:  # each arm at its choice: the lr grid's, or its space's
        tuned = tune_arms(runner, arms, tuner, metric)
        arms = tuned.arms
        paired.baseline, paired.method = arms
        paired.tuning, paired.cached_tuning = tuned.block, tuned.cached
    for arm in arms:
        for seed, run in runner.report(arm, seeds):
            paired.runs[arm.label][seed] = run
            if on_arm_done:
                on_arm_done(arm.label, seed, run)
    runner.check_budget(paired.baseline, paired.method, paired.runs, seeds)
    return paired


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
