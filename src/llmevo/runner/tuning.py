"""Tuning-fair comparisons: every arm gets the same learning-rate grid before it is compared.

A comparison at one learning rate chosen for the baseline favours the baseline: a method
that wants another learning rate loses for the wrong reason. Here each arm is trained at
every learning rate of one shared grid (default: 5 values log-spaced from lr/3 to 3·lr)
under *tuning seeds* that are disjoint from the report seeds, all runs of an arm in one
``train_many`` call; the arm's best setting by mean validation loss over the tuning seeds
is the one trained under the report seeds for the paired comparison. A best value on the
grid's edge is not a tuned arm, so the grid of that arm is extended once, one step further
in that direction (the artifact records it, and whether the best is still on the edge).
A best setting at the *stability edge* (the highest learning rate that trained: either the
highest one tried, or the one just below a setting that diverged) is where one lucky tuning
seed misleads most: a run there may train well or stall depending on the seed. Such a best
and its lower neighbour are therefore *confirmed* on ``confirm`` further tuning seeds, and
the arm takes the better of the two by the mean over all its tuning seeds.
The test split is never looked at here.

Public API: ``TuningPlan`` (a ``runner.tuner.Tuner``), ``default_grid``, ``check_plan``,
``check_tuning_seeds``, ``tune_arm``, ``ArmTuning``, ``SettingResult``, ``tuning_block``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from llmevo.artifacts.schema import CachedTuningRun
from llmevo.errors import ConfigError, DivergedError
from llmevo.registry import ComponentChoice
from llmevo.runner.arm import Arm
from llmevo.runner.arm_run import Scorer
from llmevo.runner.fidelity import Fidelity, halve
from llmevo.runner.presets import Preset
from llmevo.runner.tuner import ArmChoice
from llmevo.train.execution import RunSpec
from llmevo.train.trainer import TrainConfig

DEFAULT_POINTS = 5
DEFAULT_SPAN = 3.0  # the default grid runs from lr / span to lr * span
DEFAULT_TUNING_SEEDS = (1000,)
DEFAULT_REPORT_SEEDS = (42, 43, 44, 45, 46)
DEFAULT_CONFIRM = 2  # extra tuning seeds for a best setting at the stability edge
MAX_CONFIRM = 16  # each costs two runs of the arm; more is a typo, not a protocol
SELECTION = "lowest mean validation {metric} over the tuning seeds (a diverged run counts as worst)"
CONFIRMATION = ("; a best at the stability edge (highest lr that trained) and its lower neighbour "
                "are retrained on the confirmation seeds and the lower mean over all seeds wins")


def default_grid(lr: float, points: int = DEFAULT_POINTS, span: float = DEFAULT_SPAN) -> list[float]:
    """``points`` learning rates log-spaced from ``lr / span`` to ``lr * span`` (inclusive)."""
    if not (lr > 0 and math.isfinite(lr)):
        raise ConfigError(f"learning rate must be positive and finite, got {lr}")
    if points < 2 or span <= 1.0:
        raise ConfigError(f"a tuning grid needs at least 2 points and a span > 1; got {points}, {span}")
    return [lr * span ** (-1.0 + 2.0 * i / (points - 1)) for i in range(points)]


@dataclass(frozen=True)
class TuningPlan:
    """The grid (ascending learning rates) and the tuning seeds, the same for every arm: the
    learning-rate grid tuner (``runner.tuner.Tuner``)."""

    grid: tuple[float, ...]
    seeds: tuple[int, ...] = DEFAULT_TUNING_SEEDS
    extend_edges: bool = True
    confirm_seeds: tuple[int, ...] = ()  # used only for a best at the stability edge
    fidelity: Fidelity = Fidelity()  # how far each setting trains (runner.fidelity)
    kind: ClassVar[Literal["grid"]] = "grid"

    def runs_at_once(self) -> int:
        return len(self.grid) * len(self.seeds)

    def check_arms(self, arms: Sequence[Arm], preset: Preset) -> None:
        """Every arm has a learning rate: nothing to refuse."""

    def with_grid(self, grid: Sequence[float], report_seeds: Sequence[int]) -> TuningPlan:
        """This plan's seeds, edge rule and confirmation count on ``grid``, checked as any grid is."""
        return check_plan(grid, self.seeds, report_seeds, self.extend_edges, confirm=len(self.confirm_seeds),
                          fidelity=self.fidelity)

    def tune(self, label: str, config: TrainConfig, components: Sequence[ComponentChoice],
             score: Scorer) -> ArmChoice:
        """``tune_arm``; the arm keeps its best learning rate."""
        record = tune_arm(label, config, self, score)
        return ArmChoice(config.model_copy(update={"lr": record.best().lr}), record,
                         [CachedTuningRun(lr=lr, seed=seed) for lr, seed in record.cached],
                         sum(len(setting.values) for setting in record.settings),
                         (record.steps_trained, record.steps_asked) if self.fidelity.halving else None)

    def block(self, metric: str, records: dict[str, ArmTuning]) -> dict[str, Any]:
        return tuning_block(self, metric, records)


def confirmation_seeds(count: int, seeds: Sequence[int], report_seeds: Sequence[int]) -> tuple[int, ...]:
    """The ``count`` integers after the largest tuning seed that are neither tuning nor report seeds."""
    taken, chosen, candidate = set(seeds) | set(report_seeds), [], max(seeds)
    while len(chosen) < count:
        candidate += 1
        if candidate not in taken:
            chosen.append(candidate)
    return tuple(chosen)


def check_tuning_seeds(seeds: Sequence[int], report_seeds: Sequence[int]) -> tuple[int, ...]:
    """The tuning seeds, every tuner's rule checked: at least one, each once, none a report seed."""
    if not seeds:
        raise ConfigError("no tuning seeds given; e.g. --tune-seeds 1000")
    duplicates = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if duplicates:
        raise ConfigError(f"duplicate tuning seeds {duplicates}; each seed must appear once")
    overlap = sorted(set(seeds) & set(report_seeds))
    if overlap:
        suggestion = max([*seeds, *report_seeds]) + 1000
        raise ConfigError(
            f"tuning seeds {overlap} are also report seeds; tuning and reporting must use "
            f"disjoint seeds (e.g. --tune-seeds {suggestion})")
    return tuple(seeds)


def check_plan(
    grid: Sequence[float] | None, seeds: Sequence[int], report_seeds: Sequence[int], extend_edges: bool = True,
    confirm: int = 0, fidelity: Fidelity = Fidelity(), around: float | None = None,
) -> TuningPlan:
    """A validated plan on ``grid`` (none given and ``around`` a preset's lr: the default grid
    around it, so a pipeline hands its lr down instead of fetching the grid and handing it
    back); every problem is one ``ConfigError`` line, before any training."""
    values = list(grid or ()) if grid or around is None else default_grid(around)
    bad = [v for v in values if not (isinstance(v, int | float) and math.isfinite(v) and v > 0)]
    if bad:
        raise ConfigError(f"tuning grid: learning rates must be positive and finite, got {bad[0]}")
    distinct = sorted(set(float(v) for v in values))
    if len(distinct) < 2:
        raise ConfigError(
            f"tuning grid {values} has {len(distinct)} distinct value(s); tuning needs at least 2 "
            "(e.g. --tune-grid 1e-3,3e-3,1e-2)")
    check_tuning_seeds(seeds, report_seeds)
    if isinstance(confirm, bool) or not isinstance(confirm, int) or not 0 <= confirm <= MAX_CONFIRM:
        raise ConfigError(f"confirmation seeds: need a count 0 .. {MAX_CONFIRM} (0 turns confirmation "
                          f"off), got {confirm!r}")
    return TuningPlan(tuple(distinct), tuple(seeds), extend_edges,
                      confirmation_seeds(confirm, seeds, report_seeds), fidelity)


@dataclass
class SettingResult:
    """One learning rate of one arm: validation metric per tuning seed (None: diverged)."""

    lr: float
    values: dict[int, float | None]
    extension: bool = False  # added when the grid was extended
    stopped_at: int | None = None  # halving: the rung step it stopped at (``values`` are that step's)

    @property
    def mean(self) -> float | None:
        if any(v is None or not math.isfinite(v) for v in self.values.values()):
            return None
        return math.fsum(self.values.values()) / len(self.values)  # type: ignore[arg-type]


@dataclass
class ArmTuning:
    label: str
    settings: list[SettingResult] = field(default_factory=list)
    extended: Literal["up", "down"] | None = None
    confirmed: tuple[float, ...] = ()  # learning rates retrained on the confirmation seeds
    cached: list[tuple[float, int]] = field(default_factory=list)  # (lr, seed) from the arm cache
    paths: dict[tuple[float, int], str] = field(default_factory=dict)  # (lr, seed) -> how it trained
    rungs: list[dict[str, Any]] = field(default_factory=list)  # halving: each rung's lrs and survivors
    steps_trained: int = 0  # training steps actually run (cache hits excluded, halving replays included)
    steps_asked: int = 0  # the same with cache hits counted as trained (the cost from a cold cache)

    @property
    def grid(self) -> list[float]:
        return sorted(s.lr for s in self.settings)

    def best(self) -> SettingResult:
        """Lowest mean among the settings trained to full length (a halving rung's reading is
        not a candidate); after a confirmation, among the confirmed settings (their means cover
        more seeds than the others'), unless every one of them diverged there."""
        finite = [s for s in self.settings if s.mean is not None and s.stopped_at is None]
        if not finite:
            raise DivergedError(f"{self.label} arm: every tuning run diverged "
                                f"(learning rates {self.grid}); lower the grid", 0)
        confirmed = [s for s in finite if s.lr in self.confirmed]
        unconfirmed = [s for s in finite if s.lr not in self.confirmed]
        return min(confirmed or unconfirmed or finite, key=lambda s: (s.mean, s.lr))

    def at_stability_edge(self) -> bool:
        """The best is the highest lr that trained: the highest tried, or just below a divergence."""
        ordered = sorted(self.settings, key=lambda s: s.lr)
        index = ordered.index(self.best())
        return index == len(ordered) - 1 or ordered[index + 1].mean is None

    def edge(self) -> Literal["up", "down"] | None:
        """Which edge of the grid the best setting lies on, if any."""
        lr, grid = self.best().lr, self.grid
        return "down" if lr == grid[0] else "up" if lr == grid[-1] else None


def extension_value(grid: Sequence[float], direction: Literal["up", "down"]) -> float:
    """One more grid step beyond the edge, at the ratio of the edge's neighbours."""
    values = sorted(grid)
    if direction == "up":
        return values[-1] * values[-1] / values[-2]
    return values[0] * values[0] / values[1]


def tune_arm(label: str, config: TrainConfig, plan: TuningPlan, score: Scorer) -> ArmTuning:
    """Score the arm at every grid learning rate under every tuning seed (one ``score`` call:
    ``runner.run.score_arm`` bound to the arm, validation, lower is better), extend the grid
    once if the best lies on its edge, and confirm a best at the stability edge (with its lower
    neighbour) on ``plan.confirm_seeds``. A run ``score`` loaded from the arm cache is listed
    in ``cached`` by its (lr, seed)."""
    tuning = ArmTuning(label)

    def run(lrs: Sequence[float], seeds: Sequence[int], extension: bool = False) -> None:
        specs = [RunSpec(seed, config.model_copy(update={"lr": lr}), label=f"lr {lr:.3g} seed {seed}")
                 for lr in lrs for seed in seeds]
        known = {s.lr: s for s in tuning.settings}
        results = {lr: known.get(lr) or SettingResult(lr, {}, extension) for lr in lrs}
        halving = halve(specs, len(seeds), plan.fidelity, score)
        values, hits, paths = halving.values, halving.hits, halving.paths
        tuning.steps_trained += halving.steps_trained
        tuning.steps_asked += halving.steps_asked
        for candidate, step in halving.stopped.items():
            results[lrs[candidate]].stopped_at = step
        if len(halving.rungs) > 1:
            tuning.rungs.extend({"steps": rung["steps"], "lrs": [lrs[c] for c in rung["candidates"]],
                                 "kept": [lrs[c] for c in rung["kept"]]} for rung in halving.rungs)
        for index, spec in enumerate(specs):  # in run order, whichever came from the cache
            results[spec.config.lr].values[spec.seed] = values[index]
            if index in paths:
                tuning.paths[(spec.config.lr, spec.seed)] = paths[index]
            if index in hits:
                tuning.cached.append((spec.config.lr, spec.seed))
        tuning.settings.extend(r for lr, r in results.items() if lr not in known)

    run(plan.grid, plan.seeds)
    edge = tuning.edge()
    if plan.extend_edges and edge is not None:
        run([extension_value(tuning.grid, edge)], plan.seeds, extension=True)
        tuning.extended = edge
    if plan.confirm_seeds and tuning.at_stability_edge():
        # under halving the neighbour is the highest full-length setting below the best
        best = tuning.best()
        below = [s for s in tuning.settings if s.lr < best.lr and s.stopped_at is None]
        lrs = [max(below, key=lambda s: s.lr).lr, best.lr] if below else [best.lr]
        run(lrs, plan.confirm_seeds)
        tuning.confirmed = tuple(lrs)
    return tuning


def tuning_block(plan: TuningPlan, metric: str, arms: dict[str, ArmTuning]) -> dict[str, Any]:
    """The artifact's top-level ``tuning`` block (docs/ARTIFACTS.md)."""
    block: dict[str, Any] = {
        "parameter": "lr",
        "grid": list(plan.grid),
        "seeds": list(plan.seeds),
        "metric": metric,
        "split": "validation",
        "selection": SELECTION.format(metric=metric) + (CONFIRMATION if plan.confirm_seeds else ""),
        "extend_edges": plan.extend_edges,
        "confirm_seeds": list(plan.confirm_seeds),
        "arms": {},
    }
    halving = plan.fidelity.halving  # under full the block is what it always was
    if halving:
        block["fidelity"] = plan.fidelity.record()
    for label, tuning in arms.items():
        best = tuning.best()
        block["arms"][label] = {
            "settings": [
                {"lr": s.lr, "validation": {str(k): v for k, v in s.values.items()},
                 "mean": s.mean, "status": setting_status(s.mean, s.stopped_at),
                 "extension": s.extension,
                 "paths": {str(seed): tuning.paths[(s.lr, seed)] for seed in s.values
                           if (s.lr, seed) in tuning.paths},
                 **({"stopped_at": s.stopped_at} if halving else {})}
                for s in sorted(tuning.settings, key=lambda s: s.lr)
            ],
            "chosen": {"lr": best.lr},
            "extended": tuning.extended,
            "chosen_on_edge": tuning.edge() is not None,
            "confirmed": list(tuning.confirmed),
            **({"rungs": tuning.rungs} if halving else {}),
        }
    return block


def setting_status(mean: float | None, stopped_at: int | None) -> Literal["complete", "diverged", "stopped"]:
    """A setting's (or trial's) status in the block: diverged, stopped at a halving rung
    (its validation is that step's), or complete."""
    return "diverged" if mean is None else "stopped" if stopped_at is not None else "complete"
