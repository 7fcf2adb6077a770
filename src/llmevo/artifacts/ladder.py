"""The ladder file (``ladder.json``): what a scale ladder measured at each rung and across them.

One file per ladder, beside its rungs' reproduction artifacts (``rung<k>.json``, each a
complete v2 reproduction artifact with its own provenance). The ladder file repeats what the
across-rung statistics need from each rung (the paired per-seed values of the verdict
metric, the compute, the class, the chosen learning rates, the grid and how it was chosen)
so that it can be read and recomputed alone, names each rung's artifact with its sha256,
and holds the across-rung statistics (``eval.scaling``) and the ladder's provenance.
Blocks are strict (``artifacts.schema._Block``): no NaN, no coercion, unknown keys kept.

Fields added with the rung-level trend (all optional, so that ladder files written before
load): ``slots`` (the slots in which the two arms differ, from the rungs' genomes),
``trend_fit`` (the rung-level trend of record, its leave-one-rung-out refits and the
seed-only class), ``degenerate`` (the rungs left out of the across-rung quantities and why),
and each rung's ``n_heads``. A file without ``trend_fit`` classifies its trend by the seed
bootstrap alone (the rule before); ``experiments.ladder.refit_ladder`` recomputes it.

Public API: ``LadderFile``, ``RungRecord``, ``FitRecord``, ``IntervalRecord``,
``TrendRecord``, ``LeaveOneOutRecord``, ``DegenerateRecord``, ``arms_differ_in``,
``arm_components``, ``load_ladder``, ``is_ladder``, ``LADDER_KIND``.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from llmevo.artifacts.schema import (
    ReproductionArtifact,
    _Block,
    _one_line,
    read_json,
)
from llmevo.errors import ArtifactError

LADDER_KIND = "ladder"
# what a genome without the key trains with (a genome written before the data slot has none)
DEFAULT_CHOICE = {"data": {"name": "concat", "config": {}}}


class IntervalRecord(_Block):
    value: float | None  # None: infinite (a compute multiplier past the baseline's floor)
    low: float | None
    high: float | None

    @classmethod
    def of(cls, value: float, low: float, high: float) -> IntervalRecord:
        """Non-finite numbers (an infinite multiplier, an empty bootstrap) are recorded as null."""
        def finite(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None
        return cls(value=finite(value), low=finite(low), high=finite(high))


class FitRecord(_Block):
    form: str
    a: float
    alpha: float
    l_inf: float
    alpha_interval: IntervalRecord
    note: str | None = None

    def predict(self, compute: float) -> float:
        return self.a * compute ** -self.alpha + self.l_inf


class RungRecord(_Block):
    rung: int
    parameters: int
    training_tokens: int
    epochs: float
    compute_6nd: float
    sequence_length: int = 64  # absent in ladders written before the context dial (quick's window)
    seeds: list[int]
    metric: str
    baseline: list[float]  # the verdict metric per report seed, in ``seeds`` order
    method: list[float]
    delta_percent: float
    ci_low: float | None
    ci_high: float | None
    classification: str | None
    noise_floor_percent: float | None
    chosen_lr: dict[str, float]
    grid: list[float]
    grid_rule: dict[str, Any]
    artifact: str
    artifact_sha256: str
    dataset_fingerprint: str
    wall_seconds: float
    peak_memory_mb: float | None = None  # max resident set so far (this process, its workers)
    cpu_seconds: float | None = None  # the rung's reproduction: CPU seconds, workers included
    n_heads: int | None = None  # the rung's attention heads (absent in ladders written before)

    @classmethod
    def of(cls, rung: int, artifact: ReproductionArtifact, path: Path, grid: list[float],
           rule: dict[str, Any], wall_seconds: float, peak_memory_mb: float | None = None) -> RungRecord:
        verdict, setup, tuning = artifact.verdict, artifact.setup, artifact.tuning
        assert verdict is not None and tuning is not None and artifact.statistics is not None
        metric = verdict.metric
        change = artifact.statistics[metric].paired_relative_change_percent
        rows = artifact.per_seed or []
        return cls(
            rung=rung, parameters=int(setup.parameters or 0), training_tokens=int(setup.training_tokens or 0),
            epochs=float(setup.epochs or 0.0), compute_6nd=float(setup.compute_6nd or 0.0),
            sequence_length=setup.sequence_length,
            seeds=[row.seed for row in rows], metric=metric,
            baseline=[float(row.baseline[metric]) for row in rows],
            method=[float(row.method[metric]) for row in rows],
            delta_percent=change.mean, ci_low=change.ci_low, ci_high=change.ci_high,
            classification=verdict.classification, noise_floor_percent=verdict.noise_floor_percent,
            chosen_lr={arm: float(block.chosen["lr"]) for arm, block in tuning.arms.items()},
            grid=list(grid), grid_rule=rule, artifact=path.name,
            artifact_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
            dataset_fingerprint=artifact.provenance.dataset_fingerprint, wall_seconds=wall_seconds,
            peak_memory_mb=peak_memory_mb, cpu_seconds=setup.cpu_seconds, n_heads=artifact_heads(artifact))


def artifact_heads(artifact: ReproductionArtifact) -> int | None:
    """The attention heads of a rung's models (both arms have the rung's geometry)."""
    genome = artifact.baseline.genome or {}
    heads = (genome.get("model") or {}).get("n_heads")
    return int(heads) if isinstance(heads, int) else None


def arms_differ_in(artifact: ReproductionArtifact) -> list[str]:
    """The slots (model slots, ``optimizer``, ``data``) in which a reproduction's two arms'
    genomes differ; sizes are the rung's for both. Empty when an arm records no genome."""
    baseline, method = artifact.baseline.genome, artifact.method.genome
    if not baseline or not method:
        return []
    model_b, model_m = baseline.get("model") or {}, method.get("model") or {}
    slots = [key for key in model_b if isinstance(model_b[key], dict) and model_b[key] != model_m.get(key)]
    slots += [key for key in ("optimizer", "data")
              if (baseline.get(key) or DEFAULT_CHOICE.get(key)) != (method.get(key) or DEFAULT_CHOICE.get(key))]
    return slots


def _slot_choices(genome: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every slot choice of a genome: its model slots (the dict-valued keys), ``optimizer`` and
    ``data`` (the default recipe where a genome written before the data slot has none)."""
    model = genome.get("model") or {}
    choices = {key: value for key, value in model.items() if isinstance(value, dict) and "name" in value}
    for key in ("optimizer", "data"):
        choice = genome.get(key) or DEFAULT_CHOICE.get(key)
        if isinstance(choice, dict) and "name" in choice:
            choices[key] = choice
    return choices


def arm_components(artifact: ReproductionArtifact) -> dict[str, dict[str, str]] | None:
    """``{"baseline": {slot: name}, "method": {slot: name}}``: the registered components the two
    arms compare, from their genomes: the slots whose component *names* differ (a setting such as
    rope's theta or muon's ns_steps is not a component). Arms that differ in settings only give
    the named components of the slots that differ. None when an arm records no genome."""
    baseline, method = artifact.baseline.genome, artifact.method.genome
    if not baseline or not method:
        return None
    choices_b, choices_m = _slot_choices(baseline), _slot_choices(method)
    slots = [slot for slot in choices_b if choices_m.get(slot, {}).get("name") != choices_b[slot]["name"]]
    if not slots:
        slots = [slot for slot in arms_differ_in(artifact) if slot in choices_b and slot in choices_m]
    return {"baseline": {slot: str(choices_b[slot]["name"]) for slot in slots if slot in choices_b},
            "method": {slot: str(choices_m[slot]["name"]) for slot in slots if slot in choices_m}}


class LeaveOneOutRecord(_Block):
    left_out: int  # the rung refitted without
    slope: IntervalRecord  # null bounds: two rungs left, no interval
    df: int
    trend: Literal["growing", "shrinking", "stable"]
    sign_flip: bool
    class_flip: bool


class TrendRecord(_Block):
    """The rung-level trend (``eval.scaling.rung_level_trend``) and its leave-one-rung-out check."""

    slope: IntervalRecord  # percentage points of delta per decade of compute
    df: int
    tau2: float | None  # rung-level residual variance (points^2); null with two rungs
    weights: list[float]
    rungs: list[int]  # the rungs fitted
    trend: Literal["growing", "shrinking", "stable"]  # the interval's class, before the check
    seed_only_trend: Literal["growing", "shrinking", "stable"]  # the seed bootstrap's class (the old rule)
    leave_one_out: list[LeaveOneOutRecord]
    unstable: bool
    method: str


class DegenerateRecord(_Block):
    """Rungs whose geometry cannot show what the compared slots do (one head for a
    head-dependent slot), and whether the across-rung quantities left them out."""

    rungs: list[int]
    reason: str
    excluded: bool


class LrTransferRecord(_Block):
    """How each arm's chosen learning rate moved across the rungs, on the default grid's
    lattice (``steps``: each rung's lattice step, in rung order; ``drift_steps``: highest minus
    lowest, one step = a factor sqrt(3)), and what the rungs tuned by the rule instead of the
    full grid saved (``saved_share``: 1 - their grid points over the full grid's, weighted by
    each rung's compute; None when every rung had the full grid). Under ``mup`` or
    ``completep`` the rule transfers the last tuned choice (``experiments.ladder``)."""

    parametrization: str
    lattice: str
    steps: dict[str, list[int]]
    drift_steps: dict[str, int]
    ruled_rungs: list[int]
    grid_points: dict[str, int]  # rung -> points of its starting grid (extensions not counted)
    saved_share: float | None


class LadderFile(_Block):
    kind: Literal["ladder"]
    schema_version: Literal[2]
    name: str
    against: str | None
    arm_names: dict[str, str]  # baseline, method: the arms' names, e.g. llama_modern[position=learned]
    metric: str
    margin_percent: float
    context: Literal["fixed", "grow"] = "fixed"  # absent in ladders written before the context dial
    tokens_per_parameter: float
    rungs: list[RungRecord]
    fits: dict[str, FitRecord]  # baseline, method
    gap_slope_per_decade: IntervalRecord  # delta percentage points per decade of compute
    trend: Literal["growing", "shrinking", "stable", "unstable"]
    compute_multiplier: IntervalRecord
    projection: dict[str, Any]  # compute, delta_percent (IntervalRecord), label
    ladder_class: Literal["holds", "reverses", "fades", "emerges", "absent"]
    transfers: list[dict[str, Any]]
    bootstrap: dict[str, Any]
    top_seeds_note: str | None = None
    wall_seconds: float
    provenance: dict[str, Any]
    slots: list[str] | None = None  # where the arms differ (absent in ladders written before)
    trend_fit: TrendRecord | None = None  # absent: ``trend`` is the seed bootstrap's class
    degenerate: DegenerateRecord | None = None
    lr_transfer: LrTransferRecord | None = None  # absent in ladders written before it


    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=False)

    @property
    def span(self) -> tuple[float, float]:
        """(parameters, compute) of the top rung over the bottom rung's."""
        return (self.rungs[-1].parameters / self.rungs[0].parameters,
                self.rungs[-1].compute_6nd / self.rungs[0].compute_6nd)


def is_ladder(path: Path | str) -> bool:
    """Whether the JSON file at ``path`` says it is a ladder file (``"kind": "ladder"``)."""
    data = read_json(path)
    return isinstance(data, dict) and data.get("kind") == LADDER_KIND


def load_ladder(path: Path | str) -> LadderFile:
    """A ladder file, validated; anything else is one ``ArtifactError`` line."""
    data = read_json(path)
    if not isinstance(data, dict) or data.get("kind") != LADDER_KIND:
        raise ArtifactError(f"{path}: not a ladder file (no \"kind\": \"ladder\")")
    try:
        return LadderFile.model_validate(data)
    except ValidationError as error:
        raise ArtifactError(_one_line(error, str(path))) from None
