"""Promotion by evidence: formal reproductions that held up enter the search space."""

from __future__ import annotations

import json
from pathlib import Path

from llmevo.evidence import promotion
from llmevo.registry import ensure_registered


def _publish(docs: Path, folder: str, manifest_ref: str, change: float, significant: bool | None,
             formal: bool = True, created: str = "2026-11-30T08:00:00+00:00",
             interval: tuple[float, float] | None = None, tuned: bool = True,
             margin: float | None = None) -> None:
    path = docs / "reproductions" / folder / "metrics" / f"{created[:19].replace(':', '')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    low, high = interval or (change - 0.5, change + 0.5)
    artifact = {
        "method": {"name": "x"}, "manifest_ref": manifest_ref,
        "evaluation_protocol": {"formal_comparison": formal},
        "verdict": {"metric": "lm_loss", "lower_is_better": True, "significant": significant,
                    "summary": f"change {change}"},
        "statistics": {"lm_loss": {"paired_relative_change_percent": {
            "mean": change, "ci_low": low, "ci_high": high}}},
        "provenance": {"created_at": created},
    }
    if margin is not None:
        artifact["verdict"]["margin_percent"] = margin
    if tuned:
        artifact["tuning"] = {"grid": [1e-3, 3e-3], "seeds": [1000], "arms": {}}
    path.write_text(json.dumps(artifact))


def test_declared_components_are_promoted(tmp_path):
    spec = ensure_registered().get("position", "rope")
    assert promotion(spec, tmp_path).promoted


def test_no_formal_reproduction_means_no_promotion(tmp_path):
    spec = ensure_registered().get("attention", "qk_norm")
    _publish(tmp_path, "2302.05442-qk_norm", "reproduction:qk_norm", -3.0, None, formal=False)
    result = promotion(spec, tmp_path)
    assert not result.promoted and "no formal" in result.reason


def test_significantly_worse_stays_out_and_no_difference_is_promoted(tmp_path):
    registry = ensure_registered()
    muon = registry.get("optimizer", "muon")
    _publish(tmp_path, "2502.16982-muon", "reproduction:muon", +4.2, True)
    assert not promotion(muon, tmp_path).promoted
    qk = registry.get("attention", "qk_norm")
    _publish(tmp_path, "2302.05442-qk_norm", "reproduction:qk_norm", +0.2, False, interval=(-0.5, 0.9))
    assert promotion(qk, tmp_path).promoted  # non-inferior: upper bound 0.9 < margin 1%


def test_significant_improvement_is_promoted_and_newest_artifact_decides(tmp_path):
    spec = ensure_registered().get("feedforward", "relu2")
    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", +3.0, True, created="2026-11-29T00:00:00+00:00")
    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -2.0, True, created="2026-11-30T00:00:00+00:00")
    result = promotion(spec, tmp_path)
    assert result.promoted and result.reason.startswith("better")


def test_no_significant_difference_with_a_wide_interval_is_not_promoted(tmp_path):
    """Absence of evidence is not evidence: CI [-2, +3] reaches past δ = 1% -> inconclusive."""
    spec = ensure_registered().get("attention", "qk_norm")
    _publish(tmp_path, "2302.05442-qk_norm", "reproduction:qk_norm", +0.5, False, interval=(-2.0, 3.0))
    result = promotion(spec, tmp_path)
    assert not result.promoted and result.reason.startswith("inconclusive")
    _publish(tmp_path, "2302.05442-qk_norm", "reproduction:qk_norm", +0.5, False, interval=(-2.0, 3.0),
             margin=5.0, created="2026-12-01T00:00:00+00:00")
    assert promotion(spec, tmp_path).reason.startswith("non-inferior")  # the artifact's own δ


def test_untuned_reproductions_do_not_promote(tmp_path):
    spec = ensure_registered().get("feedforward", "relu2")
    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -5.0, True, tuned=False)
    result = promotion(spec, tmp_path)
    assert not result.promoted and "no tuned" in result.reason
    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -5.0, True,
             created="2026-11-29T00:00:00+00:00")  # older, but tuned: it decides
    result = promotion(spec, tmp_path)
    assert result.promoted and result.reason.startswith("better (tuned)")
