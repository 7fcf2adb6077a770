"""Promotion by evidence: which components enter the evolution search space, and why.

A component is promoted when its manifest declares it (the baseline's own components), or
when a published *tuned formal* reproduction (3 or more paired seeds, both arms tuned on the
same learning-rate grid: a ``tuning`` block; ``docs/reproductions/<arxiv>-<name>/metrics/
*.json``) classed it ``better`` or ``non-inferior`` than its ablation on validation (the
four-class verdict with margin δ, ``llmevo.eval.stats.classify_change``): evidence of
non-inferiority, not absence of evidence. An untuned reproduction never promotes; neither
does an ``inconclusive`` or ``worse`` one. The newest tuned formal artifact decides (by its
``provenance.created_at``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmevo.eval.stats import DEFAULT_MARGIN_PERCENT, classify_change
from llmevo.registry import ComponentSpec, Registry

PROMOTING_CLASSES = ("better", "non-inferior")


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


def formal_artifacts(spec: ComponentSpec, docs: Path) -> list[tuple[Path, dict]]:
    """Formal reproduction artifacts of ``spec`` under ``docs``, newest first."""
    folder = docs / "reproductions" / reproduction_folder(spec) / "metrics"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue  # `llmevo show` reports unreadable artifacts; promotion ignores them
        protocol = data.get("evaluation_protocol") or {}
        method = data.get("method")
        if not isinstance(method, dict) or not protocol.get("formal_comparison"):
            continue
        if data.get("manifest_ref") != spec.manifest.manifest_ref:
            continue
        found.append((path, data))
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


def is_tuned(artifact: dict) -> bool:
    """Whether both arms of a reproduction artifact were tuned (it has a ``tuning`` block)."""
    return isinstance(artifact.get("tuning"), dict)


def verdict_class(artifact: dict) -> str | None:
    """The artifact's four-class verdict: recorded, or computed from its interval and margin."""
    verdict = artifact.get("verdict") or {}
    if verdict.get("classification"):
        return str(verdict["classification"])
    metric = verdict.get("metric", "lm_loss")
    change = (artifact.get("statistics", {}).get(metric) or {}).get("paired_relative_change_percent", {})
    margin = verdict.get("margin_percent") or DEFAULT_MARGIN_PERCENT
    return classify_change(change.get("ci_low"), change.get("ci_high"), float(margin),
                           bool(verdict.get("lower_is_better", True)))


def promotion(spec: ComponentSpec, docs: Path) -> Promotion:
    if spec.manifest.promotion_eligible:
        return Promotion(spec.name, spec.slot, True, "declared in its manifest (baseline component)")
    artifacts = formal_artifacts(spec, docs)
    if not artifacts:
        return Promotion(spec.name, spec.slot, False, "no formal (3+ seed) reproduction published yet")
    tuned = [(path, artifact) for path, artifact in artifacts if is_tuned(artifact)]
    if not tuned:
        path, artifact = artifacts[0]
        worse = " (and it was significantly worse)" if _significantly_worse(artifact) else ""
        return Promotion(spec.name, spec.slot, False,
                         f"no tuned formal reproduction yet; untuned evidence does not promote{worse}", path)
    path, artifact = tuned[0]
    summary = (artifact.get("verdict") or {}).get("summary", "")
    label = verdict_class(artifact)
    if label in PROMOTING_CLASSES:
        return Promotion(spec.name, spec.slot, True, f"{label} (tuned): {summary}", path)
    return Promotion(spec.name, spec.slot, False, f"{label or 'unclassified'} (tuned): {summary}", path)


def promotions(registry: Registry, docs: Path) -> dict[str, Promotion]:
    """``{name: Promotion}`` for every registered component."""
    return {spec.name: promotion(spec, docs) for spec in registry.all()}
