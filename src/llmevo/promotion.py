"""A component's standing, read from its published evidence: the tier it reached, and
whether it is promoted into the evolution search space (and why).

The tier is what the artifacts under ``docs/`` show, never a flag in the manifest: a
published reproduction (``docs/reproductions/<arxiv>-<name>/metrics/*.json``) is
``l2_public_dataset``, a published component diagnostic
(``docs/foundation-models/<arxiv>-<name>/metrics/*.json``) is ``l1_mechanism``, nothing is
``none``. Only artifacts whose ``manifest_ref`` is the component's count.

A component is promoted when its manifest declares it part of the baseline, or
when a published *formal* reproduction (3 or more paired seeds, ``docs/reproductions/
<arxiv>-<name>/metrics/*.json``) did not find it significantly worse than its ablation on
validation. A component with no formal reproduction, or one that was significantly worse,
stays out. The newest formal artifact decides (by its ``provenance.created_at``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from llmevo.registry import ComponentSpec, Registry

EvaluationTier = Literal["none", "l1_mechanism", "l2_public_dataset"]
EVIDENCE_FOLDERS: tuple[tuple[EvaluationTier, str], ...] = (
    ("l2_public_dataset", "reproductions"),
    ("l1_mechanism", "foundation-models"),
)


@dataclass(frozen=True)
class Promotion:
    name: str
    slot: str
    promoted: bool
    reason: str
    artifact: Path | None = None


def reproduction_folder(spec: ComponentSpec) -> str:
    """``<arxiv>-<name>``: where ``llmevo reproduce --publish`` writes ``spec``'s artifacts."""
    paper = spec.manifest.paper
    return f"{paper.arxiv_id}-{spec.name}" if paper else spec.name


def published_artifacts(spec: ComponentSpec, docs: Path, kind: str) -> list[tuple[Path, dict]]:
    """``spec``'s readable artifacts under ``docs/<kind>/<arxiv>-<name>/metrics/``, by path."""
    folder = docs / kind / reproduction_folder(spec) / "metrics"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue  # `llmevo show` reports unreadable artifacts; standing ignores them
        if isinstance(data, dict) and data.get("manifest_ref") == spec.manifest.manifest_ref:
            found.append((path, data))
    return found


def tier_reached(spec: ComponentSpec, docs: Path) -> EvaluationTier:
    """The highest tier ``spec``'s published artifacts under ``docs`` show."""
    for tier, kind in EVIDENCE_FOLDERS:
        if published_artifacts(spec, docs, kind):
            return tier
    return "none"


def formal_artifacts(spec: ComponentSpec, docs: Path) -> list[tuple[Path, dict]]:
    """Formal reproduction artifacts of ``spec`` under ``docs``, newest first."""
    found = [
        (path, data)
        for path, data in published_artifacts(spec, docs, "reproductions")
        if isinstance(data.get("method"), dict)
        and (data.get("evaluation_protocol") or {}).get("formal_comparison")
    ]
    found.sort(key=lambda item: (item[1].get("provenance") or {}).get("created_at", ""), reverse=True)
    return found


def _significantly_worse(artifact: dict) -> bool:
    verdict = artifact.get("verdict") or {}
    if not verdict.get("significant"):
        return False
    metric = verdict.get("metric", "lm_loss")
    change = (artifact.get("statistics", {}).get(metric) or {}).get("paired_relative_change_percent", {})
    mean = change.get("mean")
    if mean is None:
        return False
    return mean > 0 if verdict.get("lower_is_better", True) else mean < 0


def promotion(spec: ComponentSpec, docs: Path) -> Promotion:
    if spec.manifest.baseline:
        return Promotion(spec.name, spec.slot, True, "declared in its manifest (baseline component)")
    artifacts = formal_artifacts(spec, docs)
    if not artifacts:
        return Promotion(spec.name, spec.slot, False, "no formal (3+ seed) reproduction published yet")
    path, artifact = artifacts[0]
    summary = (artifact.get("verdict") or {}).get("summary", "")
    if _significantly_worse(artifact):
        return Promotion(spec.name, spec.slot, False, f"significantly worse: {summary}", path)
    return Promotion(spec.name, spec.slot, True, f"held up: {summary}", path)


def promotions(registry: Registry, docs: Path) -> dict[str, Promotion]:
    """``{name: Promotion}`` for every registered component."""
    return {spec.name: promotion(spec, docs) for spec in registry.all()}
