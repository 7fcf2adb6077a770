"""Tuning-fair comparisons: every arm gets the same learning-rate grid before it is compared.

A comparison at one learning rate chosen for the baseline favours the baseline: a method
that wants another learning rate loses for the wrong reason. Here each arm is trained at
every learning rate of one shared grid (default: 5 values log-spaced from lr/3 to 3·lr)
under *tuning seeds* that are disjoint from the report seeds, all runs of an arm in one
``train_many`` call; the arm's best setting by mean validation loss over the tuning seeds
is the one trained under the report seeds for the paired comparison. A best value on the
grid's edge is not a tuned arm, so the grid of that arm is extended once, one step further
in that direction (the artifact records it, and whether the best is still on the edge).
**Re-scoring the contenders** (issue 34, item 2). One tuning seed ranks settings whose scores
lie inside one seed's noise by chance (the ninth session's selection-noise study: the choice
moved in 2 of 10 arms under another seed). After the grid (and its extension) has trained on
the tuning seeds, the *contenders* are the best setting and the runners-up whose mean lies
within the seed noise of the best's (``seed_noise``: the arm's measured seed-to-seed spread
where it has two or more tuning seeds, else the declared default ``DEFAULT_NOISE``, or what
``noise`` gives), at most ``rescore_top`` in all (``contenders``). A best at the *stability
edge* (the highest learning rate that trained: the highest tried, or the one just below a
divergence; a run there may train or stall depending on the seed) always brings its lower
neighbour in. When there is more than one contender, or the best is at the stability edge,
every contender is retrained on the ``confirm_seeds`` (the same further tuning seeds for every
arm, disjoint from the report seeds) and the arm takes the lowest mean over all its tuning
seeds among them; a contender that diverges on a re-scoring seed drops out, and when every
one does, the best of the other settings on the tuning seeds is chosen. A clear winner (the
runner-up outside the noise, the best not at the stability edge) trains nothing more. The
stability-edge confirmation of earlier sessions is the case ``noise = 0``. ``rescoring`` in
the block records the noise, its source, the contenders, why each is one, and the outcome.
**The adequacy probe** (issue 34, item 2). A best *inside* the grid is not extended, yet the
method may train much better far above it (the sandwich row: 5.2e-3 chosen inside lr/3 .. 3·lr,
a second basin at 8.1e-2; docs/LOG.md, seventeenth session). So after the grid has chosen (and
its edge extension has run), one *probe* trains ``PROBE_STEPS`` lattice steps above the grid's
top (the lattice ratio is the top two points' ratio, the one the edge extension steps by: a
factor 3 on the default grid) on the tuning seeds. When the probe's mean beats the best's
at all, the grid is extended toward it by the edge-extension step (``extension_value``: the
lattice points between the top and the probe), the probe joins the grid, and a best then on
the top edge is extended once more as any edge is; selection and re-scoring proceed as before
over the larger grid, so a probe inside the seed noise of the best is a re-scoring contender
like any grid point. (A first version asked the probe to beat the best by more than the seed
noise; it missed the sandwich row, whose probe read -0.67% inside 1.42%: LOG, eighteenth
session.) A probe that does not beat the best is recorded and takes no part
in the choice. Every arm gets the probe (equal budgets); its runs are ordinary (arm, lr, seed)
runs (the arm cache keys them as any). No probe below the grid's bottom: at a fixed number of
steps a smaller lr trains less far, and over the published quick grids the loss falls
monotonically from the bottom to the best in every arm (``scripts/probe_audit.py --shape``,
docs/LOG.md, eighteenth session), while every non-monotone shape seen lies above the best.
``probe`` in the block records the probe, its losses, the best before it and whether it moved
the grid; ``probe: false`` at the block's top says it was off (``--no-tune-probe``).
The test split is never looked at here.

Public API: ``GridTuner`` (a ``runner.tuner.Tuner``), ``default_grid``, ``grid_tuner``,
``check_tuning_seeds``, ``tune_arm``, ``ArmTuning``, ``SettingResult``, ``tuning_block``,
``SeedNoise``, ``seed_noise``, ``contenders``, ``rescoring_record``, ``probe_lr``, ``adequacy_probe``,
``DEFAULT_NOISE``, ``DEFAULT_RESCORE_TOP``, ``PROBE_STEPS``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Sequence
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
DEFAULT_CONFIRM = 2  # extra tuning seeds on which the contenders are re-scored
MAX_CONFIRM = 16  # each costs up to rescore_top runs of the arm; more is a typo, not a protocol
# the seed noise when the tuning seeds cannot measure it (one seed): the baseline's
# seed-to-seed spread at quick, 1.42% of its mean (docs/LOG.md, ninth session), in percent
DEFAULT_NOISE = 1.42
MAX_NOISE = 50.0  # percent; a larger spread is a broken run, not seed noise
DEFAULT_RESCORE_TOP = 3  # the most settings re-scored per arm (the best included)
PROBE_STEPS = 2  # lattice steps above the grid's top the adequacy probe trains (x3 on the default grid)
SELECTION = "lowest mean validation {metric} over the tuning seeds (a diverged run counts as worst)"
CONFIRMATION = ("; the best and the runners-up within the seed noise of it (at most {top}; a best at "
                "the stability edge, the highest lr that trained, with its lower neighbour) are "
                "retrained on the confirmation seeds and the lowest mean over all seeds among them wins")
PROBE_RULE = ("; after the grid (and its edge extension), a probe {steps} lattice steps above its top on the "
              "tuning seeds: one that beats the best extends the grid toward it (the edge-extension step) "
              "and joins it, else it is recorded and not chosen")
NOISE_WHY = {
    "given": "given (--tune-noise)",
    "measured": ("measured: the median over the arm's {settings} settings of the spread of its "
                 "validation across the {seeds} tuning seeds (sample sd / mean)"),
    "default": ("one tuning seed measures no spread: the declared default, the baseline's "
                "seed-to-seed spread at quick (1.42% of its mean; docs/LOG.md, ninth session)"),
}


def default_grid(lr: float, points: int = DEFAULT_POINTS, span: float = DEFAULT_SPAN) -> list[float]:
    """``points`` learning rates log-spaced from ``lr / span`` to ``lr * span`` (inclusive)."""
    if not (lr > 0 and math.isfinite(lr)):
        raise ConfigError(f"learning rate must be positive and finite, got {lr}")
    if points < 2 or span <= 1.0:
        raise ConfigError(f"a tuning grid needs at least 2 points and a span > 1; got {points}, {span}")
    return [lr * span ** (-1.0 + 2.0 * i / (points - 1)) for i in range(points)]


@dataclass(frozen=True)
class GridTuner:
    """The grid (ascending learning rates) and the tuning seeds, the same for every arm: the
    learning-rate grid tuner (``runner.tuner.Tuner``)."""

    grid: tuple[float, ...]
    seeds: tuple[int, ...] = DEFAULT_TUNING_SEEDS
    extend_edges: bool = True
    confirm_seeds: tuple[int, ...] = ()  # the contenders are re-scored on these (): none
    fidelity: Fidelity = Fidelity()  # how far each setting trains (runner.fidelity)
    noise: float | None = None  # seed noise in % of the best's mean; None: measured, else DEFAULT_NOISE
    rescore_top: int = DEFAULT_RESCORE_TOP  # the most contenders re-scored per arm
    probe: bool = False  # the adequacy probe above the grid's top (pipelines: on unless --no-tune-probe)
    kind: ClassVar[Literal["grid"]] = "grid"

    def runs_at_once(self) -> int:
        return len(self.grid) * len(self.seeds)

    def check_arms(self, arms: Sequence[Arm], preset: Preset) -> None:
        """Every arm has a learning rate: nothing to refuse."""

    def with_grid(self, grid: Sequence[float], report_seeds: Sequence[int]) -> GridTuner:
        """This tuner's seeds, edge rule, confirmation count, noise and probe on ``grid``, checked as
        any grid is."""
        return grid_tuner(grid, self.seeds, report_seeds, self.extend_edges, confirm=len(self.confirm_seeds),
                          fidelity=self.fidelity, noise=self.noise, top=self.rescore_top, probe=self.probe)

    def tune(self, label: str, config: TrainConfig, components: Sequence[ComponentChoice],
             score: Scorer) -> ArmChoice:
        """``tune_arm``; the arm keeps its best learning rate."""
        record = tune_arm(label, config, self, score)
        return ArmChoice(config.model_copy(update={"lr": record.best().lr}), record,
                         [CachedTuningRun(lr=lr, seed=seed) for lr, seed in record.cached],
                         record.runs(),
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


def check_rescoring(noise: float | None, top: int) -> None:
    """The re-scoring settings (``noise`` in percent, None: measured or the default; ``top``
    contenders at most), each problem one ``ConfigError`` line."""
    if noise is not None and (isinstance(noise, bool) or not isinstance(noise, int | float)
                              or not math.isfinite(noise) or not 0 <= noise <= MAX_NOISE):
        raise ConfigError(f"--tune-noise {noise!r}: give the seed noise in percent of the best's mean, "
                          f"0 .. {MAX_NOISE:g} (e.g. 1.42; 0 re-scores only a best at the stability edge)")
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_CONFIRM:
        raise ConfigError(f"re-scored settings per arm: need 1 .. {MAX_CONFIRM}, got {top!r}")


def grid_tuner(
    grid: Sequence[float] | None, seeds: Sequence[int], report_seeds: Sequence[int], extend_edges: bool = True,
    confirm: int = 0, fidelity: Fidelity = Fidelity(), around: float | None = None,
    noise: float | None = None, top: int = DEFAULT_RESCORE_TOP, probe: bool = False,
) -> GridTuner:
    """A validated tuner on ``grid`` (none given and ``around`` a preset's lr: the default grid
    around it, so a pipeline hands its lr down instead of fetching the grid and handing it
    back); ``probe``: the adequacy probe above the grid's top (the pipelines pass it on by
    default); every problem is one ``ConfigError`` line, before any training."""
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
    check_rescoring(noise, top)
    if not isinstance(probe, bool):
        raise ConfigError(f"--tune-probe: give on or off (True or False), got {probe!r}")
    return GridTuner(tuple(distinct), tuple(seeds), extend_edges,
                      confirmation_seeds(confirm, seeds, report_seeds), fidelity,
                      None if noise is None else float(noise), top, probe)


@dataclass
class SettingResult:
    """One learning rate of one arm: validation metric per tuning seed (None: diverged)."""

    lr: float
    values: dict[int, float | None]
    extension: bool = False  # added when the grid was extended
    stopped_at: int | None = None  # halving: the rung step it stopped at (``values`` are that step's)
    probe: bool = False  # the adequacy probe (in the grid only when it beat the best)

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
    rescoring: dict[str, Any] | None = None  # the block's record (rescoring_record); None: not asked
    cached: list[tuple[float, int]] = field(default_factory=list)  # (lr, seed) from the arm cache
    paths: dict[tuple[float, int], str] = field(default_factory=dict)  # (lr, seed) -> how it trained
    rungs: list[dict[str, Any]] = field(default_factory=list)  # halving: each rung's lrs and survivors
    steps_trained: int = 0  # training steps actually run (cache hits excluded, halving replays included)
    steps_asked: int = 0  # the same with cache hits counted as trained (the cost from a cold cache)
    probes: list[SettingResult] = field(default_factory=list)  # the adequacy probe's runs (``probe``)
    probe: dict[str, Any] | None = None  # the block's record of the probe; None: no probe asked

    @property
    def grid(self) -> list[float]:
        return sorted(s.lr for s in self.settings)

    def runs(self) -> int:
        """Tuning runs of this arm: every setting's on every seed it trained, a probe left out
        of the grid included."""
        return sum(len(s.values) for s in self.settings) + sum(
            len(p.values) for p in self.probes if all(p is not s for s in self.settings))

    def best(self) -> SettingResult:
        """Lowest mean among the settings trained to full length (a halving rung's reading is
        not a candidate); after a confirmation, among the confirmed settings (their means cover
        more seeds than the others'), unless every one of them diverged there."""
        finite = [s for s in self.settings if s.mean is not None and s.stopped_at is None]
        if not finite and self.confirmed:
            raise DivergedError(f"{self.label} arm: every setting diverged on some tuning seed (the "
                                f"re-scored {list(self.confirmed)} on a confirmation seed); lower the grid", 0)
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


@dataclass(frozen=True)
class SeedNoise:
    """How far one setting's validation moves with the tuning seed, in percent of its mean
    (``spread``: the sample sd over seeds / the mean, of one run), where that number came from,
    and how many tuning seeds each compared mean holds. Two settings are within the noise of
    each other when their means differ by at most ``threshold`` = spread / sqrt(seeds): the
    standard error of a mean over that many seeds."""

    spread: float  # percent
    source: Literal["given", "measured", "default"]
    seeds: int  # tuning seeds in each mean compared
    settings: int = 0  # measured: the settings the median is over

    @property
    def threshold(self) -> float:
        return self.spread / math.sqrt(self.seeds)

    def record(self) -> dict[str, Any]:
        return {"spread_percent": self.spread, "threshold_percent": self.threshold, "source": self.source,
                "seeds": self.seeds, "why": NOISE_WHY[self.source].format(settings=self.settings, seeds=self.seeds)}


def seed_noise(given: float | None, runs: Sequence[Sequence[float | None]], seeds: int) -> SeedNoise:
    """``given`` (percent), else measured from ``runs`` (each setting's validation on the
    ``seeds`` tuning seeds) when there are two or more seeds: the median over the settings
    that trained on every seed of sd / mean (the median, so one setting with a stalled seed
    near the stability edge does not stand for the arm), else ``DEFAULT_NOISE``."""
    if given is not None:
        return SeedNoise(float(given), "given", seeds)
    spreads = [100.0 * statistics.stdev(values) / abs(statistics.fmean(values)) for values in runs
               if seeds >= 2 and len(values) >= 2 and all(v is not None and math.isfinite(v) for v in values)
               and statistics.fmean(values) != 0]  # type: ignore[arg-type]
    if spreads:
        return SeedNoise(statistics.median(spreads), "measured", seeds, len(spreads))
    return SeedNoise(DEFAULT_NOISE, "default", seeds)


def gap_percent(mean: float, best: float) -> float:
    """How much worse ``mean`` is than ``best``, in percent of the best's magnitude."""
    if best == 0:
        return 0.0 if mean == best else math.inf
    return 100.0 * (mean - best) / abs(best)


def contenders(means: dict[Hashable, float], best: Hashable, threshold: float, top: int,
               neighbour: Hashable | None = None) -> dict[Hashable, str]:
    """The settings to re-score, best first, each with why: the ``best``; the stability
    edge's lower ``neighbour`` when given; then the runners-up in order of mean whose gap to
    the best is at most ``threshold`` percent (none when it is 0), ``top`` in all at most.
    ``means``: each candidate's mean on the tuning seeds (finite, full length)."""
    chosen: dict[Hashable, str] = {best: "best on the tuning seeds"}
    if neighbour is not None and neighbour != best:
        chosen[neighbour] = "lower neighbour of a best at the stability edge"
    for key in sorted(means, key=lambda k: (means[k], str(k))):
        if len(chosen) >= top or threshold <= 0:
            break
        gap = gap_percent(means[key], means[best])
        if key in chosen:
            continue
        if gap > threshold:
            break
        chosen[key] = f"within the seed noise: +{gap:.3g}% <= {threshold:.3g}%"
    return chosen


def rescoring_record(noise: SeedNoise, top: int, seeds: Sequence[int], picked: dict[Any, str],
                     means: dict[Any, float], best: Any, name: str, outcome: str) -> dict[str, Any]:
    """The block's ``rescoring`` for one arm: the noise and why, the contenders (``name``:
    ``lr`` or ``trial``) with their gap to the best on the tuning seeds and why each is one,
    the seeds they were retrained on ([] when nothing was), the nearest setting left out and
    the outcome in words."""
    left = sorted((k for k in means if k not in picked), key=lambda k: (means[k], str(k)))

    def gap(key: Any) -> float | None:  # None: not finite (a best of exactly 0)
        value = gap_percent(means[key], means[best])
        return value if math.isfinite(value) else None

    return {
        "noise": noise.record(), "top": top, "seeds": list(seeds),
        "settings": [{name: key, "gap_percent": gap(key), "why": why} for key, why in picked.items() if key in means],
        "next": None if not left else {name: left[0], "gap_percent": gap(left[0])},
        "outcome": outcome,
    }


RESCORED = "chosen among the re-scored by the lowest mean over all tuning seeds"
ALL_DIVERGED = ("every re-scored setting diverged on a confirmation seed: chosen among the other "
                "settings on the tuning seeds")
CLEAR = "a clear winner: no runner-up within the seed noise, not at the stability edge; nothing re-scored"


def tune_arm(label: str, config: TrainConfig, tuner: GridTuner, score: Scorer) -> ArmTuning:
    """Score the arm at every grid learning rate under every tuning seed (one ``score`` call:
    ``runner.run.score_arm`` bound to the arm, validation, lower is better), extend the grid
    once if the best lies on its edge, probe above its top (``tuner.probe``: ``adequacy_probe``), and
    re-score the contenders on ``tuner.confirm_seeds`` (``rescore``). A run ``score`` loaded from the arm cache is listed
    in ``cached`` by its (lr, seed)."""
    tuning = ArmTuning(label)

    def run(lrs: Sequence[float], seeds: Sequence[int], extension: bool = False,
            fidelity: Fidelity | None = None, probe: bool = False) -> list[SettingResult]:
        specs = [RunSpec(seed, config.model_copy(update={"lr": lr}), label=f"lr {lr:.3g} seed {seed}")
                 for lr in lrs for seed in seeds]
        known = {s.lr: s for s in tuning.settings}
        results = {lr: known.get(lr) or SettingResult(lr, {}, extension, probe=probe) for lr in lrs}
        halving = halve(specs, len(seeds), tuner.fidelity if fidelity is None else fidelity, score)
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
        if probe:  # the probe joins the grid only if it beats the best (``adequacy_probe``)
            tuning.probes.extend(results.values())
        else:
            tuning.settings.extend(r for lr, r in results.items() if lr not in known)
        return list(results.values())

    run(tuner.grid, tuner.seeds)
    edge = tuning.edge()
    if tuner.extend_edges and edge is not None:
        run([extension_value(tuning.grid, edge)], tuner.seeds, extension=True)
        tuning.extended = edge
    if tuner.probe:
        adequacy_probe(tuning, tuner, run)
    if tuner.confirm_seeds:
        rescore(tuning, tuner, lambda lrs: run(lrs, tuner.confirm_seeds, fidelity=Fidelity()))
    return tuning


def probe_lr(grid: Sequence[float], steps: int = PROBE_STEPS) -> float:
    """``steps`` lattice steps above the top of ``grid``, each the edge extension's step
    (``extension_value``: the ratio of the top two points)."""
    values = sorted(grid)
    for _ in range(steps):
        values.append(extension_value(values, "up"))
    return values[-1]


PROBE_MOVED = "beat the best: the grid was extended toward it and it joined the grid"
PROBE_KEPT = "did not beat the best: recorded, not a candidate"
PROBE_DIVERGED = "diverged on a tuning seed: recorded, not a candidate"


def adequacy_probe(tuning: ArmTuning, tuner: GridTuner, run: Callable[..., list[SettingResult]]) -> None:
    """The adequacy probe (module docstring): ``run(lrs, seeds, extension=..., fidelity=...,
    probe=...)`` trains learning rates on the tuning seeds into ``tuning`` (``tune_arm``'s
    ``run``). The probe trains at full length; when it beats the best's mean at all, the
    lattice points between the grid's top and the probe are trained
    (each one edge-extension step above the last), the probe joins the grid, and a best then on
    the top edge is extended once more (``tuner.extend_edges``). Records ``tuning.probe``."""
    before = tuning.best()
    full = [s for s in tuning.settings if s.mean is not None and s.stopped_at is None]
    noise = seed_noise(tuner.noise, [list(s.values.values()) for s in full], len(tuner.seeds))
    top, lr = tuning.grid[-1], probe_lr(tuning.grid)
    (result,) = run([lr], tuner.seeds, fidelity=Fidelity(), probe=True)
    gap = None if result.mean is None else gap_percent(result.mean, before.mean)  # type: ignore[arg-type]
    moved = gap is not None and math.isfinite(gap) and gap < 0  # then selection and re-scoring decide
    added: list[float] = []
    if moved:
        lattice = tuning.grid
        for _ in range(PROBE_STEPS - 1):  # the lattice points between the top and the probe
            lattice.append(extension_value(lattice, "up"))
            added.append(lattice[-1])
        if added:
            run(added, tuner.seeds, extension=True)
        tuning.settings.append(result)
        if tuner.extend_edges and tuning.edge() == "up":  # the edge rule, once more, at the new top
            beyond = extension_value(tuning.grid, "up")
            run([beyond], tuner.seeds, extension=True)
            added.append(beyond)
    outcome = PROBE_MOVED if moved else PROBE_DIVERGED if result.mean is None else PROBE_KEPT
    tuning.probe = {
        "lr": lr, "steps_above_top": PROBE_STEPS, "top": top,
        "validation": {str(seed): value for seed, value in result.values.items()}, "mean": result.mean,
        "status": setting_status(result.mean, None),
        "best_before": {"lr": before.lr, "mean": before.mean},
        "gap_percent": gap if gap is not None and math.isfinite(gap) else None,
        "noise": noise.record(), "moved": moved, "added": added, "outcome": outcome,
    }


def rescore(tuning: ArmTuning, tuner: GridTuner, retrain: Callable[[list[float]], None]) -> None:
    """Re-score the arm's contenders (see the module docstring): ``retrain`` trains the given
    learning rates on ``tuner.confirm_seeds`` at full length (a confirmation is never halved)
    into ``tuning``; records ``confirmed`` and ``rescoring``."""
    best = tuning.best()
    full = [s for s in tuning.settings if s.mean is not None and s.stopped_at is None]
    means: dict[Hashable, float] = {s.lr: s.mean for s in full}  # type: ignore[misc]
    noise = seed_noise(tuner.noise, [list(s.values.values()) for s in full], len(tuner.seeds))
    edge = tuning.at_stability_edge()
    # under halving the neighbour is the highest full-length setting below the best
    below = [s.lr for s in full if s.lr < best.lr]
    picked = contenders(means, best.lr, noise.threshold, tuner.rescore_top,
                        max(below) if edge and below else None)
    if len(picked) < 2 and not edge:
        tuning.rescoring = rescoring_record(noise, tuner.rescore_top, [], picked, means, best.lr, "lr", CLEAR)
        return
    lrs = sorted(picked)  # type: ignore[type-var]
    retrain(lrs)  # type: ignore[arg-type]
    tuning.confirmed = tuple(lrs)  # type: ignore[arg-type]
    outcome = RESCORED if any(s.mean is not None for s in tuning.settings if s.lr in lrs) else ALL_DIVERGED
    tuning.rescoring = rescoring_record(noise, tuner.rescore_top, tuner.confirm_seeds, picked, means,
                                        best.lr, "lr", outcome)


def tuning_block(tuner: GridTuner, metric: str, arms: dict[str, ArmTuning]) -> dict[str, Any]:
    """The artifact's top-level ``tuning`` block (docs/ARTIFACTS.md)."""
    block: dict[str, Any] = {
        "parameter": "lr",
        "grid": list(tuner.grid),
        "seeds": list(tuner.seeds),
        "metric": metric,
        "split": "validation",
        "selection": SELECTION.format(metric=metric)
                     + (PROBE_RULE.format(steps=PROBE_STEPS) if tuner.probe else "")
                     + (CONFIRMATION.format(top=tuner.rescore_top) if tuner.confirm_seeds else ""),
        "extend_edges": tuner.extend_edges,
        "confirm_seeds": list(tuner.confirm_seeds),
        "probe": tuner.probe,  # false: no adequacy probe (--no-tune-probe, or a tuner without one)
        "arms": {},
    }
    halving = tuner.fidelity.halving  # under full the block is what it always was
    if halving:
        block["fidelity"] = tuner.fidelity.record()
    for label, tuning in arms.items():
        best = tuning.best()
        block["arms"][label] = {
            "settings": [
                {"lr": s.lr, "validation": {str(k): v for k, v in s.values.items()},
                 "mean": s.mean, "status": setting_status(s.mean, s.stopped_at),
                 "extension": s.extension,
                 "paths": {str(seed): tuning.paths[(s.lr, seed)] for seed in s.values
                           if (s.lr, seed) in tuning.paths},
                 **({"probe": True} if s.probe else {}),
                 **({"stopped_at": s.stopped_at} if halving else {})}
                for s in sorted(tuning.settings, key=lambda s: s.lr)
            ],
            "chosen": {"lr": best.lr},
            "extended": tuning.extended,
            "chosen_on_edge": tuning.edge() is not None,
            "confirmed": list(tuning.confirmed),
            **({} if tuning.rescoring is None else {"rescoring": tuning.rescoring}),
            **({} if tuning.probe is None else {"probe": {
                **tuning.probe, "paths": {seed: tuning.paths[(tuning.probe["lr"], int(seed))]
                                          for seed in tuning.probe["validation"]
                                          if (tuning.probe["lr"], int(seed)) in tuning.paths}}}),
            **({"rungs": tuning.rungs} if halving else {}),
        }
    return block


def setting_status(mean: float | None, stopped_at: int | None) -> Literal["complete", "diverged", "stopped"]:
    """A setting's (or trial's) status in the block: diverged, stopped at a halving rung
    (its validation is that step's), or complete."""
    return "diverged" if mean is None else "stopped" if stopped_at is not None else "complete"
