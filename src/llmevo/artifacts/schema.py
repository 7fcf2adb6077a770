"""The typed schema (v2) of llmevo's two artifact kinds, read and written losslessly.

Two kinds, told apart by ``method``: an object (one arm) in a *reproduction* artifact, a
name in a *component-diagnostic* artifact (see ``docs/ARTIFACTS.md``). Every block keeps
unknown keys (``extra="allow"``) and the key order it was read with, so a field written by
a later llmevo survives a load/dump round trip, and ``to_json_dict()`` of a loaded file is
equal to the file's JSON. Optional fields that were absent stay absent (``exclude_unset``);
explicit nulls stay null. Numbers are validated strictly: a string or a boolean where a
number belongs is an error, never coerced, and NaN or infinity in any typed number (metrics,
statistics, intervals, curves) is refused.

This module is the one way in: ``load_artifact`` (a file) and ``validate_artifact`` (parsed
JSON) give a typed ``ReproductionArtifact`` or ``DiagnosticArtifact``, and every reader
(``show``, ``compare``, ``report``, ``leaderboard``, promotion, ``components``) uses them.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    model_serializer,
    model_validator,
)

from llmevo.errors import ArtifactError

SCHEMA_VERSION = 2

JsonScalar = str | int | float | bool | None


class _Block(BaseModel):
    """Base of every artifact block: strict types, extra keys kept, input key order kept."""

    model_config = ConfigDict(
        extra="allow", strict=True, validate_assignment=False, allow_inf_nan=False
    )
    _key_order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_key_order(cls, data: Any, handler: Any) -> Any:
        model = handler(data)
        if isinstance(data, dict) and isinstance(model, _Block):
            model._key_order = tuple(data)
        return model

    @model_serializer(mode="wrap")
    def _dump_in_input_order(self, handler: Any) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if not self._key_order:
            return dumped
        ordered = {key: dumped[key] for key in self._key_order if key in dumped}
        ordered.update((key, value) for key, value in dumped.items() if key not in ordered)
        return ordered

    def recorded(self, key: str) -> Any:
        """The value of a field or of a kept unknown key, by name; None when absent."""
        if key in type(self).model_fields:
            return getattr(self, key)
        return (self.model_extra or {}).get(key)


# --- shared blocks ---------------------------------------------------------------------


class MeanStd(_Block):
    """A metric over seeds: sample mean, sample standard deviation, number of seeds."""

    mean: float
    std: float
    n: int


class EvaluationProtocol(_Block):
    tier: str
    seeds: list[int]
    formal_comparison: bool
    claim_policy: str
    interval: str | None = None  # new: how intervals were computed
    selection_split: str | None = None  # new: the split used to choose (validation)


class CodeChanged(_Block):
    """The code changed between a run's start and its write (an unpublished run, or one
    published with ``--allow-dirty``): HEAD then (None: it had not moved) and the source files
    that differed (``artifacts.provenance.code_changes``)."""

    commit_now: str | None
    files: list[str]


class Provenance(_Block):
    """Where an artifact came from. New artifacts carry every field (``collect_provenance``);
    historical ones keep what they had (``historical_migration``, ``original_code_commit``)."""

    artifact_path: str | None
    dataset_fingerprint: str
    code_commit: str | None = None
    code_dirty: bool | None = None
    allow_dirty: bool | None = None  # --publish --allow-dirty: published from a dirty tree
    code_changed: CodeChanged | None = None  # the code moved while the run trained (2026-12-05 on)
    implementation_sha256: str | None = None
    implementation_files: dict[str, str] | None = None
    runner_sha256: str | None = None
    command: str | None = None
    accelerator: str | None = None
    library_versions: dict[str, str] | None = None
    numerics: dict[str, Any] | None = None  # CPU, kernel capability, threads (2026-12-05 on)
    created_at: str | None = None
    historical_migration: str | None = None
    original_code_commit: str | None = None
    # the resolved experiment file it ran (experiments.sections.experiment_of; 2026-12-07 on):
    # `llmevo reproduce FILE.toml` with it written out reruns the artifact; older ones lack it
    experiment: dict[str, Any] | None = None


# --- reproduction artifact ---------------------------------------------------------------


class Paper(_Block):
    arxiv_id: str
    title: str
    url: str
    organization: str


class DatasetInfo(_Block):
    name: str
    train_tokens: int
    validation_tokens: int
    test_tokens: int
    narrative_tokens: int
    instruction_train: int
    instruction_validation: int
    preference_validation: int
    reasoning_validation: int
    benchmark_suite: str
    vocab_size: int
    tokenizer: str
    variant: Literal["tokens", "raw"] | None = None
    fingerprint: str | None = None
    hh_rlhf_validation: int | None = None
    train_bytes: int | None = None
    # each arm's data recipe when one is not the fixed concatenation (the data slot):
    # name, full config, tokens it draws from, the arm's data fingerprint
    data_recipes: dict[Literal["baseline", "method"], dict[str, Any]] | None = None


class FlopsMatch(_Block):
    """How the arms' compute was matched (``--match flops``, ``runner.flops``): each arm's
    training FLOPs per token (``counted``: what matching uses, routed experts at their active
    share; ``computed``: what ran), the steps each arm trained, each arm's total training
    FLOPs (counted per token x tokens) and the method's total over the baseline's."""

    counted_by: str
    flops_per_token: dict[Literal["baseline", "method"], dict[str, float]]
    steps: dict[Literal["baseline", "method"], int]
    tokens: dict[Literal["baseline", "method"], int]
    total_flops: dict[Literal["baseline", "method"], float]
    ratio: float


class Setup(_Block):
    seed: int
    steps_per_variant: int
    dimensions: int
    layers: int
    sequence_length: int
    same_tokens_optimizer_and_budget: bool
    evolve_architecture: str
    evolve_optimizer: str
    preset: str | None = None
    seeds: list[int] | None = None
    batch_size: int | None = None
    learning_rate: float | None = None
    schedule: str | None = None
    warmup_steps: int | None = None
    token_stream_sha256: str | None = None
    token_stream_sha256_per_seed: dict[str, str] | None = None
    token_stream_sha256_by_arm: dict[Literal["baseline", "method"], dict[str, str]] | None = None
    baseline_genome: dict[str, Any] | None = None
    method_genome: dict[str, Any] | None = None
    post_training: dict[str, Any] | None = None  # the stage's settings (post-training reproductions)
    # the baseline's slot choice when it is not the declared ablation (`reproduce --against`)
    against: str | None = None
    # the size dial (`reproduce --rung` / `--d-model --layers --heads`; absent without it)
    rung: int | None = None  # None with explicit sizes only
    parameters: int | None = None  # the rung's llama_modern (each arm's own: its block)
    training_tokens: int | None = None  # per arm
    epochs: float | None = None  # training tokens over the training stream's tokens
    compute_6nd: float | None = None  # 6 x parameters x training_tokens
    # the cost of the verdict: CPU seconds (user + system) of the reproduction's process and
    # its training workers, tuning included, and its wall time; cached runs cost what loading them did
    cpu_seconds: float | None = None
    reproduction_wall_seconds: float | None = None
    # how the arms' budgets were matched: absent (tokens, the default: equal tokens) or
    # "flops" with its block (``--match flops``: equal training FLOPs, the method's steps set)
    match: Literal["tokens", "flops"] | None = None
    flops: FlopsMatch | None = None


class ArmResult(_Block):
    """One arm (baseline or method): validation means over its seeds.

    Its metrics are those of ``llmevo.eval.metrics.METRICS`` (names, directions, where they
    are shown); one the table has and this block does not type is kept as an unknown key."""

    name: str
    lm_loss: float
    perplexity: float
    instruction_loss: float
    primary: float
    public_composite: float
    composite_loss: float
    fitness: float
    initial_loss: float
    final_loss: float
    post_training_loss: float
    reward_bearing_group_rate: float
    parameters: int
    device: str
    optimizer: str
    architecture_stats: dict[str, JsonScalar]
    muon_orthogonality_error: float
    seeds: list[int]
    bits_per_byte: float | None = None
    instruction_bpb: float | None = None
    preference_loss: float | None = None
    preference_accuracy: float | None = None
    hh_preference_loss: float | None = None
    hh_preference_accuracy: float | None = None
    reasoning_nll: float | None = None
    reasoning_accuracy: float | None = None
    composite_bpb: float | None = None
    # post-training reproductions (experiments.post_training): what shows whether the stage worked
    heldout_preference_accuracy: float | None = None
    heldout_preference_margin: float | None = None
    arithmetic_exact_match: float | None = None
    arithmetic_error_rate: float | None = None
    dpo_reward_margin: float | None = None
    dpo_reward_accuracy: float | None = None
    grpo_mean_kl: float | None = None
    grpo_mean_reward: float | None = None
    post_training_examples: int | None = None
    status: Literal["complete", "diverged"] | None = None
    genome: dict[str, Any] | None = None
    # the arm's whole resolved training config (``train.trainer.TrainConfig``: steps, batch,
    # window, lr, schedule, warmup, minimum lr ratio, weight decay, clipping, optimizer with its
    # config, loss window, precision), the same for each of its report seeds; a post-training
    # comparison's arm: {pretrain: that config (or {init_from: DIR}), post_training: the stage's
    # settings, method: the arm's method}; absent before
    train: dict[str, Any] | None = None


class Relative(_Block):
    """Method vs baseline, percent change of the means."""

    lm_loss_percent: float
    perplexity_percent: float
    bits_per_byte_percent: float | None = None
    fitness_percent: float | None = None


class SeedArms(_Block):
    """One seed's validation metrics for both arms (``per_seed`` of a reproduction)."""

    seed: int
    baseline: dict[str, float | None]
    method: dict[str, float | None]


class PairedChange(_Block):
    """Paired relative change of method vs baseline (percent), with its interval."""

    mean: float
    ci_low: float | None
    ci_high: float | None
    n: int
    interval: str


class MetricStatistics(_Block):
    baseline: MeanStd
    method: MeanStd
    paired_relative_change_percent: PairedChange
    significant: bool | None = None


class EquivalenceCheck(_Block):
    """The no-op check run before training (``runner.equivalence``): how the arms were
    compared, the relative logit differences measured (null where not measured), and whether
    they compute the same function (``allowed_noop``: run anyway, on ``--allow-noop``)."""

    how: Literal["outputs", "token streams", "not applicable"]
    same_function: bool
    reason: str
    tolerance: float
    probe_steps: int
    init_difference: float | None = None
    trained_difference: float | None = None
    run_difference: float | None = None
    logit_scale: float | None = None
    seconds: float
    allowed_noop: bool = False


class Verdict(_Block):
    metric: str
    lower_is_better: bool
    significant: bool | None = None
    noise_floor_percent: float | None
    summary: str
    classification: Literal["better", "non-inferior", "inconclusive", "worse", "no-op"] | None = None
    margin_percent: float | None = None  # δ of the non-inferiority class


class HeldOutTest(_Block):
    """The test split, evaluated once at the end and never used to choose."""

    baseline: dict[str, float | None]
    method: dict[str, float | None]


class ArmCurve(_Block):
    steps: list[int]
    per_seed: dict[str, list[float | None]]


class TrainingCurves(_Block):
    baseline: ArmCurve
    method: ArmCurve


class ValidationCurves(_Block):
    """Each report run's validation loss during training (``--val-every``): after every
    ``every``-th step and the last (``steps``: steps done), on ``windows`` fixed validation
    windows of ``window_tokens`` tokens (``eval.lm.curve_windows``); the arms' final
    metrics stay the full evaluation."""

    every: int
    windows: int
    window_tokens: int
    baseline: ArmCurve
    method: ArmCurve


class TuningSetting(_Block):
    """One learning rate of one arm: validation metric per tuning seed (null: diverged).
    Space tuning (``protocol: space``, ``runner.tuning_space``): one trial, with every
    setting it trained (``values``), its place on each axis's declared line
    (``coordinates``: 0 low, 1 high, outside after an extension) and its Sobol point
    (``sobol``: the design's point for this trial number); under a sequential sampler
    (``tuning.sampler.startup``) ``sampled_by`` says who placed it (``sobol``, ``tpe``, ``gp``:
    then its coordinates are that sampler's point)."""

    lr: float
    validation: dict[str, float | None]
    mean: float | None
    status: Literal["complete", "diverged", "stopped"]  # stopped: at a halving rung (runner.fidelity)
    extension: bool = False
    trial: int | None = None
    phase: Literal["declared", "extension", "grid"] | None = None  # grid: the search's grid floor
    values: dict[str, float | int] | None = None
    coordinates: dict[str, float] | None = None
    sobol: dict[str, float] | None = None
    cached_seeds: list[int] | None = None
    paths: dict[str, str] | None = None  # tuning seed -> how its run trained (2026-12-05 on)
    sampled_by: Literal["sobol", "tpe", "gp"] | None = None  # a sequential sampler's block only
    stopped_at: int | None = None  # --tune-fidelity halving: the rung step it stopped at (validation: that step's)
    probe: bool = False  # the lr grid's adequacy probe, in the grid because it beat the best (2026-12-05 on)


class TuningAxisRecord(_Block):
    """One tuned axis of one arm (space tuning): the real setting, the resolved bounds and
    the declared ones (multiples of ``relative_to`` where set), its scale, and its extension."""

    setting: str  # train.<field> or optimizer.<field>
    low: float
    high: float
    scale: Literal["linear", "log", "log1m"]
    integer: bool = False
    relative_to: Literal["lr", "steps"] | None = None
    declared_low: float | None = None
    declared_high: float | None = None
    limit_low: float | None = None
    limit_high: float | None = None
    on_edge: Literal["up", "down"] | None = None
    extended: Literal["up", "down"] | None = None
    extension: list[float] | None = None  # the settings the extension reached (lowest, highest)


class TuningBudget(_Block):
    """What one arm's tuning cost (``runner.tuner``): runs asked, trained (not from the arm
    cache), steps per run, CPU and wall seconds. Absent from artifacts written before it."""

    runs: int = Field(ge=0)
    trained: int = Field(ge=0)
    steps_per_run: int = Field(ge=0)
    cpu_seconds: float = Field(ge=0)
    wall_seconds: float | None = Field(default=None, ge=0)
    steps_trained: int | None = Field(default=None, ge=0)  # halving: steps trained here (cache hits excluded)
    steps_asked: int | None = Field(default=None, ge=0)  # halving: steps of the tuning from a cold cache
    steps_full_fidelity: int | None = Field(default=None, ge=0)  # halving: the same runs at full length


class GridBest(_Block):
    lr: float
    mean: float | None


class SearchBest(_Block):
    trial: int
    mean: float | None


class GridFloor(_Block):
    """Space tuning's lr-grid floor for one arm (``runner.tuning_space.GRID_FLOOR``): the
    grid's best against the search's best, and which the arm kept. Absent from artifacts
    written before the floor."""

    grid: list[float]
    extended: Literal["up", "down"] | None = None
    grid_best: GridBest | None
    search_best: SearchBest
    held: bool
    chosen_from: Literal["grid", "search"]


class SeedNoiseRecord(_Block):
    """The seed noise one arm's re-scoring used (``runner.tuning.SeedNoise``): the spread of
    one run's validation across seeds in percent of its mean, the threshold on a gap between
    two means over ``seeds`` tuning seeds (spread / sqrt(seeds)), its source and why."""

    spread_percent: float = Field(ge=0)
    threshold_percent: float = Field(ge=0)
    source: Literal["given", "measured", "default"]
    seeds: int = Field(ge=1)
    why: str


class RescoredSetting(_Block):
    """One contender: its lr (grid) or trial number (space), its gap to the best on the
    tuning seeds in percent, and why it is one."""

    lr: float | None = None
    trial: int | None = None
    gap_percent: float | None  # None: not finite (a best of exactly 0)
    why: str


class Rescoring(_Block):
    """Which settings of one arm were re-scored on the confirmation seeds and why
    (``runner.tuning.rescore``): the noise, the most contenders (``top``), the seeds they were
    retrained on ([]: a clear winner, nothing retrained), the contenders, the nearest setting
    left out and the outcome. Absent from artifacts written before 2026-12-05 (seventeenth
    session) and where re-scoring was off (``--tune-confirm 0``)."""

    noise: SeedNoiseRecord
    top: int = Field(ge=1)
    seeds: list[int]
    settings: list[RescoredSetting]
    next: dict[str, float | int | None] | None = None
    outcome: str


class ProbeBest(_Block):
    lr: float
    mean: float


class Probe(_Block):
    """The lr grid's adequacy probe for one arm (``runner.tuning.adequacy_probe``): its lr
    (``steps_above_top`` lattice steps above the grid's ``top``), its validation per tuning
    seed and mean (null: diverged), the best before it, its gap to that best in percent
    (negative: better), the seed noise the re-scoring uses, whether it beat the best
    (``moved``: the grid was extended toward it and it joined the grid), the learning rates
    that added, and the outcome. Absent from artifacts written before 2026-12-05 (eighteenth
    session) and where the probe was off (``tuning.probe`` false)."""

    lr: float
    steps_above_top: int = Field(ge=1)
    top: float
    validation: dict[str, float | None]
    mean: float | None
    status: Literal["complete", "diverged"]
    best_before: ProbeBest
    gap_percent: float | None
    noise: SeedNoiseRecord
    moved: bool
    added: list[float]
    outcome: str
    paths: dict[str, str] | None = None


class ArmTuning(_Block):
    settings: list[TuningSetting]
    chosen: dict[str, float]
    extended: Literal["up", "down"] | None = None
    chosen_on_edge: bool
    confirmed: list[float] = Field(default_factory=list)  # lrs retrained on the confirmation seeds
    chosen_trial: int | None = None  # space tuning: the chosen trial's number
    space: dict[str, TuningAxisRecord] | None = None  # space tuning: the arm's axes
    budget: TuningBudget | None = None  # what the arm's tuning cost (newer artifacts)
    grid_floor: GridFloor | None = None  # space tuning: the lr grid's floor (newer artifacts)
    rescoring: Rescoring | None = None  # the contenders re-scored on the confirmation seeds (newer artifacts)
    probe: Probe | None = None  # the lr grid's adequacy probe (newer artifacts; absent when off)

    @model_validator(mode="after")
    def _chosen_is_a_setting(self) -> ArmTuning:
        if len(self.settings) < 2:
            raise ValueError(f"an arm needs at least 2 tuned settings, got {len(self.settings)}")
        if self.chosen.get("lr") not in [s.lr for s in self.settings]:
            raise ValueError(f"chosen lr {self.chosen.get('lr')} is not one of the settings tried")
        return self


class Tuning(_Block):
    """Both arms tuned on one learning-rate grid under tuning seeds (``runner.tuning``)."""

    parameter: str
    grid: list[float]
    seeds: list[int]
    metric: str
    arms: dict[str, ArmTuning]
    confirm_seeds: list[int] = Field(default_factory=list)  # for a best at the stability edge
    # "grid": one learning-rate grid (runner.tuning); "space": Sobol trials over each arm's
    # declared space (runner.tuning_space), every arm the same number
    protocol: Literal["grid", "space"] = "grid"
    trials: int | None = None  # space: trials per arm
    declared_trials: int | None = None
    extension_trials: int | None = None
    sampler: dict[str, Any] | None = None
    axes_requested: str | list[str] | None = None
    fidelity: dict[str, Any] | None = None  # --tune-fidelity halving (runner.fidelity); absent: full
    probe: bool | None = None  # the lr grid's adequacy probe on (true) or off (false); absent: before it

    @property
    def space(self) -> bool:
        """Whether this is a space tuning (one plot and one table column per tuned axis)."""
        return self.protocol == "space"

    @model_validator(mode="after")
    def _equal_trials(self) -> Tuning:
        if self.protocol == "space":
            counts = {label: sum(1 for s in arm.settings if s.phase != "grid")  # the floor: per arm
                      for label, arm in self.arms.items()}
            if self.trials is None or any(count != self.trials for count in counts.values()):
                raise ValueError(f"space tuning: every arm needs exactly {self.trials} trials, "
                                 f"got {counts}")
        return self


class CachedTuningRun(_Block):
    lr: float
    seed: int
    trial: int | None = None  # space tuning: the trial (its lr alone does not name it)


class CachedRuns(_Block):
    """The runs of one arm loaded from the arm cache (``runner.cache``), not trained."""

    report_seeds: list[int] = Field(default_factory=list)
    tuning: list[CachedTuningRun] = Field(default_factory=list)


class HeadlineChange(NamedTuple):
    """The verdict metric's relative change of method vs baseline, in percent; the
    interval only where paired statistics were recorded, the change None where nothing
    records it."""

    metric: str
    percent: float | None
    ci_low: float | None
    ci_high: float | None


class ReproductionArtifact(_Block):
    """Baseline arm vs method arm on public data at an equal budget."""

    paper: Paper
    dataset: DatasetInfo
    setup: Setup
    baseline: ArmResult
    method: ArmResult
    relative: Relative
    paper_results: dict[str, Any]
    scope: str
    schema_version: Literal[2]
    manifest_ref: str
    evaluation_protocol: EvaluationProtocol
    provenance: Provenance
    per_seed: list[SeedArms] | None = None
    statistics: dict[str, MetricStatistics] | None = None
    verdict: Verdict | None = None
    equivalence: EquivalenceCheck | None = None  # the no-op check (absent: not run)
    test: HeldOutTest | None = None
    training_curves: TrainingCurves | None = None
    validation_curves: ValidationCurves | None = None  # absent: run without --val-every
    tuning: Tuning | None = None
    cache: dict[Literal["baseline", "method"], CachedRuns] | None = None  # absent: cache not read
    # post-training reproductions: the shared pretraining's loss curve, and per arm the
    # stage's per-step series (losses; GRPO's rewards and reward_bearing_rates)
    pretraining_curve: ArmCurve | None = None
    post_training_curves: dict[Literal["baseline", "method"], dict[str, ArmCurve]] | None = None

    @model_validator(mode="after")
    def _tuning_seeds_disjoint(self) -> ReproductionArtifact:
        if self.tuning is not None:
            tuning_seeds = set(self.tuning.seeds) | set(self.tuning.confirm_seeds)
            overlap = sorted(tuning_seeds & set(self.evaluation_protocol.seeds))
            if overlap:
                raise ValueError(f"tuning seeds {overlap} overlap evaluation_protocol.seeds")
        return self

    @property
    def kind(self) -> str:
        return "reproduction"

    @property
    def name(self) -> str:
        """The reproduced component's short name (``rope`` from ``reproduction:rope``)."""
        return _short_name(self.manifest_ref, self.method.name)

    @property
    def arxiv(self) -> str | None:
        return self.paper.arxiv_id if self.paper.arxiv_id not in ("", "none") else None

    @property
    def against(self) -> str | None:
        """The baseline's slot choice when it is not the declared ablation (``--against``)."""
        return self.setup.against

    @property
    def noop(self) -> bool:
        """Its arms compute the same function (run on ``--allow-noop``): classed no-op."""
        return (self.equivalence is not None and self.equivalence.allowed_noop) or (
            self.verdict is not None and self.verdict.classification == "no-op")

    @property
    def seed_list(self) -> list[int]:
        return list(self.evaluation_protocol.seeds or self.setup.seeds or [])

    @property
    def verdict_metric(self) -> str:
        """The metric the verdict is about: the recorded verdict's, else lm_loss."""
        return self.verdict.metric if self.verdict is not None else "lm_loss"

    @property
    def headline_change(self) -> HeadlineChange:
        """The verdict metric's change, from the richest block recorded: its paired
        statistics (mean and interval), else ``relative``, else the arms' means."""
        metric = self.verdict_metric
        entry = (self.statistics or {}).get(metric)
        if entry is not None:
            change = entry.paired_relative_change_percent
            return HeadlineChange(metric, change.mean, change.ci_low, change.ci_high)
        relative = self.relative.recorded(f"{metric}_percent")
        if isinstance(relative, int | float):
            return HeadlineChange(metric, float(relative), None, None)
        baseline, method = self.baseline.recorded(metric), self.method.recorded(metric)
        if isinstance(baseline, int | float) and isinstance(method, int | float) and baseline:
            return HeadlineChange(metric, 100.0 * (method - baseline) / abs(baseline), None, None)
        return HeadlineChange(metric, None, None, None)

    def paired_values(self, metric: str) -> tuple[list[float], list[float]] | None:
        """``(baseline, method)`` values of ``metric`` paired by seed (``per_seed``; without
        per-seed rows, the arms' means as one pair); None when any of them is missing."""
        rows = self.per_seed or []
        baseline = [row.baseline.get(metric) for row in rows] or [self.baseline.recorded(metric)]
        method = [row.method.get(metric) for row in rows] or [self.method.recorded(metric)]
        if any(value is None for value in (*baseline, *method)):
            return None
        return baseline, method

    def to_json_dict(self) -> dict[str, Any]:
        return dump_artifact(self)


def _short_name(manifest_ref: str, fallback: str) -> str:
    return manifest_ref.split(":", 1)[1] if ":" in manifest_ref else fallback


# --- component-diagnostic artifact -----------------------------------------------------


# Union member tags; never valid keys, so they can be dropped from error paths.
_STATS_TAG, _FLAG_TAG = "<mean,std,n>", "<boolean>"


def _metric_tag(value: Any) -> str | None:
    if isinstance(value, bool):
        return _FLAG_TAG
    if isinstance(value, dict | MeanStd):
        return _STATS_TAG
    return None


DiagnosticMetric = Annotated[
    Annotated[MeanStd, Tag(_STATS_TAG)] | Annotated[bool, Tag(_FLAG_TAG)],
    Discriminator(
        _metric_tag,
        custom_error_type="metric_value",
        custom_error_message="Input should be {mean, std, n} or a boolean",
    ),
]
_UNION_TAGS = frozenset({_STATS_TAG, _FLAG_TAG})


class DiagnosticDataset(_Block):
    id: str
    revision: str
    checkpoint: str | None
    capability_benchmark: bool


class DiagnosticSeed(_Block):
    """One seed's raw metric values; every key besides ``seed`` is a metric."""

    seed: int


class FullExperiment(_Block):
    status: str


class DiagnosticArtifact(_Block):
    """L1 mechanism diagnostics of one component on synthetic tensors."""

    schema_version: Literal[2]
    method: str
    manifest_ref: str
    adapter: str | None
    implementation_status: Literal["component_only", "integrated", "full"]
    diagnostic_only: bool
    promotion_eligible: bool
    evolve_integrated: bool
    measured_locally: bool
    evaluation_tier: str
    seeds: list[int]
    evaluation_protocol: EvaluationProtocol
    dataset: DiagnosticDataset
    configuration: dict[str, Any]
    metrics: dict[str, DiagnosticMetric]
    per_seed: list[DiagnosticSeed]
    provenance: Provenance
    full_experiment: FullExperiment

    @property
    def kind(self) -> str:
        return "diagnostic"

    @property
    def name(self) -> str:
        return _short_name(self.manifest_ref, self.method)

    @property
    def arxiv(self) -> str | None:
        """From the ``<arxiv>-<name>`` folder of ``provenance.artifact_path``, if any."""
        match = re.search(r"/(\d{4}\.\d{4,5})-[^/]+/metrics/", self.provenance.artifact_path or "")
        return match.group(1) if match else None

    def to_json_dict(self) -> dict[str, Any]:
        return dump_artifact(self)


Artifact = ReproductionArtifact | DiagnosticArtifact


# --- load / validate / dump ----------------------------------------------------------------


def _field_path(loc: tuple[int | str, ...]) -> str:
    parts = [str(part) for part in loc if part not in _UNION_TAGS]
    return ".".join(parts) if parts else "(top level)"


def _one_line(error: ValidationError, source: str) -> str:
    errors = error.errors(include_url=False)
    first = errors[0]
    message = " ".join(str(first["msg"]).split())
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"{source}: {_field_path(first['loc'])}: {message}{more}"


def validate_artifact(data: Any, source: str = "artifact") -> Artifact:
    """Validate a JSON-shaped dict as either artifact kind; ``source`` names it in errors."""
    if not isinstance(data, dict):
        raise ArtifactError(f"{source}: expected a JSON object at the top level")
    other = {"evolution": "an evolution study's summary (its comparison artifact is final-comparison.json "
                          "beside it)", "ladder": "a ladder file (llmevo report reads it)"}.get(str(data.get("kind")))
    if other is not None and "method" not in data:
        raise ArtifactError(f"{source}: {other}, not a comparison or diagnostic artifact")
    method = data.get("method")
    if isinstance(method, dict | ArmResult):  # a reproduction's arm block, as JSON or typed
        model: type[_Block] = ReproductionArtifact
    elif isinstance(method, str):
        model = DiagnosticArtifact
    else:
        raise ArtifactError(
            f"{source}: method: expected an object (reproduction artifact) or a string "
            "(component-diagnostic artifact)"
        )
    try:
        artifact = model.model_validate(data)
    except ValidationError as error:
        raise ArtifactError(_one_line(error, source)) from None
    assert isinstance(artifact, ReproductionArtifact | DiagnosticArtifact)
    return artifact


_NOT_REGULAR = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISDIR, "a folder"),
                (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def _read_regular_file(path: Path | str) -> bytes:
    """The bytes of a regular file. Opened without blocking and checked on the open file, so
    a named pipe (which would block until a writer came) or a device (which never ends) is
    refused before a byte is read, with no window between the check and the read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _NOT_REGULAR if test(mode)), "an unusual file")
            raise ArtifactError(
                f"{path}: not a regular file ({kind}); expected a JSON file")
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        return handle.read()


def read_json(path: Path | str) -> Any:
    """Parse a JSON file; a path that is not a regular file, an unreadable file or invalid
    JSON is one ``ArtifactError`` line."""
    source = str(path)
    try:
        text = _read_regular_file(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise ArtifactError(f"{source}: cannot read artifact ({reason})") from None
    if not text.strip():
        raise ArtifactError(f"{source}: empty file; expected JSON")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ArtifactError(
            f"{source}: not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
        ) from None
    except RecursionError:
        raise ArtifactError(f"{source}: JSON nested too deeply to be an artifact") from None
    return data


def load_artifact(path: Path | str) -> Artifact:
    """Read and validate an artifact file; any problem is one ``ArtifactError`` line."""
    try:
        return validate_artifact(read_json(path), str(path))
    except RecursionError:
        raise ArtifactError(f"{path}: JSON nested too deeply to be an artifact") from None


def dump_artifact(artifact: Artifact) -> dict[str, Any]:
    """The artifact as a JSON-shaped dict: the fields that were set, in their input order."""
    return artifact.model_dump(mode="python", exclude_unset=True)
