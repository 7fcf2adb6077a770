"""Space tuning: every arm searches its components' declared tuning space with the same number
of trials (issue 22, item 1; opt-in, ``--tune-space``; ``runner.tuning`` stays the default).

Tuning only the learning rate tunes a baseline on one axis: Wen et al., "Fantastic Pretraining
Optimizers and Where to Find Them" (arXiv 2509.02046) tune lr, weight decay, beta2/momentum
and warmup per optimizer and find that claimed speedups shrink once the baseline is tuned as
well; AlgoPerf gives every submission a declared search space and the same number of trials.
Here:

- **The space.** An arm's space is its optimizer's ``Manifest.tuning_space`` (AdamW: lr,
  beta2, weight decay, warmup; Muon: lr, momentum, the AdamW groups' lr; Lion: lr, beta2,
  weight decay), plus any axis its model components declare that the optimizer does not
  (none today: an architecture component tunes lr, the optimizer's). Each axis
  (``registry.TuningAxis``) moves one real setting: a ``TrainConfig`` field or a field of the
  optimizer component's config (``TrainConfig.optimizer.config``). Bounds ``relative_to`` the
  preset's lr or steps are resolved against the preset (lr: lr/3 .. 3·lr, the default grid's
  span). ``--tune-space lr,beta2`` keeps only those axes (each must be declared by an arm).
- **The paper's space** (``--tune-space paper``; issue 48, dial a; opt-in, ``full`` stays the
  protocol of record): each component's ``Manifest.paper_tuning_space`` where it declares one,
  else its ``tuning_space``: what the method's own paper, or the independent study that tuned
  it (Wen et al. 2509.02046), tunes: weight decay up to 1, warmup, the optimizer's betas. The
  trials, seeds, sampler, extension and grid floor are those of ``full``.
- **The budget.** Every arm gets exactly ``trials`` trials, each trained under every tuning
  seed (disjoint from the report seeds), so a comparison costs both arms the same.
- **The sampler.** Optuna's ``QMCSampler`` (Sobol, scrambled with ``sampler_seed``; Bergstra
  & Bengio 2012 on quasi-random search) in one in-memory Optuna study per arm. The study's
  parameters are the unit-cube coordinates ``u:<axis>`` in [0, 1); each is mapped to its
  setting by the axis's scale (``axis_value``), so trial k of an arm is point k of
  ``scipy.stats.qmc.Sobol(d, scramble=True, seed=sampler_seed)`` in the order of the arm's
  axes. Optuna's QMCSampler takes its search space from the study's first trial and samples
  that first trial at random; a *space-defining* trial (state PRUNED, never trained, user
  attribute ``role``) is therefore added before the first ask, so every trained trial is a
  Sobol point. The same study could live on an RDB storage shared by several machines
  (``optuna.create_study(storage="postgresql://...", study_name=<arm key>,
  load_if_exists=True)`` with the same sampler seed; the space trial added once): the
  sampler's Sobol index is a study system attribute, so the workers draw distinct points.
  Not built: a tuning is one process today.
- **A sequential sampler** (``--tune-sampler tpe|gp``; default ``sobol``, the above). The first
  ``startup_trials`` (half the declared phase, rounded up) are the same Sobol points as under
  ``sobol``; the rest of the declared phase is proposed by Optuna's ``TPESampler`` (seeded with
  ``sampler_seed``, multivariate, constant liar) or ``GPSampler`` (seeded) over the same
  unit-cube coordinates, in a second in-memory study that is told every trained trial (a
  diverged one as FAIL). It asks ``SEQUENTIAL_BATCH`` (2) trials at a time, so that each
  ``train_many`` call still batches runs: a trial proposed in a batch does not know its batch
  partner's result (TPE's constant liar keeps the two apart), so the sampler is sequential
  between batches, not within one. Trial k still draws Sobol point k of the design (recorded
  as ``sobol``); a proposed trial trains at the sampler's point instead (``coordinates``,
  ``sampled_by``), and the extension phase draws the same Sobol points as under ``sobol``. The
  proposals are a deterministic function of the sampler seed and the trials' results.
- **Edge extension.** The last ``trials // 4`` trials of an arm are its *extension phase*
  (none below 4 trials); the first ``trials - trials // 4`` form the *declared phase*. After
  the declared phase, an axis is *on an edge* when the best trial is the extreme trial on it:
  its coordinate is the lowest (or highest) of all declared-phase trials, the analogue of a
  grid's end point (with the other axes varying, no rule on the coordinate's value alone
  works for every count: n Sobol points fill n equal strata only when n is a power of 2;
  with few trials the best is often extreme on some axis, as a grid's often sits on an
  end, and the extension is what checks it). Each such axis is
  extended once: the extension phase samples it over the interval beyond that edge of half
  the declared width in the axis's scale (coordinates (1, 1.5] or [-0.5, 0) of the same
  mapping), clipped at the axis's hard limit (an axis whose bound is its limit is not
  extended), while every other axis stays at the best trial's value. Without an axis on an
  edge, the extension phase continues the Sobol design over the declared space, so the
  budget is the same either way.
- **The choice.** Lowest mean validation metric over the tuning seeds among all trials (a
  diverged run counts as worst; ties: the earlier trial), the grid floor's included. Then the
  lr grid's rule for *contenders* (``runner.tuning.contenders``): the choice and the trials
  within the seed noise of it (at most ``rescore_top``; the noise as ``runner.tuning.seed_noise``
  defines it) are retrained on ``confirm_seeds`` (the same further tuning seeds for every arm)
  and the lowest mean over all tuning seeds among them is chosen; a clear winner trains
  nothing more. Re-scoring adds seeds to trials, never trials: every arm still has exactly
  ``trials`` trials. There is no stability-edge case here (no axis order to read it on).
- **The arm cache.** A trial is a ``RunSpec`` whose ``TrainConfig`` holds every tuned setting
  (the optimizer's config inside it), and the cache key covers the whole ``TrainConfig``
  (``runner.cache.run_key``): a trial trained before with identical settings is loaded, and
  is the number retraining would give; a trial equal to a learning-rate grid run is that run.

The test split is never looked at here.

Public API: ``SpaceTuner`` (a ``runner.tuner.Tuner``), ``space_tuner``, ``ResolvedAxis``, ``arm_space``,
``declared_space``, ``axis_value``, ``apply_settings``, ``Trial``, ``ArmSpaceTuning``, ``tune_arm_space``,
``space_tuning_block``, ``sampler_record``, ``sobol_study``, ``sequential_study``, ``SAMPLERS``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from llmevo.artifacts.schema import CachedTuningRun
from llmevo.catalog import full_registry
from llmevo.errors import ConfigError, DivergedError
from llmevo.registry import MODEL_SLOTS, ComponentChoice, Manifest, TuningAxis
from llmevo.runner.arm import Arm
from llmevo.runner.arm_run import Scorer
from llmevo.runner.fidelity import Fidelity, halve
from llmevo.runner.presets import Preset
from llmevo.runner.tuner import ArmChoice, model_components
from llmevo.runner.tuning import (
    ALL_DIVERGED,
    CLEAR,
    CONFIRMATION,
    DEFAULT_RESCORE_TOP,
    MAX_CONFIRM,
    RESCORED,
    ArmTuning,
    GridTuner,
    check_rescoring,
    check_tuning_seeds,
    confirmation_seeds,
    contenders,
    grid_tuner,
    rescoring_record,
    seed_noise,
    setting_status,
    tune_arm,
)
from llmevo.train.execution import RunSpec
from llmevo.train.trainer import TrainConfig

if TYPE_CHECKING:
    import optuna

DEFAULT_TRIALS = 8
MAX_TRIALS = 256  # each trial trains once per tuning seed; more is a typo, not a protocol
DEFAULT_SAMPLER_SEED = 0
SAMPLERS = ("sobol", "tpe", "gp")  # sobol: the whole declared phase; tpe, gp: after a Sobol start
DEFAULT_SAMPLER = "sobol"
SEQUENTIAL_BATCH = 2  # trials a sequential sampler proposes before it is told their results
EXTENSION_SHARE = 4  # the last trials // 4 trials of an arm are its extension phase
EXTENSION_WIDTH = 0.5  # an extension reaches half the declared width beyond the edge
FULL = "full"
PAPER = "paper"  # every axis of each component's paper_tuning_space (its tuning_space where none)
SELECTION = ("lowest mean validation {metric} over the tuning seeds among the arm's trials "
             "(a diverged run counts as worst; ties: the earlier trial)")
METHOD = ("Optuna QMCSampler (Sobol, scrambled, seed {seed}) over the unit cube of each arm's "
          "declared axes, one in-memory study per arm; {trials} trials per arm, each under every "
          "tuning seed; the last trials // 4 extend, once, each axis on which the best "
          "declared-phase trial is the extreme trial, by half the declared width beyond that "
          "edge in the axis's scale (clipped at its limit), the other axes at the best's values")
SEQUENTIAL = ("; under --tune-sampler {sampler}: the first {startup} declared trials are those Sobol "
              "points, the other {proposed} proposed by Optuna {name} (seed {seed}{options}) over the same "
              "unit cube, {batch} at a time, told every trained trial's mean (a diverged one as failed)")
GRID_FLOOR = ("; then the lr grid {grid} (the grid protocol's runs, extended once past an edge) at "
              "the arm's other settings: the arm keeps the grid's best if it is lower than the "
              "search's, so the search never ends worse than the grid (grid_floor records both)")


@dataclass(frozen=True)
class SpaceTuner:
    """Which axes (None: every declared one), how many trials per arm, the tuning seeds, the
    sampler's seed, the lr grid floor and the sampler (``sobol``, or ``tpe``/``gp`` after a
    Sobol start): the same for every arm, and each part of what makes two tunings comparable."""

    axes: tuple[str, ...] | None
    trials: int
    seeds: tuple[int, ...]
    sampler_seed: int = DEFAULT_SAMPLER_SEED
    # the lr grid the search must not end worse than: trained after the Sobol trials at the
    # arm's other settings (the grid protocol's runs, extended once past an edge); (): none
    grid: tuple[float, ...] = ()
    # who proposes the declared trials after the Sobol start (see the module docstring)
    sampler: Literal["sobol", "tpe", "gp"] = DEFAULT_SAMPLER
    fidelity: Fidelity = Fidelity()  # how far each trial trains (runner.fidelity)
    confirm_seeds: tuple[int, ...] = ()  # the contenders are re-scored on these; (): none
    noise: float | None = None  # seed noise in % (runner.tuning.seed_noise); None: measured or default
    rescore_top: int = DEFAULT_RESCORE_TOP
    paper: bool = False  # the components' paper_tuning_space (--tune-space paper), else tuning_space

    kind: ClassVar[Literal["space"]] = "space"

    @property
    def startup_trials(self) -> int:
        """The declared trials that are Sobol points (all of them under ``sobol``)."""
        if self.sampler == "sobol":
            return self.declared_trials
        return min(self.declared_trials, max(2, -(-self.declared_trials // 2)))

    @property
    def declared_trials(self) -> int:
        return self.trials - self.extension_trials

    @property
    def extension_trials(self) -> int:
        return self.trials // EXTENSION_SHARE

    def runs_at_once(self) -> int:
        return self.declared_trials * len(self.seeds)

    def check_arms(self, arms: Sequence[Arm], preset: Preset) -> None:
        """Each arm's axes resolve against the preset; an axis no arm declares, or an arm left
        with none, is a ``ConfigError``."""
        spaces, declared = {}, {}
        for arm in arms:
            components = model_components(arm)
            spaces[arm.label] = arm_space(arm.optimizer, components, preset.train, self.axes, self.paper)
            declared[arm.label] = [axis.name for axis in arm_space(arm.optimizer, components, preset.train,
                                                                   paper=self.paper)]
        check_axes(self.axes, spaces, declared)

    def with_grid(self, grid: Sequence[float], report_seeds: Sequence[int]) -> SpaceTuner:
        raise ConfigError("a grid binds to a plan tuned on a learning-rate grid, not a space")

    def tune(self, label: str, config: TrainConfig, components: Sequence[ComponentChoice],
             score: Scorer) -> ArmChoice:
        """``tune_arm_space`` over the arm's declared axes; the arm keeps its best trial's
        settings (its optimizer's among them)."""
        axes = arm_space(config.optimizer, components, config, self.axes, self.paper)
        record = tune_arm_space(label, config, axes, self, score)
        cached = [CachedTuningRun(lr=float(trial.values["lr"]), seed=seed, trial=trial.number)
                  for trial in (*record.trials, *record.grid_trials) for seed in trial.cached]
        grid = record.grid
        steps = (record.steps_trained + (grid.steps_trained if grid is not None else 0),
                 record.steps_asked + (grid.steps_asked if grid is not None else 0))
        return ArmChoice(chosen_config(config, record), record, cached,
                         sum(len(trial.validation) for trial in (*record.trials, *record.grid_trials)),
                         steps if self.fidelity.halving else None)

    def block(self, metric: str, records: dict[str, ArmSpaceTuning]) -> dict[str, Any]:
        return space_tuning_block(self, metric, records)


def space_tuner(space: str, trials: int, seeds: Sequence[int], report_seeds: Sequence[int],
                sampler_seed: int = DEFAULT_SAMPLER_SEED, grid: Sequence[float] = (),
                sampler: str = DEFAULT_SAMPLER, fidelity: Fidelity = Fidelity(),
                around: float | None = None, confirm: int = 0, noise: float | None = None,
                top: int = DEFAULT_RESCORE_TOP) -> SpaceTuner:
    """A validated tuner (``space``: ``full``, ``paper`` or a comma list of axis names; ``grid``: the lr
    grid the search is checked against, see ``GRID_FLOOR``, or with ``around`` (a preset's lr)
    and no grid the default grid around it; ``sampler``: one of ``SAMPLERS``; ``confirm``: how
    many further tuning seeds re-score the contenders, ``noise`` and ``top`` as
    ``runner.tuning.grid_tuner`` takes them); every problem is one ``ConfigError`` line, before
    any training. Axis names are checked against the arms later (``arm_space``), once the
    comparison is known."""
    if sampler not in SAMPLERS:
        raise ConfigError(f"--tune-sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    if isinstance(sampler_seed, bool) or not isinstance(sampler_seed, int) or sampler_seed < 0:
        raise ConfigError(f"sampler seed {sampler_seed!r}: give a non-negative integer")
    text = space.strip()
    if not text:
        raise ConfigError("--tune-space: give 'full', 'paper' or a comma list of axes, e.g. lr,beta2")
    axes = None if text in (FULL, PAPER) else tuple(a.strip() for a in text.split(","))
    if axes is not None:
        if any(not a for a in axes):
            raise ConfigError(f"--tune-space {space!r}: an empty axis name; e.g. lr,beta2")
        if len(set(axes)) != len(axes):
            raise ConfigError(f"--tune-space {space!r}: an axis is named twice")
        if "lr" not in axes:  # each trial's lr is recorded and the lr grid floors the search
            raise ConfigError(f"--tune-space {space!r}: the space must hold lr (each arm's choice is "
                              f"floored by the lr grid); e.g. --tune-space lr,{axes[0]}")
    if isinstance(trials, bool) or not isinstance(trials, int) or not 2 <= trials <= MAX_TRIALS:
        raise ConfigError(f"--tune-trials {trials!r}: need 2 .. {MAX_TRIALS} trials per arm "
                          "(a choice needs at least two)")
    checked = check_tuning_seeds(seeds, report_seeds)
    floor = grid_tuner(grid, checked, report_seeds, around=around).grid if grid or around is not None else ()
    if isinstance(confirm, bool) or not isinstance(confirm, int) or not 0 <= confirm <= MAX_CONFIRM:
        raise ConfigError(f"confirmation seeds: need a count 0 .. {MAX_CONFIRM} (0 turns re-scoring "
                          f"off), got {confirm!r}")
    check_rescoring(noise, top)
    return SpaceTuner(axes, trials, checked, sampler_seed, floor, sampler, fidelity,  # type: ignore[arg-type]
                      confirmation_seeds(confirm, checked, report_seeds),
                      None if noise is None else float(noise), top, text == PAPER)


@dataclass(frozen=True)
class ResolvedAxis:
    """One axis of one arm with its bounds resolved against the preset (absolute values)."""

    name: str
    axis: TuningAxis
    low: float
    high: float
    limit_low: float | None
    limit_high: float | None

    @property
    def label(self) -> str:
        return f"{self.axis.target}.{self.axis.setting}"


def _to_scale(scale: str, value: float) -> float:
    return value if scale == "linear" else math.log(value) if scale == "log" else math.log1p(-value)


def _from_scale(scale: str, t: float) -> float:
    return t if scale == "linear" else math.exp(t) if scale == "log" else -math.expm1(t)


def axis_value(axis: ResolvedAxis, u: float) -> float | int:
    """The setting at coordinate ``u`` (0: ``low``, 1: ``high``, uniform in the axis's scale;
    outside [0, 1] the same line extended), clipped at the axis's limits; integer axes round
    to the nearest integer."""
    scale = axis.axis.scale
    t_low, t_high = _to_scale(scale, axis.low), _to_scale(scale, axis.high)
    value = _from_scale(scale, t_low + u * (t_high - t_low))
    if axis.limit_low is not None:
        value = max(value, axis.limit_low)
    if axis.limit_high is not None:
        value = min(value, axis.limit_high)
    return int(round(value)) if axis.axis.integer else value


def _resolve(name: str, axis: TuningAxis, train: TrainConfig) -> ResolvedAxis:
    factor = {"lr": train.lr, "steps": float(train.steps), None: 1.0}[axis.relative_to]

    def scaled(value: float | None) -> float | None:
        return None if value is None else value * factor

    return ResolvedAxis(name, axis, axis.low * factor, axis.high * factor,
                        scaled(axis.limit_low), scaled(axis.limit_high))


def declared_space(manifest: Manifest, paper: bool = False) -> dict[str, TuningAxis]:
    """A component's declared axes: its ``paper_tuning_space`` under ``paper`` where it declares
    one, else its ``tuning_space``."""
    return dict(manifest.paper_tuning_space or manifest.tuning_space if paper else manifest.tuning_space)


def arm_space(optimizer: ComponentChoice, components: Sequence[ComponentChoice],
              train: TrainConfig, wanted: Sequence[str] | None = None,
              paper: bool = False) -> list[ResolvedAxis]:
    """The arm's axes (its optimizer's declared space, then its model components' axes the
    optimizer lacks; ``paper``: each component's paper space, ``declared_space``), resolved
    against the preset's ``train`` and kept to ``wanted`` (None: all). A declared axis whose
    setting is not a real field is a ``ConfigError``."""
    registry = full_registry()
    spec = registry.get("optimizer", optimizer.name)
    space = declared_space(spec.manifest, paper)
    if "lr" not in space:
        raise ConfigError(f"optimizer '{optimizer.name}' declares no tuning space with lr "
                          "(Manifest.tuning_space); it cannot be space-tuned")
    for choice in components:
        for slot in MODEL_SLOTS:
            if choice.name in registry.names(slot):
                for name, axis in declared_space(registry.get(slot, choice.name).manifest, paper).items():
                    space.setdefault(name, axis)
    for name, axis in space.items():
        fields = (TrainConfig.model_fields if axis.target == "train"
                  else spec.config_cls.model_fields)
        if axis.setting not in fields:
            raise ConfigError(f"tuning axis '{name}' of the {optimizer.name} arm moves "
                              f"{axis.target}.{axis.setting}, which is not a setting")
    names = list(space) if wanted is None else [name for name in space if name in wanted]
    return [_resolve(name, space[name], train) for name in names]


def check_axes(wanted: Sequence[str] | None, spaces: dict[str, list[ResolvedAxis]],
               declared: dict[str, Sequence[str]]) -> None:
    """Refuse an axis that no arm declares (``declared``: each arm's whole space), and an arm
    left without any axis."""
    if wanted is None:
        return
    known = sorted({name for names in declared.values() for name in names})
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ConfigError(f"--tune-space: unknown axis '{unknown[0]}'; the arms declare "
                          f"{', '.join(known)} (or use --tune-space full)")
    for label, axes in spaces.items():
        if not axes:
            raise ConfigError(f"--tune-space {','.join(wanted)}: the {label} arm declares none of "
                              f"these axes (it has {', '.join(declared[label])})")


def apply_settings(config: TrainConfig, axes: Sequence[ResolvedAxis],
                   values: dict[str, float | int]) -> TrainConfig:
    """``config`` with each axis's setting set: ``TrainConfig`` fields directly, optimizer
    fields in ``config.optimizer.config``."""
    train: dict[str, Any] = {}
    optimizer: dict[str, Any] = dict(config.optimizer.config)
    for axis in axes:
        target = train if axis.axis.target == "train" else optimizer
        target[axis.axis.setting] = values[axis.name]
    choice = config.optimizer.model_copy(update={"config": optimizer})
    return config.model_copy(update={**train, "optimizer": choice})


@dataclass
class Trial:
    """One trial of one arm: its Sobol coordinates, settings and validation per tuning seed."""

    number: int  # 0-based, in the arm's sampling order
    phase: Literal["declared", "extension", "grid"]
    sobol: dict[str, float]  # the design's u:<axis> values: Sobol point <number>, [0, 1) ({}: grid)
    coordinates: dict[str, float]  # where each setting lies on its declared line (0: low, 1: high; {}: grid)
    values: dict[str, float | int]  # the settings trained
    validation: dict[int, float | None] = field(default_factory=dict)  # None: diverged
    cached: tuple[int, ...] = ()  # tuning seeds loaded from the arm cache
    paths: dict[int, str] = field(default_factory=dict)  # tuning seed -> how its run trained
    sampled_by: Literal["sobol", "tpe", "gp"] = "sobol"  # tpe, gp: coordinates are that sampler's point
    stopped_at: int | None = None  # halving: the rung step it stopped at (``validation`` is that step's)

    @property
    def mean(self) -> float | None:
        if not self.validation or any(v is None or not math.isfinite(v) for v in self.validation.values()):
            return None
        return math.fsum(self.validation.values()) / len(self.validation)  # type: ignore[arg-type]


@dataclass
class ArmSpaceTuning:
    label: str
    axes: list[ResolvedAxis]
    trials: list[Trial] = field(default_factory=list)
    extended: dict[str, Literal["up", "down"]] = field(default_factory=dict)
    on_edge: dict[str, Literal["up", "down"]] = field(default_factory=dict)  # after the declared phase
    at_limit: tuple[str, ...] = ()  # on an edge that is the axis's hard limit: not extended
    grid: ArmTuning | None = None  # the lr grid's runs at the arm's other settings (GRID_FLOOR)
    grid_trials: list[Trial] = field(default_factory=list)  # the same runs, as trials
    rungs: list[dict[str, Any]] = field(default_factory=list)  # halving: each rung's trials and survivors
    steps_trained: int = 0  # training steps of the search actually run (the grid floor's: grid)
    steps_asked: int = 0  # the same with cache hits counted as trained
    rescore_seeds: tuple[int, ...] = ()  # the confirmation seeds the contenders were retrained on
    rescored: tuple[int, ...] = ()  # the trial numbers retrained on them
    rescoring: dict[str, Any] | None = None  # the block's record (runner.tuning.rescoring_record)

    def first_mean(self, trial: Trial) -> float | None:
        """The trial's mean on the tuning seeds alone (a re-scored trial also holds the
        confirmation seeds' values)."""
        values = [v for seed, v in trial.validation.items() if seed not in self.rescore_seeds]
        if not values or any(v is None or not math.isfinite(v) for v in values):
            return None
        return math.fsum(values) / len(values)  # type: ignore[arg-type]

    def full_length(self, trials: Sequence[Trial], leave_out: Sequence[int] = ()) -> list[Trial]:
        """The trials trained to full length with a finite mean on the tuning seeds, but ``leave_out``."""
        return [t for t in trials if self.first_mean(t) is not None and t.stopped_at is None
                and t.number not in leave_out]

    def best(self, trials: Sequence[Trial] | None = None) -> Trial:
        """The lowest mean on the tuning seeds among trials trained to full length (ties: the earlier)."""
        pool = self.full_length(self.trials if trials is None else trials)
        if not pool:
            raise DivergedError(f"{self.label} arm: every tuning trial diverged; narrow the space "
                                "(e.g. --tune-space with fewer axes) or lower the preset's lr", 0)
        return min(pool, key=lambda t: (self.first_mean(t), t.number))

    def first_choice(self, leave_out: Sequence[int] = ()) -> Trial:
        """The choice on the tuning seeds: the search's best trial, unless a trial of the lr
        grid is lower (then the search's budget was too small to find what the grid found);
        ``leave_out``: trial numbers not to choose."""
        search = self.full_length(self.trials, leave_out)
        floor = self.full_length(self.grid_trials, leave_out)
        if not search and not floor:
            raise DivergedError(f"{self.label} arm: every trial diverged on some tuning seed (the "
                                f"re-scored trials {list(self.rescored)} on a confirmation seed); "
                                "narrow the space or lower the preset's lr", 0)
        ranked = [min(pool, key=lambda t: (self.first_mean(t), t.number)) for pool in (search, floor) if pool]
        return min(ranked, key=lambda t: (self.first_mean(t), t.phase == "grid"))  # a tie: the search's

    def choice(self) -> Trial:
        """The arm's choice: ``first_choice``, or after a re-scoring the lowest mean over all
        tuning seeds among the re-scored trials (when every one diverged on a confirmation
        seed: ``first_choice`` among the others)."""
        if not self.rescored:
            return self.first_choice()
        pool = [t for t in (*self.trials, *self.grid_trials) if t.number in self.rescored and t.mean is not None]
        if pool:
            return min(pool, key=lambda t: (t.mean, t.number))
        return self.first_choice(leave_out=self.rescored)

    def extension_range(self, name: str) -> tuple[float, float] | None:
        """The settings an extended axis reached beyond its edge (lowest, highest)."""
        if name not in self.extended:
            return None
        axis = next(a for a in self.axes if a.name == name)
        direction = self.extended[name]
        ends = (1.0, 1.0 + EXTENSION_WIDTH) if direction == "up" else (-EXTENSION_WIDTH, 0.0)
        values = sorted(float(axis_value(axis, u)) for u in ends)
        return values[0], values[1]


def sobol_study(dimensions: Sequence[str], seed: int) -> optuna.Study:
    """An in-memory Optuna study whose QMCSampler (Sobol, scrambled with ``seed``) draws point
    k of the scrambled Sobol sequence for the k-th asked trial, over coordinates
    ``u:<dimension>`` in [0, 1). The space-defining first trial (PRUNED, never trained) makes
    the sampler's search space known before the first ask (see the module docstring)."""
    import optuna  # 0.1 s: imported by the runs that tune a space, not by every command
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():  # QMCSampler is "experimental" in Optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    distributions = {f"u:{name}": FloatDistribution(0.0, 1.0) for name in dimensions}
    study.add_trial(create_trial(params={key: 0.5 for key in distributions},
                                 distributions=distributions, state=TrialState.PRUNED,
                                 user_attrs={"role": "search space (not trained)"}))
    return study


def sequential_study(sampler: Literal["tpe", "gp"], seed: int) -> optuna.Study:
    """An in-memory Optuna study whose sampler proposes trials from the results it is told:
    ``TPESampler`` (multivariate, constant liar for trials asked together) or ``GPSampler``,
    seeded with ``seed``, with no random start of its own (the Sobol start is added to it as
    finished trials, see ``tune_arm_space``)."""
    import optuna

    with warnings.catch_warnings():  # multivariate TPE is "experimental" in Optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        chosen: optuna.samplers.BaseSampler
        if sampler == "tpe":
            chosen = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                                n_startup_trials=0)
        else:  # without the optional greenlet package GPSampler logs a warning at every ask
            optuna.logging.set_verbosity(optuna.logging.ERROR)
            chosen = optuna.samplers.GPSampler(seed=seed, n_startup_trials=0,
                                               warn_independent_sampling=False)
    return optuna.create_study(direction="minimize", sampler=chosen)


def _edges(axes: Sequence[ResolvedAxis], best: Trial, trials: Sequence[Trial]
           ) -> dict[str, Literal["up", "down"]]:
    """The axes on which ``best`` is the extreme of ``trials`` (its coordinate the lowest:
    ``down``, or the highest: ``up``), each with its side."""
    found: dict[str, Literal["up", "down"]] = {}
    for axis in axes:
        places = [trial.coordinates[axis.name] for trial in trials]
        u = best.coordinates[axis.name]
        if len(places) > 1 and u == min(places):
            found[axis.name] = "down"
        elif len(places) > 1 and u == max(places):
            found[axis.name] = "up"
    return found


def _extendable(axis: ResolvedAxis, direction: str) -> bool:
    """Whether the interval beyond the edge holds any setting the axis may take."""
    inner = axis_value(axis, 1.0 if direction == "up" else 0.0)
    outer = axis_value(axis, 1.0 + EXTENSION_WIDTH if direction == "up" else -EXTENSION_WIDTH)
    return outer != inner


def tune_arm_space(
    label: str,
    config: TrainConfig,
    axes: Sequence[ResolvedAxis],
    tuner: SpaceTuner,
    score: Scorer,
) -> ArmSpaceTuning:
    """Score ``tuner.trials`` trials of the arm over ``axes`` under every tuning seed (one
    ``score`` call per phase, or per batch of a sequential sampler: ``runner.run.score_arm``
    bound to the arm, validation, lower is better), extend each axis whose best declared-phase
    trial lies on an edge (see the module docstring). A run ``score`` loaded from the arm
    cache is listed in its trial's ``cached``."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    tuning = ArmSpaceTuning(label, list(axes))
    study = sobol_study([axis.name for axis in axes], tuner.sampler_seed)  # the design: point k, trial k
    distributions = {f"u:{axis.name}": FloatDistribution(0.0, 1.0) for axis in axes}
    proposer = None if tuner.sampler == "sobol" else sequential_study(tuner.sampler, tuner.sampler_seed)

    def run(count: int, phase: Literal["declared", "extension"],
            place: Callable[[dict[str, float]], dict[str, float]], propose: bool = False) -> None:
        asked = [study.ask(distributions) for _ in range(count)]
        proposed = [proposer.ask(distributions) for _ in range(count)] if propose and proposer else []
        trials = []
        for index, asked_trial in enumerate(asked):
            sobol = {axis.name: float(asked_trial.params[f"u:{axis.name}"]) for axis in axes}
            coordinates = ({axis.name: float(proposed[index].params[f"u:{axis.name}"]) for axis in axes}
                           if proposed else place(sobol))
            values = {axis.name: axis_value(axis, coordinates[axis.name]) for axis in axes}
            trials.append(Trial(len(tuning.trials) + len(trials), phase, sobol, coordinates, values,
                                sampled_by=tuner.sampler if proposed else "sobol"))
        specs = [RunSpec(seed, apply_settings(config, axes, trial.values),
                         label=f"trial {trial.number} seed {seed}")
                 for trial in trials for seed in tuner.seeds]
        halving = halve(specs, len(tuner.seeds), tuner.fidelity, score)
        values, hits, paths = halving.values, halving.hits, halving.paths
        tuning.steps_trained += halving.steps_trained
        tuning.steps_asked += halving.steps_asked
        for candidate, step in halving.stopped.items():
            trials[candidate].stopped_at = step
        if len(halving.rungs) > 1:
            tuning.rungs.extend({"steps": rung["steps"], "trials": [trials[c].number for c in rung["candidates"]],
                                 "kept": [trials[c].number for c in rung["kept"]]} for rung in halving.rungs)
        for index, spec in enumerate(specs):
            trial = trials[index // len(tuner.seeds)]
            trial.validation[spec.seed] = values[index]
            if index in paths:
                trial.paths[spec.seed] = paths[index]
            if index in hits:
                trial.cached = (*trial.cached, spec.seed)
        for asked_trial, trial in zip(asked, trials, strict=True):
            asked_trial.set_user_attr("phase", phase)
            asked_trial.set_user_attr("settings", trial.values)
            if trial.mean is None:
                study.tell(asked_trial, state=TrialState.FAIL)
            elif trial.stopped_at is not None:  # a halving rung's reading is not a final value
                study.tell(asked_trial, state=TrialState.PRUNED)
            else:
                study.tell(asked_trial, trial.mean)
        if proposer is not None and phase == "declared":  # the sequential sampler learns each result
            for index, trial in enumerate(trials):
                failed = trial.mean is None
                # a trial stopped at a halving rung is told as pruned (its reading is not final)
                state = (TrialState.FAIL if failed else TrialState.PRUNED if trial.stopped_at is not None
                         else TrialState.COMPLETE)
                value = None if state != TrialState.COMPLETE else trial.mean
                if proposed:
                    proposer.tell(proposed[index], value, state=state)
                else:  # a Sobol start point, given to the sampler as a finished trial
                    proposer.add_trial(create_trial(
                        params={f"u:{name}": u for name, u in trial.coordinates.items()},
                        distributions=distributions, state=state, value=value))
        tuning.trials.extend(trials)

    def declared(sobol: dict[str, float]) -> dict[str, float]:
        return dict(sobol)

    run(tuner.startup_trials, "declared", declared)
    while len(tuning.trials) < tuner.declared_trials:  # a sequential sampler, a batch at a time
        run(min(SEQUENTIAL_BATCH, tuner.declared_trials - len(tuning.trials)), "declared", declared, True)
    if tuner.extension_trials:
        best = tuning.best()
        tuning.on_edge = _edges(axes, best, tuning.trials)
        tuning.at_limit = tuple(name for name, direction in tuning.on_edge.items()
                                if not _extendable(next(a for a in axes if a.name == name), direction))
        tuning.extended = {name: d for name, d in tuning.on_edge.items() if name not in tuning.at_limit}

        def beyond(sobol: dict[str, float]) -> dict[str, float]:
            """Extended axes beyond their edge, the others at the best's place; without an
            extended axis, the Sobol design continues over the declared space."""
            if not tuning.extended:
                return dict(sobol)
            coordinates = dict(best.coordinates)
            for name, direction in tuning.extended.items():
                u = sobol[name] * EXTENSION_WIDTH
                coordinates[name] = 1.0 + u if direction == "up" else -u
            return coordinates

        run(tuner.extension_trials, "extension", beyond)
    if tuner.grid and any(axis.name == "lr" for axis in axes):
        grid_floor(tuning, config, tuner, score)
    if tuner.confirm_seeds:
        rescore_space(tuning, tuner, lambda trials: _retrain(
            tuning, trials, tuner.confirm_seeds,
            lambda specs: halve(specs, len(tuner.confirm_seeds), Fidelity(), score),  # never halved
            config))
    return tuning


def _retrain(tuning: ArmSpaceTuning, trials: Sequence[Trial], seeds: Sequence[int],
             score: Callable[[list[RunSpec]], Any], config: TrainConfig) -> None:
    """Train ``trials`` on ``seeds`` at their settings (a grid trial as the grid protocol
    trains it: ``config`` at its lr, so its runs are that protocol's cache entries) into their
    ``validation``, counting the steps."""
    specs = [RunSpec(seed, config.model_copy(update={"lr": trial.values["lr"]}) if trial.phase == "grid"
                     else apply_settings(config, tuning.axes, trial.values), label=f"trial {trial.number} seed {seed}")
             for trial in trials for seed in seeds]
    outcome = score(specs)
    tuning.steps_trained += outcome.steps_trained
    tuning.steps_asked += outcome.steps_asked
    for index, spec in enumerate(specs):
        trial = trials[index // len(seeds)]
        trial.validation[spec.seed] = outcome.values[index]
        if index in outcome.paths:
            trial.paths[spec.seed] = outcome.paths[index]
        if index in outcome.hits:
            trial.cached = (*trial.cached, spec.seed)


def rescore_space(tuning: ArmSpaceTuning, tuner: SpaceTuner, retrain: Callable[[list[Trial]], None]) -> None:
    """Re-score the arm's contenders (the module docstring's *choice*): ``retrain`` trains the
    given trials on ``tuner.confirm_seeds``; records ``rescored`` and ``rescoring``."""
    best = tuning.first_choice()
    pool = tuning.full_length((*tuning.trials, *tuning.grid_trials))
    means: dict[Any, float] = {t.number: tuning.first_mean(t) for t in pool}  # type: ignore[misc]
    noise = seed_noise(tuner.noise, [list(t.validation.values()) for t in pool], len(tuner.seeds))
    picked = contenders(means, best.number, noise.threshold, tuner.rescore_top)
    if len(picked) < 2:
        tuning.rescoring = rescoring_record(noise, tuner.rescore_top, [], picked, means, best.number, "trial", CLEAR)
        return
    by_number = {t.number: t for t in pool}
    tuning.rescore_seeds = tuner.confirm_seeds
    chosen = [by_number[number] for number in sorted(picked)]  # type: ignore[type-var]
    retrain(chosen)
    tuning.rescored = tuple(t.number for t in chosen)
    outcome = RESCORED if any(t.mean is not None for t in chosen) else ALL_DIVERGED
    tuning.rescoring = rescoring_record(noise, tuner.rescore_top, tuner.confirm_seeds, picked, means,
                                        best.number, "trial", outcome)


def axis_setting(config: TrainConfig, axis: ResolvedAxis) -> float | int:
    """The value ``config`` gives the axis's setting (an optimizer field: its config's value,
    else the component's default)."""
    if axis.axis.target == "train":
        return getattr(config, axis.axis.setting)
    if axis.axis.setting in config.optimizer.config:
        return config.optimizer.config[axis.axis.setting]
    spec = full_registry().get("optimizer", config.optimizer.name)
    return getattr(spec.make_config(config.optimizer.config), axis.axis.setting)


def grid_floor(tuning: ArmSpaceTuning, config: TrainConfig, tuner: SpaceTuner, score: Scorer) -> None:
    """``GRID_FLOOR``: the lr grid protocol's runs of this arm (``runner.tuning.tune_arm`` on
    ``tuner.grid``, extended once past an edge, no confirmation: the same runs, so the same
    cache entries, as ``--tune-grid``), recorded as the arm's grid trials after its Sobol
    trials, every other axis at the arm's own setting."""
    record = tune_arm(tuning.label, config, GridTuner(tuner.grid, tuner.seeds, fidelity=tuner.fidelity), score)
    tuning.grid = record
    others = {axis.name: axis_setting(config, axis) for axis in tuning.axes if axis.name != "lr"}
    cached = {(lr, seed) for lr, seed in record.cached}
    for setting in sorted(record.settings, key=lambda s: s.lr):
        values: dict[str, float | int] = {name: (setting.lr if name == "lr" else others[name])
                                          for name in (axis.name for axis in tuning.axes)}
        tuning.grid_trials.append(Trial(
            len(tuning.trials) + len(tuning.grid_trials), "grid", {}, {}, values,
            dict(setting.values), tuple(seed for seed in tuner.seeds if (setting.lr, seed) in cached),
            paths={seed: record.paths[(setting.lr, seed)] for seed in tuner.seeds
                   if (setting.lr, seed) in record.paths}, stopped_at=setting.stopped_at))


def chosen_config(config: TrainConfig, tuning: ArmSpaceTuning) -> TrainConfig:
    """``config`` at the arm's choice's settings (``ArmSpaceTuning.choice``)."""
    return apply_settings(config, tuning.axes, tuning.choice().values)


def _floor_record(tuning: ArmSpaceTuning, best: Trial, choice: Trial) -> dict[str, Any]:
    """What the grid floor found for one arm: the grid's best against the search's best on
    the tuning seeds, and which the arm kept."""
    assert tuning.grid is not None
    finite = tuning.full_length(tuning.grid_trials)  # on the tuning seeds (a re-scored trial holds more)
    grid_best = min(finite, key=lambda t: (tuning.first_mean(t), t.number)) if finite else None
    grid_mean, search_mean = (None if grid_best is None else tuning.first_mean(grid_best)), tuning.first_mean(best)
    return {
        "grid": tuning.grid.grid, "extended": tuning.grid.extended,
        "grid_best": None if grid_best is None else {"lr": float(grid_best.values["lr"]), "mean": grid_mean},
        "search_best": {"trial": best.number, "mean": search_mean},
        "held": grid_best is None or search_mean <= grid_mean,  # type: ignore[operator]
        "chosen_from": "grid" if choice.phase == "grid" else "search",
    }


SEQUENTIAL_SAMPLERS: dict[str, tuple[str, dict[str, Any]]] = {  # Optuna's name and settings
    "tpe": ("TPESampler", {"multivariate": True, "constant_liar": True}),
    "gp": ("GPSampler", {}),
}


def sampler_record(tuner: SpaceTuner) -> dict[str, Any]:
    """The artifact's ``tuning.sampler``: the Sobol design (today's record, unchanged under
    ``sobol``), and under a sequential sampler its name, settings, start and batch."""
    sobol = {"library": "optuna", "name": "QMCSampler", "qmc_type": "sobol", "scramble": True,
             "seed": tuner.sampler_seed, "storage": "in-memory"}
    if tuner.sampler == "sobol":
        return sobol
    name, options = SEQUENTIAL_SAMPLERS[tuner.sampler]
    return {"library": "optuna", "name": name, "sampler": tuner.sampler, **options,
            "seed": tuner.sampler_seed, "storage": "in-memory", "startup_trials": tuner.startup_trials,
            "batch": SEQUENTIAL_BATCH, "startup": sobol}


def _sequential_method(tuner: SpaceTuner) -> str:
    if tuner.sampler == "sobol":
        return ""
    name, options = SEQUENTIAL_SAMPLERS[tuner.sampler]
    said = "".join(f", {key.replace('_', ' ')}" for key, value in options.items() if value is True)
    return SEQUENTIAL.format(sampler=tuner.sampler, startup=tuner.startup_trials,
                             proposed=tuner.declared_trials - tuner.startup_trials, name=name,
                             seed=tuner.sampler_seed, options=said, batch=SEQUENTIAL_BATCH)


def space_tuning_block(tuner: SpaceTuner, metric: str, arms: dict[str, ArmSpaceTuning]) -> dict[str, Any]:
    """The artifact's top-level ``tuning`` block for space tuning (``protocol: space``;
    docs/ARTIFACTS.md): per arm its axes, every trial and the choice. Every trial is also a
    ``settings`` row (its lr, per-seed validation, mean, status), so readers of the grid
    protocol's block still read it."""
    block: dict[str, Any] = {
        "parameter": "space",
        "protocol": "space",
        "grid": [],
        "seeds": list(tuner.seeds),
        "metric": metric,
        "split": "validation",
        "selection": SELECTION.format(metric=metric)
                     + (CONFIRMATION.format(top=tuner.rescore_top) if tuner.confirm_seeds else ""),
        "method": METHOD.format(seed=tuner.sampler_seed, trials=tuner.trials) + _sequential_method(tuner)
                  + (GRID_FLOOR.format(grid=", ".join(f"{lr:.3g}" for lr in tuner.grid)) if tuner.grid else ""),
        "sampler": sampler_record(tuner),
        "trials": tuner.trials,
        "declared_trials": tuner.declared_trials,
        "extension_trials": tuner.extension_trials,
        "axes_requested": (PAPER if tuner.paper else FULL) if tuner.axes is None else list(tuner.axes),
        "extend_edges": tuner.extension_trials > 0,
        "confirm_seeds": list(tuner.confirm_seeds),
        "arms": {},
    }
    halving = tuner.fidelity.halving  # under full the block is what it always was
    if halving:
        block["fidelity"] = tuner.fidelity.record()
    for label, tuning in arms.items():
        best, choice = tuning.best(), tuning.choice()
        space = {}
        for axis in tuning.axes:
            extension = tuning.extension_range(axis.name)
            space[axis.name] = {
                "setting": axis.label, "low": axis.low, "high": axis.high, "scale": axis.axis.scale,
                "integer": axis.axis.integer, "relative_to": axis.axis.relative_to,
                "declared_low": axis.axis.low, "declared_high": axis.axis.high,
                "limit_low": axis.limit_low, "limit_high": axis.limit_high,
                "on_edge": tuning.on_edge.get(axis.name),
                "extended": tuning.extended.get(axis.name),
                "extension": None if extension is None else list(extension),
            }
        on_edge = (float(choice.values["lr"]) in (tuning.grid.grid[0], tuning.grid.grid[-1])
                   if choice.phase == "grid" and tuning.grid is not None
                   else bool(_edges(tuning.axes, choice, tuning.trials)))
        block["arms"][label] = {
            "settings": [
                {"lr": float(t.values["lr"]), "validation": {str(k): v for k, v in t.validation.items()},
                 "mean": t.mean, "status": setting_status(t.mean, t.stopped_at),
                 "extension": t.phase == "extension", "trial": t.number, "phase": t.phase,
                 "values": dict(t.values), "coordinates": dict(t.coordinates),
                 "sobol": dict(t.sobol), "cached_seeds": list(t.cached),
                 "paths": {str(seed): path for seed, path in t.paths.items()},
                 **({} if tuner.sampler == "sobol" or t.phase == "grid" else {"sampled_by": t.sampled_by}),
                 **({"stopped_at": t.stopped_at} if halving else {})}
                for t in (*tuning.trials, *tuning.grid_trials)
            ],
            "chosen": {k: float(v) for k, v in choice.values.items()},
            "chosen_trial": choice.number,
            "space": space,
            "extended": None,  # the grid protocol's one direction; per axis in space.*.extended
            "chosen_on_edge": on_edge,
            "confirmed": sorted({float(t.values["lr"]) for t in (*tuning.trials, *tuning.grid_trials)
                                 if t.number in tuning.rescored}),
            **({} if tuning.rescoring is None else {"rescoring": tuning.rescoring}),
            **({} if tuning.grid is None else {"grid_floor": _floor_record(tuning, best, choice)}),
            **({"rungs": tuning.rungs + ([{"grid": True, **rung} for rung in tuning.grid.rungs]
                                         if tuning.grid is not None else [])} if halving else {}),
        }
    return block
