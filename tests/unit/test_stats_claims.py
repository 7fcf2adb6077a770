"""Summaries, claim rules and verdict wording."""

from __future__ import annotations

import math

import pytest

from llmevo.errors import ConfigError
from llmevo.eval import stats


def test_summarize_uses_sample_std():
    summary = stats.summarize([2.0, 4.0, 6.0])
    assert summary == {"mean": 4.0, "std": 2.0, "n": 3}  # sqrt(((-2)^2 + 0 + 2^2) / 2) = 2
    assert stats.summarize([5.0]) == {"mean": 5.0, "std": 0.0, "n": 1}
    with pytest.raises(ConfigError):
        stats.summarize([])


@pytest.mark.parametrize(("n_seeds", "formal"), [(1, False), (2, False), (3, True), (5, True)])
def test_claim_policy_thresholds(n_seeds, formal):
    is_formal, text = stats.claim_policy(n_seeds)
    assert is_formal is formal
    if formal:
        assert f"{n_seeds} paired seeds" in text and "excludes zero" in text
    else:
        assert text == "single/few-seed smoke result; do not claim a stable improvement"


def test_relative_change_sign_follows_direction_for_negative_metrics():
    # fitness -10 -> -9 is a rise (+10%), not a fall
    assert stats.relative_changes_percent([-10.0], [-9.0]) == [pytest.approx(10.0)]
    assert stats.relative_changes_percent([4.0], [3.0]) == [pytest.approx(-25.0)]
    with pytest.raises(ConfigError, match="one baseline and one method value"):
        stats.relative_changes_percent([1.0, 2.0], [1.0])


def test_single_seed_has_no_interval():
    change = stats.paired_relative_change([4.0], [3.0])
    assert change["mean"] == pytest.approx(-25.0)
    assert change["ci_low"] is None and change["ci_high"] is None
    assert change["n"] == 1
    assert "at least 2" in change["interval"]


def test_verdict_significant_improvement():
    # per-seed changes -2%, -3%, -4%: mean -3, s = 1, t_{0.975,2} = 4.303 -> CI -5.48 .. -0.52
    verdict = stats.verdict(
        "lm_loss", [100.0, 100.0, 100.0], [98.0, 97.0, 96.0], method_name="RoPE"
    )
    assert verdict["significant"] is True
    assert verdict["summary"].startswith(
        "RoPE lowers lm_loss by 3.00% (95% CI -5.48% to -0.52%, paired t over 3 seeds): "
        "significant improvement."
    )
    assert verdict["noise_floor_percent"] == 0.0


def test_verdict_significantly_worse():
    verdict = stats.verdict("lm_loss", [100.0, 100.0, 100.0], [102.0, 103.0, 104.0])
    assert verdict["significant"] is True
    assert "raises lm_loss by 3.00%" in verdict["summary"]
    assert "significantly worse" in verdict["summary"]


def test_verdict_higher_is_better_metric():
    verdict = stats.verdict(
        "fitness", [-10.0, -10.0, -10.0], [-9.8, -9.7, -9.6], lower_is_better=False
    )
    assert "raises fitness" in verdict["summary"]
    assert "significant improvement" in verdict["summary"]


def test_verdict_no_significant_difference():
    verdict = stats.verdict("lm_loss", [100.0, 101.0, 99.0], [99.0, 102.0, 99.5])
    assert verdict["significant"] is False
    assert "no significant difference (CI includes zero)" in verdict["summary"]
    # baseline std 1 over mean 100 -> 1% noise floor
    assert verdict["noise_floor_percent"] == pytest.approx(1.0)


def test_verdict_few_seeds_is_a_smoke_result():
    verdict = stats.verdict("lm_loss", [6.0430581122636795], [6.021533235907555], method_name="blt")
    assert verdict["significant"] is None
    assert verdict["noise_floor_percent"] is None
    assert "blt lowers lm_loss by 0.36%" in verdict["summary"]
    assert "do not claim a stable improvement" in verdict["summary"]
    two = stats.verdict("lm_loss", [100.0, 100.0], [90.0, 91.0])
    assert two["significant"] is None  # interval exists, but 2 seeds are never formal


def test_verdict_identical_arms_say_unchanged():
    verdict = stats.verdict("lm_loss", [6.04], [6.04], method_name="rope")
    assert "rope leaves lm_loss unchanged" in verdict["summary"]


def test_build_statistics_block():
    rows = [
        {"seed": 42, "baseline": {"lm_loss": 100.0, "x": 1.0}, "method": {"lm_loss": 98.0}},
        {"seed": 43, "baseline": {"lm_loss": 100.0, "x": 1.0}, "method": {"lm_loss": 97.0}},
        {"seed": 44, "baseline": {"lm_loss": 100.0, "x": 1.0}, "method": {"lm_loss": 96.0}},
    ]
    block = stats.build_statistics(rows, ["lm_loss", "bits_per_byte", "x"])
    assert set(block) == {"lm_loss"}
    entry = block["lm_loss"]
    assert entry["baseline"] == {"mean": 100.0, "std": 0.0, "n": 3}
    assert entry["method"]["mean"] == pytest.approx(97.0)
    assert entry["paired_relative_change_percent"]["mean"] == pytest.approx(-3.0)
    assert entry["significant"] is True
    rows[1]["method"].pop("lm_loss")
    with pytest.raises(ConfigError, match="seeds \\[43\\]"):
        stats.build_statistics(rows, ["lm_loss"])
    assert math.isfinite(block["lm_loss"]["paired_relative_change_percent"]["ci_low"])
