"""Promotion by evidence: formal reproductions that held up enter the search space."""

from __future__ import annotations

import json
from pathlib import Path

from llmevo.catalog import ensure_registered
from llmevo.promotion import promotion, tier_reached


def _publish(docs: Path, folder: str, manifest_ref: str, change: float, significant: bool | None,
             formal: bool = True, created: str = "2026-11-30T08:00:00+00:00") -> None:
    path = docs / "reproductions" / folder / "metrics" / f"{created[:19].replace(':', '')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "method": {"name": "x"}, "manifest_ref": manifest_ref,
        "evaluation_protocol": {"formal_comparison": formal},
        "verdict": {"metric": "lm_loss", "lower_is_better": True, "significant": significant,
                    "summary": f"change {change}"},
        "statistics": {"lm_loss": {"paired_relative_change_percent": {"mean": change}}},
        "provenance": {"created_at": created},
    }))


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
    _publish(tmp_path, "2302.05442-qk_norm", "reproduction:qk_norm", +0.2, False)
    assert promotion(qk, tmp_path).promoted


def test_significant_improvement_is_promoted_and_newest_artifact_decides(tmp_path):
    spec = ensure_registered().get("feedforward", "relu2")
    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", +3.0, True, created="2026-11-29T00:00:00+00:00")
    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -2.0, True, created="2026-11-30T00:00:00+00:00")
    result = promotion(spec, tmp_path)
    assert result.promoted and "held up" in result.reason


def test_tier_comes_from_published_artifacts_not_the_manifest(tmp_path):
    registry = ensure_registered()
    relay = registry.get("kv_cache", "rope-relay")
    assert tier_reached(relay, tmp_path) == "none"
    metrics = tmp_path / "foundation-models" / "2610.21126-rope-relay" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "other.json").write_text('{"manifest_ref": "reproduction:rope"}')  # not its own
    (metrics / "broken.json").write_text("{not json")
    assert tier_reached(relay, tmp_path) == "none"
    (metrics / "component-cpu-seeds42-44.json").write_text('{"manifest_ref": "foundation-models:rope-relay"}')
    assert tier_reached(relay, tmp_path) == "l1_mechanism"
    rope = registry.get("position", "rope")
    _publish(tmp_path, "2104.09864-rope", "reproduction:rope", -14.0, True, formal=False)
    assert tier_reached(rope, tmp_path) == "l2_public_dataset"  # a smoke reproduction is L2 too


def test_the_repository_evidence_gives_the_tiers_the_manifests_used_to_declare():
    docs = Path(__file__).resolve().parents[2] / "docs"
    registry = ensure_registered()
    assert tier_reached(registry.get("position", "rope"), docs) == "l2_public_dataset"
    assert tier_reached(registry.get("kv_cache", "rope-relay"), docs) == "l1_mechanism"
    assert tier_reached(registry.get("architecture", "blt-bytes"), docs) == "l2_public_dataset"
    assert tier_reached(registry.get("architecture", "transformer"), docs) == "none"
