"""The ladder file (``ladder.json``): what a scale ladder measured at each rung and across them.

One file per ladder, beside its rungs' reproduction artifacts (``rung<k>.json``, each a
complete v2 reproduction artifact with its own provenance). The ladder file repeats what the
across-rung statistics need from each rung (the paired per-seed values of the verdict
metric, the compute, the class, the chosen learning rates, the grid and how it was chosen)
so that it can be read and recomputed alone, names each rung's artifact with its sha256,
and holds the across-rung statistics (``eval.scaling``) and the ladder's provenance.
Blocks are strict (``artifacts.schema._Block``): no NaN, no coercion, unknown keys kept.

Public API: ``LadderFile``, ``RungRecord``, ``FitRecord``, ``IntervalRecord``,
``load_ladder``, ``is_ladder``, ``LADDER_KIND``.
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
            peak_memory_mb=peak_memory_mb, cpu_seconds=setup.cpu_seconds)


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
    trend: Literal["growing", "shrinking", "stable"]
    compute_multiplier: IntervalRecord
    projection: dict[str, Any]  # compute, delta_percent (IntervalRecord), label
    ladder_class: Literal["holds", "reverses", "fades", "emerges", "absent"]
    transfers: list[dict[str, Any]]
    bootstrap: dict[str, Any]
    top_seeds_note: str | None = None
    wall_seconds: float
    provenance: dict[str, Any]

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
