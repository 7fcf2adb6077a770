"""The scale ladder: one tuned, paired comparison per rung of the size dial, and what the
rungs say together.

``run_ladder(LadderRequest(name="rope", rungs=[-2, -1, 0, 1]))`` runs, for each rung in
ascending order, the reproduction ``reproduce`` would run with ``--rung`` (both arms tuned on
one shared learning-rate grid under the tuning seeds, then trained under the report seeds;
every run through the shared arm runner and the arm cache), writes each rung's artifact into
the ladder's folder, and then the ladder file: per arm a loss-vs-compute fit, the per-rung
change with its interval, the trend of the gap with compute, the compute multiplier, a
projection one decade past the top rung (labelled an extrapolation), the ladder class and
the rung-to-rung transfers (``eval.scaling``), with two plots and a README.

**Tuning budget.** Every arm gets the same grid at a rung. The lowest ``full_grid_rungs``
rungs use the default 5-point grid (lr/3 .. 3·lr around quick's 3e-3). Above them a
learning-rate rule centres a smaller grid: per arm, log(chosen lr) is fitted linearly on
log(parameters) over the rungs done so far (one rung: its choice is kept); each prediction is
snapped to the default grid's lattice (3e-3 * 3^(k/2): steps of sqrt(3), the default grid's
own points bit for bit), and the grid runs from one step below the lower arm's point to one
step above the higher arm's: 3 points when both arms predict the same lr. On the lattice,
ladders that share an arm (llama_modern is the baseline of muon, qk_norm, value_residual…)
share its tuning runs wherever their grids overlap. A best on the
grid's edge still extends it (``runner.tuning``), so the rule narrows the search but never
forces a choice at an edge. The ladder file records each rung's grid and how it was chosen.
Under μP or CompleteP (``--param``) the rule does not fit a trend over sizes: each arm's
prediction is its choice at the highest rung done (the parametrization's claim is that the best
lr does not move with width), so the lowest rungs tune and the rungs above verify the
transferred lr with one lattice step either side. Every ladder file records each arm's chosen
lr per rung in lattice steps, its drift, and the compute the rule's grids saved against the
full grid (``lr_transfer``).

**Context.** The window is quick's 64 tokens at every rung unless ``context="grow"``: then
``runner.size.context_length(rung)`` (64 up to rung 0, x sqrt(2) per rung above), so that
position components are compared at longer contexts as the model grows.

**Seeds.** The report seeds are the same at every rung; ``top_seeds`` takes only the first k
at the top rung (a CPU's budget; the ladder file says so, with the noise floor of the rung
below). Tuning seeds are disjoint from report seeds, as in every reproduction.

**Resuming.** Each finished run is in the arm cache, whose key covers the code the runs reach
and not this module, the fits or the plots; a ladder killed and run again retrains no run
that had finished (a rung in progress loses only the ``train_many`` call it was in).

**Sharing** (``storage``): the rungs become a queue in an Optuna study on an RDB storage
(SQLite, or PostgreSQL for several machines; ``work_queue``), and every worker running the
same request against it takes rungs from it: each rung is run by one worker, a rung whose lr
rule needs lower rungs waits until they are complete, a worker killed mid-rung is noticed by
heartbeats and its rung run again (from the arm cache of that machine, as far as it got),
and the worker that finds every rung complete writes the ladder folder from what the rungs'
trials store (their records and their artifacts' exact bytes), so it needs no files from
other machines. Without ``storage`` nothing of this runs.

**Degenerate rungs.** A rung with one attention head cannot show what a head-dependent slot
(``eval.scaling.HEAD_DEPENDENT_SLOTS``: position, attention) does; when the arms differ in
such a slot (read from the rungs' genomes, a whole-genome comparison included), that rung is
left out of the across-rung quantities (``include_degenerate`` keeps it) and the ladder file
says so. ``refit_ladder`` recomputes a ladder file's across-rung statistics from its stored
per-seed values under this rule, without training.

**Publishing** (``publish``): the tree must be clean when the ladder starts; its code state
is read once then and recorded in every rung's provenance and the ladder file's, since the
rungs' own artifacts make the tree dirty as they are written. Files go to
``docs/ladders/<paper>-<name>[-vs-<other>]/`` (else ``runs/ladders/...``).

Public API: ``LadderRequest``, ``LadderPlan``, ``RungPlan``, ``SharedLadder``, ``RungEvent``,
``run_ladder``, ``run_shared_ladder``, ``lr_rule_grid``, ``lattice_lr``, ``remaining_seconds``,
``peak_memory_mb``, ``ladder_file``, ``rung_result``, ``degenerate_rungs``, ``refit_ladder``,
``DEFAULT_RUNGS``, ``ladder_folder``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from llmevo.artifacts.io import (
    check_output_dir,
    staged_folder,
    write_bytes_atomic,
    write_json_atomic,
)
from llmevo.artifacts.ladder import (
    DegenerateRecord,
    FitRecord,
    IntervalRecord,
    LadderFile,
    LeaveOneOutRecord,
    LrTransferRecord,
    RungRecord,
    TrendRecord,
    arms_differ_in,
    artifact_heads,
)
from llmevo.artifacts.provenance import REPO_ROOT, CodeState, collect_provenance
from llmevo.artifacts.schema import SCHEMA_VERSION, ReproductionArtifact, load_artifact
from llmevo.digests import sha256_file
from llmevo.errors import ConfigError
from llmevo.eval.scaling import (
    HEAD_DEPENDENT_SLOTS,
    TREND_METHOD,
    Interval,
    LadderStatistics,
    RungResult,
    TrendFit,
    ladder_statistics,
)
from llmevo.experiments.genome_comparison import read_genome
from llmevo.experiments.pipeline import ReproductionRequest, code_state, plan_arms, reproduce
from llmevo.experiments.plans import ReproductionPlan
from llmevo.experiments.sections import (
    LADDER_REFUSED,
    LaunchSection,
    RunSection,
    SizeSection,
    TrainingSection,
    TuningSection,
)
from llmevo.registry import SectionedRequest, Seeds
from llmevo.reports.ladder import write_ladder_report
from llmevo.reports.readme import against_slug
from llmevo.runner.presets import Preset, get_preset
from llmevo.runner.size import REFERENCE_PRESET, RUNGS, TOKENS_PER_PARAMETER, Size, context_length
from llmevo.runner.tuning import (
    DEFAULT_CONFIRM,
    DEFAULT_REPORT_SEEDS,
    DEFAULT_SPAN,
    default_grid,
)
from llmevo.train.device import accelerator_name, resolve_device
from llmevo.train.trainer import Progress

DEFAULT_RUNGS = (-3, -2, -1, 0, 1)
FULL_GRID_RUNGS = 2
FULL_GRID_RULE = "full default grid (lr/3 .. 3 lr, 5 points)"


def lattice_lr(base_lr: float, step: int) -> float:
    """The ``step``-th point of the default grid's lattice around ``base_lr``: base * 3**(step/2),
    computed as ``default_grid`` computes its points, so that a lattice point equals the
    default grid's value bit for bit (the arm cache keys runs by their exact learning rate)."""
    return base_lr * DEFAULT_SPAN ** (step / 2.0)


def lattice_step(base_lr: float, lr: float) -> int:
    """The lattice step nearest to ``lr`` (in log space)."""
    return round(2.0 * math.log(lr / base_lr) / math.log(DEFAULT_SPAN))


def lr_rule_grid(parameters: int, history: dict[str, Sequence[tuple[int, float]]],
                 base_lr: float, transfer: bool = False) -> tuple[list[float], dict]:
    """The grid the learning-rate rule gives a rung of ``parameters``, from each arm's
    (parameters, chosen lr) at the rungs done (see the module docstring), and the rule's record.
    Predictions are snapped to the default grid's lattice (``lattice_lr``), so that two ladders
    whose grids overlap train the same settings and share those runs through the arm cache.
    ``transfer`` (a μP or CompleteP ladder): each arm's prediction is its choice at the highest
    rung done, not a fit across sizes: the parametrization's claim is that the best lr does not
    move with width, and the grid one lattice step either side verifies it."""
    from scipy.stats import linregress

    predictions, fits = {}, {}
    for arm, points in history.items():
        if not points:
            raise ConfigError(f"the learning-rate rule needs a finished rung for the {arm} arm")
        if transfer:
            top = max(points, key=lambda point: point[0])
            predictions[arm] = top[1]
            fits[arm] = {"form": "transferred: the choice at the highest rung done", "predicted_lr": top[1]}
            continue
        if len({n for n, _ in points}) < 2:
            predictions[arm] = points[-1][1]
            fits[arm] = {"form": "the lower rung's choice", "predicted_lr": predictions[arm]}
            continue
        fit = linregress([math.log(n) for n, _ in points], [math.log(lr) for _, lr in points])
        predictions[arm] = math.exp(fit.intercept + fit.slope * math.log(parameters))
        fits[arm] = {"form": "log lr = c + k log N (linregress over the rungs done)",
                     "c": float(fit.intercept), "k": float(fit.slope), "predicted_lr": predictions[arm]}
    steps = [lattice_step(base_lr, lr) for lr in predictions.values()]
    grid = [lattice_lr(base_lr, step) for step in range(min(steps) - 1, max(steps) + 2)]
    return grid, {"rule": "transferred learning rate" if transfer else "learning-rate rule", "arms": fits,
                  "lattice": f"{base_lr:g} * 3^(k/2), k = {min(steps) - 1}..{max(steps) + 1}"}


class LadderRequest(SectionedRequest):
    """A ladder: ``name`` against its ablation (or ``against``) at each of ``rungs``, tuned
    and paired. ``seeds``: report seeds at every rung (``top_seeds``: only the first k at the
    top rung). ``preset`` must be quick (the size dial scales it; a ``Preset`` named quick with
    other data or evaluation budgets serves tests). ``full_grid_rungs``: how many of the lowest
    rungs are tuned on the full default grid before the learning-rate rule takes over (0
    turns the rule off: every rung gets the full grid). ``out``: the ladder folder.
    ``storage`` (a SQLAlchemy URL): the ladder is a queue of rungs in an Optuna study there
    (``study``, else a name derived from the description), shared by every worker that runs
    the same request against it (``work_queue``); ``heartbeat`` (default 5 s),
    ``grace_period`` (20 s) and ``wait_timeout`` (24 h) apply to it.

    Sections (``experiments.sections``, each field also flat): ``run``, handed whole to every
    rung; ``tuning`` (``tune_seeds``, ``tune_confirm``, ``tune_noise``, ``tune_probe``: every rung
    is tuned, its grid the ladder's, probed above its top unless ``tune_probe`` is False); ``size`` (``tokens_per_parameter`` replaces quick's ratio, about 7.26, at every
    rung; ``param`` and ``match`` apply at every rung, ``match="flops"`` giving each rung's
    method arm the steps that spend its baseline's training FLOPs, the folder ``-flops``; the
    rungs and ``context`` choose the rest)."""

    refused: ClassVar[dict[str, str]] = LADDER_REFUSED  # declared torch-free: ladder lists no refused option

    name: str
    against: str | None = None
    genome: Path | None = None  # the method arm is this genome (``experiments.genome_comparison``)
    rungs: list[int] = Field(default_factory=lambda: list(DEFAULT_RUNGS))
    seeds: Seeds = Field(default_factory=lambda: list(DEFAULT_REPORT_SEEDS))
    top_seeds: int | None = Field(default=None, ge=2)
    full_grid_rungs: int = Field(default=FULL_GRID_RUNGS, ge=0)
    context: Literal["fixed", "grow"] = "fixed"  # grow: the window grows with the rung (context_length)
    margin: float = Field(default=1.0, gt=0)
    preset: str | Preset = "quick"
    resamples: int = Field(default=2000, ge=1)
    include_degenerate: bool = False  # keep a one-head rung in the fits of a head-dependent slot
    out: Path | None = None
    storage: str | None = None
    study: str | None = None
    heartbeat: int | None = Field(default=None, ge=1)
    grace_period: int | None = Field(default=None, ge=1)
    wait_timeout: float | None = Field(default=None, gt=0)
    run: RunSection
    train: TrainingSection = Field(default_factory=TrainingSection)
    tuning: TuningSection = Field(default_factory=TuningSection)
    size: SizeSection = Field(default_factory=SizeSection)
    launch: LaunchSection = Field(default_factory=LaunchSection)

    @field_validator("preset")
    @classmethod
    def _preset(cls, preset: str | Preset) -> str | Preset:
        named = preset if isinstance(preset, str) else preset.name
        if named != REFERENCE_PRESET:
            raise ConfigError(f"preset {named}: a ladder's rungs scale the {REFERENCE_PRESET} preset (rung 0 is "
                              f"{REFERENCE_PRESET}); drop the preset, or run one comparison with "
                              f"`llmevo reproduce NAME --preset {named}`")
        return preset

    @field_validator("rungs")
    @classmethod
    def _rungs(cls, rungs: list[int]) -> list[int]:
        unknown = [r for r in rungs if r not in RUNGS]
        if unknown:
            raise ConfigError(f"--rungs: unknown rung {unknown[0]}; known: {min(RUNGS)}..{max(RUNGS)}")
        if len(set(rungs)) != len(rungs) or len(rungs) < 2:
            raise ConfigError(f"--rungs {','.join(map(str, rungs))}: a ladder needs at least 2 distinct rungs")
        return sorted(rungs)

    @property
    def tune_confirm(self) -> int:
        return DEFAULT_CONFIRM if self.tuning.tune_confirm is None else self.tuning.tune_confirm

    def rung_request(self, index: int, rung: int, folder: Path) -> ReproductionRequest:
        """The reproduction of rung ``rung`` (the ``index``-th): this ladder's run section,
        tuning seeds, seeds and margin at the rung's size, its file in ``folder``; its grid is
        bound when it runs."""
        top = index == len(self.rungs) - 1
        seeds = self.seeds[: self.top_seeds] if top and self.top_seeds else list(self.seeds)
        command = f"{self.run.command or 'python: llmevo.experiments.run_ladder'} (rung {rung})"
        return ReproductionRequest(
            name=self.name, against=self.against, genome=self.genome, preset=self.preset, seeds=seeds,
            margin=self.margin, report=False, out=folder / f"rung{rung}.json",
            run=self.run.model_copy(update={"command": command}), train=self.train,
            tuning=self.tuning.model_copy(update={"tune": True}),
            size=self.size.model_copy(update={
                "rung": rung, "seq_len": context_length(rung) if self.context == "grow" else None}))

    def plan(self) -> LadderPlan:
        """Every rung's size and plan checked before any work (an unknown name or
        ``against``, a size a component cannot take, a ratio that gives zero steps); the
        comparison is planned once for every rung, each rung's size resolved once."""
        comparison = plan_arms(self.name, self.against, self.genome)
        if comparison.spec.slot == "post_training":
            raise ConfigError(f"'{self.name}' is a post-training method: its arms share one pretraining "
                              "and are not tuned, so a tuned ladder does not apply")
        if self.top_seeds is not None and self.top_seeds > len(self.seeds):
            raise ConfigError(f"--top-seeds {self.top_seeds}: more than the {len(self.seeds)} report seeds")
        shared = self._shared(comparison.against)
        paper = comparison.spec.manifest.paper
        folder = self.out or ladder_folder(
            f"{paper.arxiv_id}-{comparison.spec.name}" if paper else comparison.spec.name,
            comparison.against, self.run.publish, self.context, self.size.param, self.size.match)
        check_output_dir(folder, "--out")
        rungs = []
        for index, rung in enumerate(self.rungs):
            request = self.rung_request(index, rung, folder)
            size = request.resolved_size
            assert size is not None
            rungs.append(RungPlan(rung, size, request.plan(comparison),
                                  full_grid=index < self.full_grid_rungs or self.full_grid_rungs == 0))
        self._check_fitted(rungs)
        return LadderPlan(request=self, folder=folder, rungs=rungs, against=comparison.against, shared=shared)

    def _check_fitted(self, rungs: list[RungPlan]) -> None:
        """The degenerate rungs (one head, arms differing in a head-dependent slot) are known
        from the plan: a ladder left with fewer than 2 fitted rungs is refused before any
        training, in the words the fit would refuse it after (``eval.scaling``)."""
        baseline, method = rungs[0].plan.comparison.arms
        dependent = [slot for slot in HEAD_DEPENDENT_SLOTS
                     if getattr(baseline.model, slot, None) != getattr(method.model, slot, None)]
        left_out = [] if self.include_degenerate or not dependent else \
            [rung.rung for rung in rungs if rung.size.geometry.n_heads == 1]
        if len(rungs) - len(left_out) < 2:
            raise ConfigError(f"a ladder needs at least 2 fitted rungs, got {len(rungs) - len(left_out)} "
                              f"(rungs {left_out} left out as degenerate: one attention head, and the arms "
                              f"differ in {', '.join(dependent)}; add a rung, or --include-degenerate)")

    def description(self, against: str | None) -> dict[str, Any]:
        """What makes two requests the same ladder (a shared ladder's study stores it): the
        comparison, rungs, seeds, tuning, budget and statistics, and the report runs' validation
        curve (``val_every``: their artifacts differ with it); not where or how it runs."""
        preset = self.preset if isinstance(self.preset, str) else self.preset.model_dump(mode="json")
        genome = {} if self.genome is None else {"genome": read_genome(self.genome)[0].hash()}
        return {"kind": "ladder", "name": self.name, "against": against, **genome, "rungs": list(self.rungs),
                "seeds": list(self.seeds),
                "top_seeds": self.top_seeds, "tune_seeds": list(self.tuning.tune_seeds),
                "tune_confirm": self.tune_confirm, "full_grid_rungs": self.full_grid_rungs,
                "tokens_per_parameter": self.size.tokens_per_parameter, "margin": self.margin,
                "resamples": self.resamples, "preset": preset, "context": self.context,
                **({"include_degenerate": True} if self.include_degenerate else {}),
                **({} if self.tuning.tune_noise is None else {"tune_noise": self.tuning.tune_noise}),
                **({} if self.tuning.tune_probe is None else {"tune_probe": self.tuning.tune_probe}),
                **({} if self.run.val_every is None else {"val_every": self.run.val_every}),
                **({"param": self.size.param} if self.size.param != "standard" else {}),
                **({"match": self.size.match} if self.size.match != "tokens" else {}),
                **({"train": given} if (given := self.train.model_dump(exclude_none=True)) else {})}

    def _shared(self, against: str | None) -> SharedLadder | None:
        self.launch.check(self.storage)
        if self.storage is None:
            given = {"--study": self.study, "--heartbeat": self.heartbeat,
                     "--grace-period": self.grace_period, "--wait-timeout": self.wait_timeout}
            for option, value in given.items():
                if value is not None:
                    raise ConfigError(f"{option} applies to --storage only")
            return None
        from llmevo.runner.storage import check_storage_url

        check_storage_url(self.storage)
        description = self.description(against)
        digest = hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:12]
        name = self.study or "ladder-" + self.name + (
            f"-vs-{against_slug(against)}" if against is not None else "") + f"-{digest}"
        return SharedLadder(url=self.storage, study_name=name, description=description,
                            heartbeat=self.heartbeat or 5,
                            grace_period=self.grace_period or 20, wait_timeout=self.wait_timeout or 86_400.0)


def ladder_folder(name: str, against: str | None, publish: bool, context: str = "fixed",
                  param: str = "standard", match: str = "tokens") -> Path:
    """``docs/ladders/<paper>-<name>[-vs-<other>][-context-grow][-mup][-flops]`` when published,
    else under ``runs/ladders``."""
    slug = (name + (f"-vs-{against_slug(against)}" if against is not None else "")
            + ("-context-grow" if context == "grow" else "")
            + (f"-{param}" if param != "standard" else "")
            + (f"-{match}" if match != "tokens" else ""))
    return (Path("docs/ladders") if publish else Path("runs/ladders")) / slug


@dataclass(frozen=True)
class RungPlan:
    rung: int
    size: Size
    plan: ReproductionPlan  # planned once; its grid (the full grid or the rule's) bound when it runs
    full_grid: bool


@dataclass(frozen=True)
class SharedLadder:
    """Where a shared ladder's queue lives and how its workers watch each other."""

    url: str
    study_name: str
    description: dict[str, Any]
    heartbeat: int  # seconds
    grace_period: int  # seconds; a rung silent this long is failed and retried
    wait_timeout: float  # seconds a worker waits for other workers' rungs


@dataclass(frozen=True)
class LadderPlan:
    request: LadderRequest
    folder: Path
    rungs: list[RungPlan]
    against: str | None
    shared: SharedLadder | None = None


@dataclass(frozen=True)
class RungEvent:
    """What a progress display needs about a rung: it starts (``artifact`` None) or it is done."""

    index: int
    total: int
    rung: int
    parameters: int
    compute: float
    elapsed_seconds: float  # since the ladder started
    eta_seconds: float | None  # for the rest of the ladder (``remaining_seconds``); None at first
    artifact: ReproductionArtifact | None = None
    waiting_for: tuple[int, ...] = ()  # a shared ladder's rung waiting for other workers' rungs


def rung_result(record: RungRecord) -> RungResult:
    """What the across-rung statistics read from one rung's record."""
    return RungResult(record.rung, record.compute_6nd, tuple(record.baseline), tuple(record.method),
                      record.classification)


def interval_record(interval: Interval) -> IntervalRecord:
    return IntervalRecord.of(interval.value, interval.low, interval.high)


def degenerate_rungs(records: Sequence[RungRecord], slots: Sequence[str]) -> list[int]:
    """The rungs with one attention head, when the arms differ in a head-dependent slot."""
    if not set(slots) & HEAD_DEPENDENT_SLOTS:
        return []
    return [r.rung for r in records if r.n_heads == 1]


def _degenerate_record(rungs: list[int], slots: Sequence[str], excluded: bool) -> DegenerateRecord | None:
    if not rungs:
        return None
    dependent = ", ".join(s for s in slots if s in HEAD_DEPENDENT_SLOTS)
    return DegenerateRecord(
        rungs=rungs, excluded=excluded,
        reason=f"one attention head: the arms differ in the head-dependent slot(s) {dependent}, which "
               "a one-head model cannot show (no heads to differ across, one head of d_model width)")


def trend_record(statistics: LadderStatistics) -> TrendRecord:
    fit = statistics.trend_fit
    assert fit is not None

    def record(of: TrendFit) -> IntervalRecord:
        return IntervalRecord.of(of.slope, of.low, of.high)

    refits = [LeaveOneOutRecord(left_out=rung, slope=record(refit), df=refit.df, trend=refit.trend,
                                sign_flip=bool(math.copysign(1, refit.slope) != math.copysign(1, fit.slope)),
                                class_flip=refit.df >= 1 and refit.trend != fit.trend)
              for rung, refit in statistics.leave_one_out]
    return TrendRecord(slope=record(fit), df=fit.df, tau2=fit.tau2 if math.isfinite(fit.tau2) else None,
                       weights=list(fit.weights), rungs=list(fit.rungs), trend=fit.trend,
                       seed_only_trend=statistics.seed_only_trend, leave_one_out=refits,
                       unstable=statistics.trend == "unstable", method=TREND_METHOD)


def across_rung_records(statistics: LadderStatistics) -> dict[str, Any]:
    """The across-rung fields of a ladder file, as records: the fits, the gap's slope, the
    trend of record and its rung-level fit, the multiplier, the projection, the class, the
    transfers and the bootstrap (every ladder's; ``external_ladder`` writes the same)."""
    return {
        "fits": {arm: FitRecord(form=fit.form, a=fit.a, alpha=fit.alpha, l_inf=fit.l_inf,
                                alpha_interval=interval_record(statistics.alpha[arm]), note=fit.note)
                 for arm, fit in statistics.fits.items()},
        "gap_slope_per_decade": interval_record(statistics.gap_slope), "trend": statistics.trend,
        "compute_multiplier": interval_record(statistics.compute_multiplier),
        "projection": {"compute": statistics.projection_compute,
                       "delta_percent": interval_record(statistics.projection).model_dump(),
                       "label": "extrapolation: the two fits evaluated one decade past the top rung's "
                                "compute, not a measurement"},
        "ladder_class": statistics.ladder_class, "transfers": statistics.transfers,
        "bootstrap": {"resamples": statistics.resamples, "seed": statistics.bootstrap_seed,
                      "method": "paired percentile bootstrap over each rung's report seeds, 95%"},
        "trend_fit": trend_record(statistics),
    }


def ladder_file(*, name: str, against: str | None, arm_names: dict[str, str], margin_percent: float,
                context: str, tokens_per_parameter: float,
                rungs: list[RungRecord], statistics: LadderStatistics, provenance: dict,
                top_seeds_note: str | None, wall_seconds: float, slots: list[str] | None = None,
                degenerate: DegenerateRecord | None = None,
                lr_transfer: LrTransferRecord | None = None) -> LadderFile:
    """The ladder file from its rungs' records and their across-rung statistics."""
    return LadderFile(
        kind="ladder", schema_version=SCHEMA_VERSION, name=name, against=against, arm_names=arm_names,
        metric=rungs[0].metric, margin_percent=margin_percent, context=context, tokens_per_parameter=tokens_per_parameter,
        rungs=rungs, **across_rung_records(statistics),
        top_seeds_note=top_seeds_note, wall_seconds=wall_seconds, provenance=provenance, slots=slots,
        degenerate=degenerate, lr_transfer=lr_transfer)


def _statistics(records: list[RungRecord], slots: list[str], include_degenerate: bool, resamples: int,
                seed: int = 0) -> tuple[LadderStatistics, DegenerateRecord | None]:
    """The across-rung statistics with the degenerate rungs left out (unless included)."""
    flagged = degenerate_rungs(records, slots)
    excluded = [] if include_degenerate else flagged
    statistics = ladder_statistics([rung_result(r) for r in records], resamples=resamples, seed=seed,
                                   exclude=excluded)
    return statistics, _degenerate_record(flagged, slots, excluded=bool(excluded))


def refit_ladder(ladder: LadderFile, folder: Path, include_degenerate: bool = False,
                 command: str | None = None, repo_root: Path = REPO_ROOT) -> LadderFile:
    """``ladder``'s across-rung statistics recomputed from its stored per-seed values under
    the current rule (the rung-level trend, leave-one-rung-out, degenerate rungs), nothing
    trained. A ladder file written before records no heads or slots: they are read from its
    rungs' artifacts in ``folder``, each checked against the sha256 the ladder file names.
    With ``command`` the provenance gains a ``refit`` entry (the command, the rule, the code
    commit of ``repo_root`` and whether it was dirty outside ``docs/ladders``)."""
    records = list(ladder.rungs)
    slots = ladder.slots
    if slots is None or any(r.n_heads is None for r in records):
        found: list[str] = []
        for index, record in enumerate(records):
            path = Path(folder) / record.artifact
            if not path.is_file():
                raise ConfigError(f"{path}: rung {record.rung}'s artifact is missing; the ladder file "
                                  "records no heads or slots to refit without it")
            if sha256_file(path) != record.artifact_sha256:
                raise ConfigError(f"{path}: does not match the sha256 the ladder file records for rung "
                                  f"{record.rung}")
            artifact = load_artifact(path)
            if not isinstance(artifact, ReproductionArtifact):
                raise ConfigError(f"{path}: not a reproduction artifact")
            records[index] = record.model_copy(update={"n_heads": artifact_heads(artifact)})
            found += [slot for slot in arms_differ_in(artifact) if slot not in found]
        slots = slots if slots is not None else found
    statistics, degenerate = _statistics(records, slots, include_degenerate,
                                         int(ladder.bootstrap["resamples"]), int(ladder.bootstrap["seed"]))
    provenance = dict(ladder.provenance)
    if command is not None:
        from llmevo.artifacts.provenance import git_state

        commit, dirty = git_state(repo_root, ignore=Path("docs/ladders"))
        provenance["refit"] = {"command": command, "rule": TREND_METHOD, "code_commit": commit, "code_dirty": dirty,
                               "from": "the per-seed values stored in this file; nothing retrained"}
    return ladder_file(
        name=ladder.name, against=ladder.against, arm_names=dict(ladder.arm_names),
        margin_percent=ladder.margin_percent, context=ladder.context,
        tokens_per_parameter=ladder.tokens_per_parameter, rungs=records, statistics=statistics,
        provenance=provenance, top_seeds_note=ladder.top_seeds_note, wall_seconds=ladder.wall_seconds,
        slots=slots, degenerate=degenerate,
        lr_transfer=ladder.lr_transfer or _lr_transfer_of(records, Path(folder)))


def _lr_transfer_of(records: Sequence[RungRecord], folder: Path) -> LrTransferRecord:
    """A ladder written before the ``lr_transfer`` block: its rungs' chosen lrs and grids are
    in the file; the lattice is quick's lr (every ladder's), the parametrization is the top
    rung's genome's (standard where the genome names none or its artifact is not there)."""
    base_lr = get_preset("quick").train.lr
    parametrization = "standard"
    path = folder / records[-1].artifact
    if path.is_file():
        genome = load_artifact(path).baseline.genome or {}
        parametrization = (genome.get("model") or {}).get("parametrization") or "standard"
    return lr_transfer_record(records, base_lr, parametrization, len(default_grid(base_lr)))


def peak_memory_mb() -> float:
    """The largest resident set so far of this process and of its finished workers, in MiB
    (``getrusage``; Linux reports kilobytes): a rung's figure is the peak up to its end."""
    import resource

    return max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024


def remaining_seconds(done: Sequence[tuple[float, float]], remaining: Sequence[float]) -> float | None:
    """The time the rungs of compute ``remaining`` will take, from the (compute, seconds) of
    the rungs ``done``: from two on, a line ``seconds = fixed + rate * compute`` (least
    squares); None before. A rung's evaluation and set-up cost about the same at every size,
    so one rung cannot split its time into the two: scaled by compute alone it overestimates
    the upper rungs by orders of magnitude (rung -3's 7 minutes, most of them evaluation, made
    a 4-rung ladder's ETA 940 minutes), and taken as fixed it underestimates them."""
    if len(done) < 2:
        return None
    import numpy as np

    x, y = np.array([c for c, _ in done]), np.array([t for _, t in done])
    rate, fixed = np.polyfit(x, y, 1)
    if rate <= 0:
        return float(np.mean(y / x)) * sum(remaining)
    return float(sum(max(0.0, fixed) + rate * c for c in remaining))


def _finished_rung(trial: Any) -> str | None:
    """A finished rung's part of the launched ladder's progress line: its class and change."""
    record = trial.user_attrs.get(RECORD_ATTR)
    if not isinstance(record, dict):
        return None
    return f"rung {record.get('rung')} {record.get('classification')} {record.get('delta_percent', 0.0):+.2f}%"


def run_ladder(request: LadderRequest | LadderPlan, progress: Progress | None = None,
               on_rung: Callable[[RungEvent], None] | None = None,
               on_status: Callable[[str], None] | None = None) -> LadderFile:
    """Run every rung (ascending), then write the ladder file, plots and README into the
    ladder's folder; return the ladder file. ``progress`` receives training steps;
    ``on_rung`` a ``RungEvent`` as each rung starts and ends (and, on a shared ladder, when a
    rung waits for other workers' rungs). With ``storage`` the rungs are shared with other
    workers (``run_shared_ladder``); with a launcher too, launched jobs are those workers
    (``experiments.launcher``; ``on_status`` gets the jobs' states) and this process waits."""
    plan = request.plan() if isinstance(request, LadderRequest) else request
    ask = plan.request
    ask.run.prologue()  # a published ladder: a clean tree before the first rung writes
    if ask.launch.launcher is not None:  # the rungs' workers are launched jobs; this process waits
        from llmevo.experiments.launcher import job_folder, launch
        from llmevo.experiments.work_queue import queue_progress

        shared = plan.shared
        assert shared is not None  # a launcher needs --storage (LaunchSection.check)
        labels = {rung.rung: f"rung {rung.rung}" for rung in plan.rungs}

        def describe() -> str | None:
            return queue_progress(shared.url, shared.study_name, labels, "rung", _finished_rung)

        return launch(functools.partial(run_ladder, ask.updated(launch={})), ask.launch,
                      job_folder(ask.launch, plan.folder), f"llmevo-ladder-{plan.folder.name}", on_status,
                      describe)
    code = code_state(plan.rungs[0].plan)
    if plan.shared is not None:
        return run_shared_ladder(plan, code, progress, on_rung)
    started = time.perf_counter()
    history: dict[str, list[tuple[int, float]]] = {"baseline": [], "method": []}
    records: list[RungRecord] = []
    timings: list[tuple[float, float]] = []  # (compute, seconds) of each finished rung
    for index, rung in enumerate(plan.rungs):
        elapsed = time.perf_counter() - started
        eta = remaining_seconds(timings, [r.size.compute for r in plan.rungs[index:]])
        if on_rung is not None:
            on_rung(RungEvent(index, len(plan.rungs), rung.rung, rung.size.parameters, rung.size.compute,
                              elapsed, eta))
        artifact, record = _run_rung(plan, rung, history, code, progress)
        arm_names = {"baseline": artifact.baseline.name, "method": artifact.method.name}
        for arm in ("baseline", "method"):
            history[arm].append((rung.size.parameters, record.chosen_lr[arm]))
        records.append(record)
        timings.append((rung.size.compute, record.wall_seconds))
        if on_rung is not None:
            elapsed = time.perf_counter() - started
            on_rung(RungEvent(index, len(plan.rungs), rung.rung, rung.size.parameters, rung.size.compute,
                              elapsed, remaining_seconds(timings, [r.size.compute for r in plan.rungs[index + 1:]]),
                              artifact))
    return _write_ladder(plan, records, arm_names, code, time.perf_counter() - started)


def _run_rung(plan: LadderPlan, rung: RungPlan, history: dict[str, list[tuple[int, float]]],
              code: CodeState, progress: Progress | None) -> tuple[ReproductionArtifact, RungRecord]:
    """One rung's tuned reproduction on the full grid or the lr rule's (from ``history``: each
    arm's (parameters, chosen lr) at the rungs below, ascending), and its record."""
    base_lr = rung.size.preset.train.lr
    if rung.full_grid or not history["baseline"]:
        grid, rule = default_grid(base_lr), {"rule": FULL_GRID_RULE}
    else:
        grid, rule = lr_rule_grid(rung.size.parameters, history, base_lr,
                                  transfer=transfers_lr(rung.plan))
    rung_started = time.perf_counter()
    artifact = reproduce(rung.plan.with_grid(grid), progress, code=code)
    wall = time.perf_counter() - rung_started
    assert artifact.tuning is not None, "ladder rungs are tuned"
    return artifact, RungRecord.of(rung.rung, artifact, plan.folder / f"rung{rung.rung}.json",
                                   grid=grid, rule=rule, wall_seconds=wall, peak_memory_mb=peak_memory_mb())


def transfers_lr(plan: ReproductionPlan) -> bool:
    """Whether a rung's arms are parametrized so that the best learning rate should transfer
    across width (μP, CompleteP): then the rule above the full-grid rungs transfers the lower
    rungs' choice instead of fitting a trend over sizes."""
    return all(arm.model.parametrization != "standard" for arm in plan.comparison.arms)


def lr_transfer_record(records: Sequence[RungRecord], base_lr: float, parametrization: str,
                       full_grid_points: int) -> LrTransferRecord:
    """How each arm's chosen lr moved across the rungs (lattice steps of ``lattice_lr`` around
    ``base_lr``; drift: the highest step minus the lowest) and what the rule saved: the tuning
    runs the rungs above the full-grid ones trained against the runs ``full_grid_points``
    would have cost there, each weighted by the rung's compute (a run's cost grows with it)."""
    steps = {arm: [lattice_step(base_lr, record.chosen_lr[arm]) for record in records]
             for arm in ("baseline", "method")}
    ruled = [record for record in records if record.grid_rule.get("rule") != FULL_GRID_RULE]
    spent = sum(len(record.grid) * record.compute_6nd for record in ruled)
    full = sum(full_grid_points * record.compute_6nd for record in ruled)
    return LrTransferRecord(
        parametrization=parametrization, lattice=f"{base_lr:g} * 3^(k/2)", steps=steps,
        drift_steps={arm: max(values) - min(values) for arm, values in steps.items()},
        ruled_rungs=[record.rung for record in ruled],
        grid_points={str(record.rung): len(record.grid) for record in records},
        saved_share=None if not ruled else 1.0 - spent / full)


def _write_ladder(plan: LadderPlan, records: list[RungRecord], arm_names: dict[str, str], code: CodeState,
                  wall_seconds: float, rung_files: dict[str, bytes] | None = None) -> LadderFile:
    """The ladder file from the rungs' records, written with its plots and README (and
    ``rung_files``, name -> bytes, the rungs' artifacts as other workers wrote them)."""
    ask = plan.request
    base_lr = plan.rungs[0].size.preset.train.lr
    top = records[-1].artifact
    top_artifact = (ReproductionArtifact.model_validate(json.loads(rung_files[top])) if rung_files and top in rung_files
                    else load_artifact(plan.folder / top))
    assert isinstance(top_artifact, ReproductionArtifact)
    slots = arms_differ_in(top_artifact)
    statistics, degenerate = _statistics(records, slots, ask.include_degenerate, ask.resamples)
    provenance = collect_provenance(
        command=ask.run.command or f"python: llmevo.experiments.run_ladder({ask.name!r}, rungs={ask.rungs})",
        code=code, dataset_fingerprint=records[0].dataset_fingerprint,
        accelerator=accelerator_name(resolve_device(ask.run.device)),
        artifact_path=str(plan.folder / "ladder.json"),
        allow_dirty=ask.run.allow_dirty if ask.run.publish else None, publish=ask.run.publish)
    top_note = None
    if ask.top_seeds is not None and len(records) >= 2:
        top_note = (f"the top rung used the first {ask.top_seeds} of the {len(ask.seeds)} report seeds; "
                    f"the rung below's noise floor was {records[-2].noise_floor_percent:.2f}%")
    built = ladder_file(
        name=ask.name, against=plan.against, arm_names=arm_names, margin_percent=ask.margin, context=ask.context,
        tokens_per_parameter=ask.size.tokens_per_parameter or TOKENS_PER_PARAMETER, rungs=records,
        statistics=statistics, provenance=provenance, top_seeds_note=top_note, wall_seconds=wall_seconds,
        slots=slots, degenerate=degenerate,
        lr_transfer=lr_transfer_record(records, base_lr, plan.rungs[0].plan.comparison.baseline.model.parametrization,
                                       len(default_grid(base_lr))))
    for name, data in (rung_files or {}).items():  # first, so that the folder is not empty below
        write_bytes_atomic(plan.folder / name, data)
    with staged_folder(plan.folder) as staging:  # each file replaces its namesake; rungs stay
        write_json_atomic(staging / "ladder.json", built.to_json_dict())
        write_ladder_report(built, staging)
    return built


RECORD_ATTR, ARTIFACT_ATTR, ARMS_ATTR = "record", "artifact_json", "arm_names"


def run_shared_ladder(plan: LadderPlan, code: CodeState, progress: Progress | None = None,
                      on_rung: Callable[[RungEvent], None] | None = None) -> LadderFile:
    """This worker's share of a ladder whose rungs are a queue in ``plan.shared``'s study
    (``work_queue``): each rung it pops runs once lower rungs its lr rule needs are complete
    (their chosen lrs read from the rung records stored in their trials); each rung's record,
    arm names and artifact file (its exact bytes) are stored in its trial, so that whichever
    worker finds every rung complete writes the same ladder folder, on any machine. The ladder
    file's ``wall_seconds`` is the span from the first rung's start to the last rung's end."""
    from llmevo.experiments.work_queue import open_work_queue, run_work_queue

    shared = plan.shared
    assert shared is not None
    index_of = {rung.rung: index for index, rung in enumerate(plan.rungs)}
    needs = {rung.rung: [] if rung.full_grid else [r.rung for r in plan.rungs[:index]]
             for index, rung in enumerate(plan.rungs)}
    study = open_work_queue(shared.url, shared.study_name, shared.description,
                            [r.rung for r in plan.rungs], shared.heartbeat, shared.grace_period)
    started = time.perf_counter()

    def event(rung: RungPlan, **fields: Any) -> RungEvent:
        return RungEvent(index_of[rung.rung], len(plan.rungs), rung.rung, rung.size.parameters,
                         rung.size.compute, time.perf_counter() - started, None, **fields)

    def run(rung_number: int, below: dict) -> dict[str, Any]:
        rung = plan.rungs[index_of[rung_number]]
        history: dict[str, list[tuple[int, float]]] = {"baseline": [], "method": []}
        for lower in needs[rung_number]:
            record = RungRecord.model_validate(below[lower].user_attrs[RECORD_ATTR])
            for arm in history:
                history[arm].append((record.parameters, record.chosen_lr[arm]))
        if on_rung is not None:
            on_rung(event(rung))
        artifact, record = _run_rung(plan, rung, history, code, progress)
        if on_rung is not None:
            on_rung(event(rung, artifact=artifact))
        return {RECORD_ATTR: record.model_dump(mode="json"),
                ARMS_ATTR: {"baseline": artifact.baseline.name, "method": artifact.method.name},
                ARTIFACT_ATTR: (plan.folder / record.artifact).read_bytes().decode("utf-8")}

    def waiting(rung_number: int, missing: list[int]) -> None:
        if on_rung is not None:
            on_rung(event(plan.rungs[index_of[rung_number]], waiting_for=tuple(missing)))

    done = run_work_queue(study, [r.rung for r in plan.rungs], needs, run,
                          grace_period=shared.grace_period, poll_seconds=min(2.0, shared.heartbeat),
                          wait_timeout=shared.wait_timeout, on_wait=waiting)
    records, files = [], {}
    for rung in plan.rungs:
        attrs = done[rung.rung].user_attrs
        record = RungRecord.model_validate(attrs[RECORD_ATTR])
        data = attrs[ARTIFACT_ATTR].encode("utf-8")
        if hashlib.sha256(data).hexdigest() != record.artifact_sha256:
            raise ConfigError(f"study '{shared.study_name}': rung {rung.rung}'s stored artifact does not "
                              "match its record's sha256")
        records.append(record)
        files[record.artifact] = data
    trials = list(done.values())
    wall = max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)
    return _write_ladder(plan, records, done[plan.rungs[-1].rung].user_attrs[ARMS_ATTR], code,
                         wall.total_seconds(), files)
