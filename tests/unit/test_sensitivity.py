"""Learning-rate sensitivity from a tuning block, on a constructed block worked by hand."""

from __future__ import annotations

import json
import math

import pytest
from test_reports_writing import synthetic_artifact  # a valid 3-seed reproduction, classed better

from llmevo.artifacts.schema import Tuning, validate_artifact
from llmevo.errors import ConfigError
from llmevo.eval.sensitivity import advantage_band, arm_sensitivity, lr_sensitivity
from llmevo.reports.leaderboard import build_leaderboard
from llmevo.reports.readme import write_report

LRS = (1e-3, 3e-3, 1e-2, 3e-2)


def _arm(values: dict[float, dict[str, float | None]], chosen: float, confirmed=()) -> dict:
    settings = []
    for lr, validation in values.items():
        finite = [v for v in validation.values() if v is not None]
        trained = len(finite) == len(validation)
        settings.append({"lr": lr, "validation": validation, "status": "complete" if trained else "diverged",
                         "mean": sum(finite) / len(finite) if trained else None})
    return {"settings": settings, "chosen": {"lr": chosen}, "chosen_on_edge": False,
            "confirmed": list(confirmed)}


def _baseline() -> dict:
    """Means over seeds 1000, 1001: 4.1, 3.6 (best), 3.62, diverged. The best's extra
    confirmation seed 1002 (9.0) is not one of the block's seeds and is ignored."""
    return _arm({1e-3: {"1000": 4.0, "1001": 4.2}, 3e-3: {"1000": 3.5, "1001": 3.7, "1002": 9.0},
                 1e-2: {"1000": 3.62, "1001": 3.62}, 3e-2: {"1000": None, "1001": 5.0}},
                chosen=3e-3, confirmed=(3e-3,))


def _tuning(method_means: tuple[float, ...], chosen: float) -> Tuning:
    method = _arm({lr: {"1000": mean, "1001": mean} for lr, mean in zip(LRS, method_means, strict=True)},
                  chosen=chosen)
    return Tuning.model_validate({"parameter": "lr", "grid": list(LRS), "seeds": [1000, 1001],
                                  "metric": "lm_loss", "confirm_seeds": [1002],
                                  "arms": {"baseline": _baseline(), "method": method}})


def test_spread_and_band_by_hand():
    """Spread 4.1 − 3.6 = 0.5, 13.89% of 3.6; the 1% band is ≤ 3.636: 3e-3 and 1e-2
    (1e-3 at 4.1 is out, 3e-2 diverged), log10(1e-2 / 3e-3) = 0.5229 decades."""
    result = lr_sensitivity(_tuning((3.9, 3.7, 3.55, 3.8), 1e-2))["baseline"]
    assert result.best_lr == 3e-3 and result.best == pytest.approx(3.6)
    assert result.worst_lr == 1e-3 and result.worst == pytest.approx(4.1)
    assert result.spread == pytest.approx(0.5)
    assert result.relative_spread_percent == pytest.approx(100 * 0.5 / 3.6)
    assert (result.band_low_lr, result.band_high_lr) == (3e-3, 1e-2)
    assert result.band_decades == pytest.approx(math.log10(10 / 3))
    assert result.diverged == (3e-2,) and result.trained == (1e-3, 3e-3, 1e-2)
    method = lr_sensitivity(_tuning((3.9, 3.7, 3.55, 3.8), 1e-2))["method"]
    # best 3.55; 1% band ≤ 3.5855: only 1e-2 -> a zero-width band
    assert method.spread == pytest.approx(0.35) and method.band_decades == 0.0

def test_band_stops_where_the_curve_leaves_the_tolerance():
    """5% of the method's best 3.55 is 3.7275: 3e-3 (3.7) is in, 1e-3 (3.9) and 3e-2 (3.8) out."""
    method = lr_sensitivity(_tuning((3.9, 3.7, 3.55, 3.8), 1e-2), tolerance_percent=5.0)["method"]
    assert (method.band_low_lr, method.band_high_lr) == (3e-3, 1e-2)


def test_narrow_advantage_only_at_the_chosen_lr():
    """Baseline best 3.6. Method 3.9, 3.7, 3.55, 3.8: only its chosen 1e-2 beats it."""
    band = advantage_band(_tuning((3.9, 3.7, 3.55, 3.8), 1e-2))
    assert band.beating == (1e-2,) and band.neighbours == (3e-3, 3e-2) and band.narrow
    assert "only at its chosen lr 0.01, not at its neighbours (0.003, 0.03)" in band.sentence


def test_a_wide_advantage_is_not_narrow_and_isolated_ones_are():
    wide = advantage_band(_tuning((3.9, 3.58, 3.55, 3.8), 1e-2))  # 3e-3 and 1e-2 both beat 3.6
    assert wide.beating == (3e-3, 1e-2) and not wide.narrow
    isolated = advantage_band(_tuning((3.5, 3.7, 3.55, 3.8), 1e-2))  # 1e-3 and 1e-2, not adjacent
    assert isolated.beating == (1e-3, 1e-2) and isolated.narrow and "isolated" in isolated.sentence
    nowhere = advantage_band(_tuning((3.9, 3.7, 3.65, 3.8), 1e-2))
    assert nowhere.beating == () and nowhere.narrow and "no learning rate" in nowhere.sentence


def test_a_missing_tuning_seed_value_is_an_error():
    tuning = _tuning((3.9, 3.7, 3.55, 3.8), 1e-2)
    arm = tuning.arms["method"]
    with pytest.raises(ConfigError, match="no value for tuning seed"):
        arm_sensitivity("method", arm, [1000, 1005])
    with pytest.raises(ConfigError, match="tolerance"):
        arm_sensitivity("method", arm, [1000], tolerance_percent=0)


def test_a_narrow_better_says_so_in_the_report_and_the_leaderboard(tmp_path):
    artifact = synthetic_artifact()  # lowers lm_loss ~2% on every seed: classed better
    artifact["tuning"] = json.loads(_tuning((3.9, 3.7, 3.55, 3.8), 1e-2).model_dump_json())
    typed = validate_artifact(artifact)
    text = write_report(typed, tmp_path / "a.json", tmp_path / "out").read_text()
    assert "Narrow advantage: on tuning seed(s) 1000, 1001 the method beats" in text
    assert "spread 0.5000 (13.9% of its best 3.6000 at lr 0.003)" in text
    (row,) = build_leaderboard([(tmp_path / "a.json", typed)], tmp_path)
    assert row["narrow_advantage"] is True and "Narrow advantage" in row["claim"]
    assert row["lr_sensitivity"]["baseline"]["band_decades"] == pytest.approx(math.log10(10 / 3))
    wide = validate_artifact({**artifact, "tuning": json.loads(
        _tuning((3.9, 3.58, 3.55, 3.8), 1e-2).model_dump_json())})
    (row,) = build_leaderboard([(tmp_path / "a.json", wide)], tmp_path)
    assert row["narrow_advantage"] is False and "Narrow" not in row["claim"]
