"""Promotion by evidence: formal reproductions that held up enter the search space."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_reports_writing import synthetic_artifact  # a valid 3-seed reproduction artifact

from llmevo.catalog import full_registry
from llmevo.errors import ArtifactError
from llmevo.promotion import promotion, tier_reached


def _publish(docs: Path, folder: str, manifest_ref: str, change: float, significant: bool | None,
             formal: bool = True, created: str = "2026-11-30T08:00:00+00:00",
             ci: tuple[float, float] | None = None, tuned: bool = True,
             margin: float | None = None, against: str | None = None) -> Path:
    path = docs / "reproductions" / folder / "metrics" / f"{created[:19].replace(':', '')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    artifact = synthetic_artifact()
    artifact["manifest_ref"] = manifest_ref
    artifact["evaluation_protocol"]["formal_comparison"] = formal
    artifact["verdict"].update(significant=significant, summary=f"change {change}")
    low, high = ci if ci is not None else (change - 1.0, change + 1.0)
    artifact["statistics"]["lm_loss"]["paired_relative_change_percent"].update(
        mean=change, ci_low=low, ci_high=high)
    artifact["provenance"]["created_at"] = created
    if margin is not None:
        artifact["verdict"]["margin_percent"] = margin
    if against is not None:  # `reproduce NAME --against OTHER`
        artifact["setup"]["against"] = against
    if tuned:
        settings = [{"lr": lr, "validation": {"1000": 4.0}, "mean": 4.0, "status": "complete"}
                    for lr in (1e-3, 3e-3, 1e-2)]
        arm = {"settings": settings, "chosen": {"lr": 3e-3}, "extended": None, "chosen_on_edge": False}
        artifact["tuning"] = {"parameter": "lr", "grid": [1e-3, 3e-3, 1e-2], "seeds": [1000],
                              "metric": "lm_loss", "arms": {"baseline": arm, "method": arm}}
    path.write_text(json.dumps(artifact))
    return path


def test_declared_components_are_promoted(tmp_path):
    spec = full_registry().get("position", "rope")
    assert promotion(spec, tmp_path).promoted


def test_no_formal_reproduction_means_no_promotion(tmp_path):
    spec = full_registry().get("attention", "qk_norm")
    _publish(tmp_path, "2302.05442-qk_norm", "reproduction:qk_norm", -3.0, None, formal=False)
    result = promotion(spec, tmp_path)
    assert not result.promoted and "no formal" in result.reason


def test_significantly_worse_stays_out_and_no_difference_is_promoted(tmp_path):
    registry = full_registry()
    muon = registry.get("optimizer", "muon")
    _publish(tmp_path, "2502.16982-muon", "reproduction:muon", +4.2, True)
    assert not promotion(muon, tmp_path).promoted
    qk = registry.get("attention", "qk_norm")
    _publish(tmp_path, "2302.05442-qk_norm", "reproduction:qk_norm", +0.2, False, ci=(-0.5, 0.9))
    assert promotion(qk, tmp_path).promoted  # non-inferior: upper bound 0.9 < margin 1%


def test_significant_improvement_is_promoted_and_newest_artifact_decides(tmp_path):
    spec = full_registry().get("feedforward", "relu2")
    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", +3.0, True, created="2026-11-29T00:00:00+00:00")
    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -2.0, True, created="2026-11-30T00:00:00+00:00")
    result = promotion(spec, tmp_path)
    assert result.promoted and result.reason.startswith("better (tuned)")


def test_a_nan_interval_is_refused_not_promoted(tmp_path):
    """A NaN interval used to be read as 'not significantly worse', which promoted Lion."""
    spec = full_registry().get("optimizer", "lion")
    path = _publish(tmp_path, "2302.06675-lion", "reproduction:lion", +4.0, None,
                    ci=(float("nan"), float("nan")))
    with pytest.raises(ArtifactError, match=f"{path.name}: statistics.lm_loss.paired_relative_change_percent.ci_low"):
        promotion(spec, tmp_path)


def test_a_significant_verdict_without_its_statistics_is_not_promoted(tmp_path):
    spec = full_registry().get("optimizer", "lion")
    path = _publish(tmp_path, "2302.06675-lion", "reproduction:lion", -1.0, True)
    artifact = json.loads(path.read_text())
    del artifact["statistics"]["lm_loss"]
    path.write_text(json.dumps(artifact))
    assert not promotion(spec, tmp_path).promoted
def test_tier_comes_from_published_artifacts_not_the_manifest(tmp_path, reference_dir):
    registry = full_registry()
    relay = registry.get("kv_cache", "rope-relay")
    assert tier_reached(relay, tmp_path) == "none"
    metrics = tmp_path / "foundation-models" / "2610.21126-rope-relay" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "other.json").write_text(json.dumps(synthetic_artifact()))  # rope's, not its own
    assert tier_reached(relay, tmp_path) == "none"
    diagnostic = json.loads((reference_dir / "2610.21126-rope-relay.component-cpu-seeds42-44.json").read_text())
    diagnostic["manifest_ref"] = relay.manifest.manifest_ref
    (metrics / "component-cpu-seeds42-44.json").write_text(json.dumps(diagnostic))
    assert tier_reached(relay, tmp_path) == "l1_mechanism"
    (metrics / "broken.json").write_text("{not json")  # evidence that cannot be read: an error
    with pytest.raises(ArtifactError, match="broken.json: not valid JSON"):
        tier_reached(relay, tmp_path)
    rope = registry.get("position", "rope")
    _publish(tmp_path, "2104.09864-rope", "reproduction:rope", -14.0, True, formal=False)
    assert tier_reached(rope, tmp_path) == "l2_public_dataset"  # a smoke reproduction is L2 too


def test_the_repository_evidence_gives_the_tiers_the_manifests_used_to_declare():
    docs = Path(__file__).resolve().parents[2] / "docs"
    registry = full_registry()
    assert tier_reached(registry.get("position", "rope"), docs) == "l2_public_dataset"
    assert tier_reached(registry.get("kv_cache", "rope-relay"), docs) == "l1_mechanism"
    assert tier_reached(registry.get("architecture", "blt-bytes"), docs) == "l2_public_dataset"
    assert tier_reached(registry.get("architecture", "transformer"), docs) == "none"


def test_no_significant_difference_with_a_wide_interval_is_not_promoted(tmp_path):
    """Absence of evidence is not evidence: CI [-2, +3] reaches past δ = 1% -> inconclusive."""
    spec = full_registry().get("attention", "qk_norm")
    _publish(tmp_path, "2302.05442-qk_norm", "reproduction:qk_norm", +0.5, False, ci=(-2.0, 3.0))
    result = promotion(spec, tmp_path)
    assert not result.promoted and result.reason.startswith("inconclusive")
    _publish(tmp_path, "2302.05442-qk_norm", "reproduction:qk_norm", +0.5, False, ci=(-2.0, 3.0),
             margin=5.0, created="2026-12-01T00:00:00+00:00")
    assert promotion(spec, tmp_path).reason.startswith("non-inferior")  # the artifact's own δ


def test_untuned_reproductions_do_not_promote(tmp_path):
    spec = full_registry().get("feedforward", "relu2")
    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -5.0, True, tuned=False)
    result = promotion(spec, tmp_path)
    assert not result.promoted and "no tuned" in result.reason
    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -5.0, True,
             created="2026-11-29T00:00:00+00:00")  # older, but tuned: it decides
    result = promotion(spec, tmp_path)
    assert result.promoted and result.reason.startswith("better (tuned)")


def test_only_comparisons_against_the_declared_ablation_decide(tmp_path):
    """`reproduce alibi --against rope` is extra evidence: a newer, better, tuned formal
    artifact against llama_modern's RoPE neither promotes alibi nor outranks its ablation's."""
    spec = full_registry().get("position", "alibi")
    _publish(tmp_path, "2108.12409-alibi", "reproduction:alibi", -4.0, True,
             created="2026-11-30T00:00:00+00:00", against="rope")
    alone = promotion(spec, tmp_path)
    assert not alone.promoted and "no formal" in alone.reason
    ablation = _publish(tmp_path, "2108.12409-alibi", "reproduction:alibi", +5.0, True,
                        created="2026-11-29T00:00:00+00:00")
    result = promotion(spec, tmp_path)
    assert not result.promoted and result.reason.startswith("worse (tuned)")
    assert result.artifact == ablation
    assert tier_reached(spec, tmp_path) == "l2_public_dataset"  # still public-data evidence


def test_a_comparison_significant_alone_but_not_in_the_family_is_not_promoted(tmp_path):
    """relu2 at −5% [−9.5, −0.5] over 3 seeds: p = 0.041 alone, better. Beside one more tuned
    comparison (qk_norm +0.5 [−2, 3], p = 0.48) Holm tests relu2 first at α/2 = 0.025: not
    rejected, so its interval widens to 97.5% (t(0.9875, 2 df) · se), reaches past δ = 1%,
    and the class becomes inconclusive; promotion follows the adjusted class, and so does
    the leaderboard built from the same folder."""
    from scipy import stats as scipy_stats

    from llmevo.promotion import family_entries, family_verdicts
    from llmevo.reports.leaderboard import build_leaderboard, scan_artifacts

    spec = full_registry().get("feedforward", "relu2")
    relu2 = _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -5.0, True, ci=(-9.5, -0.5))
    alone = promotion(spec, tmp_path)
    assert alone.promoted and alone.reason.startswith("better (tuned) after Holm over 1 ")
    _publish(tmp_path, "2302.05442-qk_norm", "reproduction:qk_norm", +0.5, False, ci=(-2.0, 3.0))
    verdicts = family_verdicts(family_entries(tmp_path))
    adjusted = verdicts[relu2.resolve()]
    standard_error = 4.5 / scipy_stats.t.ppf(0.975, df=2)
    assert adjusted.holm.p_value == pytest.approx(2 * scipy_stats.t.sf(5.0 / standard_error, df=2))
    assert 0.025 < adjusted.holm.p_value < 0.05 and not adjusted.holm.rejected
    half = scipy_stats.t.ppf(1 - 0.025 / 2, df=2) * standard_error
    assert (adjusted.holm.ci_low, adjusted.holm.ci_high) == pytest.approx((-5.0 - half, -5.0 + half))
    assert adjusted.alone == "better" and adjusted.classification == "inconclusive"
    result = promotion(spec, tmp_path)
    assert not result.promoted
    assert result.reason.startswith("inconclusive (tuned) after Holm over 2 published comparisons (alone: better)")
    rows = build_leaderboard(scan_artifacts([tmp_path])[0], tmp_path)
    row = next(row for row in rows if row["name"] == "relu2")
    assert row["classification"] == "better" and row["holm"]["classification"] == "inconclusive"
    assert row["holm"]["family_size"] == 2


def test_superseded_and_untuned_artifacts_are_not_in_the_family(tmp_path):
    from llmevo.promotion import family_entries

    _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -5.0, True, tuned=False)
    old = _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -2.0, True, created="2026-11-29T00:00:00+00:00")
    new = _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -3.0, True, created="2026-12-01T00:00:00+00:00")
    against = _publish(tmp_path, "2109.08668-relu2", "reproduction:relu2", -3.0, True,
                       created="2026-11-28T00:00:00+00:00", against="swiglu")
    members = [path for path, _ in family_entries(tmp_path)]
    assert sorted(members) == sorted([new, against]) and old not in members


def _noop(path: Path) -> None:
    """Mark a published artifact as a no-op run on ``--allow-noop`` (``runner.equivalence``)."""
    artifact = json.loads(path.read_text())
    artifact["equivalence"] = {
        "how": "outputs", "same_function": True, "reason": "their logits agree within 0.0001",
        "tolerance": 1e-4, "probe_steps": 3, "init_difference": 1e-6, "trained_difference": 2e-6,
        "run_difference": 1e-6, "logit_scale": 0.16, "seconds": 0.5, "allowed_noop": True}
    artifact["verdict"]["classification"] = "no-op"
    path.write_text(json.dumps(artifact))


def test_a_noop_never_promotes_and_is_classed_noop_in_the_family(tmp_path):
    """softcap's published row read non-inferior although its arms computed the same
    function; classed no-op, the same interval promotes nothing, alone or after Holm."""
    from llmevo.promotion import family_entries, family_verdicts, verdict_class
    from llmevo.reports.evidence import evidence_table
    from llmevo.reports.leaderboard import _reproduction_row

    spec = full_registry().get("attention", "softcap")
    path = _publish(tmp_path, "2408.00118-softcap", "reproduction:softcap", -0.015, False, ci=(-0.08, 0.05))
    assert promotion(spec, tmp_path).promoted  # non-inferior: the interval alone would promote
    _noop(path)
    result = promotion(spec, tmp_path)
    assert not result.promoted and result.reason.startswith("no-op (tuned)")
    (member,) = family_entries(tmp_path)
    assert verdict_class(member[1]) == "no-op"
    family = family_verdicts([member])[path.resolve()]
    assert family.alone == family.classification == "no-op"
    row = _reproduction_row(member[1], family)
    assert row["classification"] == "no-op" and row["holm"]["classification"] == "no-op"
    assert "| no-op | " in evidence_table([row])
