"""The ladder's across-rung statistics against closed forms (eval/scaling.py)."""

import math

import numpy as np
import pytest

from llmevo.errors import ConfigError
from llmevo.eval import scaling
from llmevo.eval.scaling import Interval, RungResult, compute_to_reach, fit_loss, ladder_statistics

COMPUTES = [1e10, 4e10, 1.6e11, 6.4e11, 2.56e12]


def test_power_law_recovers_exact_exponent():
    losses = [5.0 * c ** -0.08 for c in COMPUTES[:4]]
    fit = fit_loss(COMPUTES[:4], losses)
    assert fit.form == scaling.POWER_LAW
    assert fit.alpha == pytest.approx(0.08, rel=1e-9)
    assert fit.a == pytest.approx(5.0, rel=1e-9)
    assert fit.predict(1e13) == pytest.approx(5.0 * 1e13 ** -0.08, rel=1e-9)


def test_saturating_fit_recovers_floor_from_five_rungs():
    losses = [20.0 * c ** -0.12 + 2.5 for c in COMPUTES]
    fit = fit_loss(COMPUTES, losses)
    assert fit.form == scaling.SATURATING
    assert fit.l_inf == pytest.approx(2.5, rel=1e-3)
    assert fit.alpha == pytest.approx(0.12, rel=1e-3)
    assert fit.predict(COMPUTES[2]) == pytest.approx(losses[2], rel=1e-6)


def test_compute_to_reach_inverts_the_fit():
    fit = scaling.LossFit(scaling.SATURATING, a=10.0, alpha=0.1, l_inf=1.0)
    target = float(fit.predict(3e11))
    assert compute_to_reach(fit, target) == pytest.approx(3e11, rel=1e-9)
    assert compute_to_reach(fit, 0.9) == math.inf  # below the floor


@pytest.mark.parametrize(("classes", "expected"), [
    (["better", "inconclusive", "better"], "holds"),
    (["worse", "worse"], "holds"),
    (["better", "worse"], "reverses"),
    (["better", "non-inferior"], "fades"),
    (["inconclusive", "better"], "emerges"),
    (["non-inferior", "better", "inconclusive"], "absent"),
])
def test_ladder_class(classes, expected):
    assert scaling.ladder_class(classes) == expected


def test_trend_class_reads_the_advantage():
    assert scaling.trend_class(Interval(-1.0, -1.5, -0.2)) == "growing"  # delta falls: advantage grows
    assert scaling.trend_class(Interval(1.0, 0.2, 1.5)) == "shrinking"
    assert scaling.trend_class(Interval(0.1, -0.3, 0.5)) == "stable"


def _rungs(delta_per_decade: float, noise: float = 0.0, seeds: int = 5) -> list[RungResult]:
    """Baseline on an exact power law; the method's delta moves linearly in log10 compute."""
    generator = np.random.default_rng(7)
    rungs = []
    for index, compute in enumerate(COMPUTES[:4]):
        base = 5.0 * compute ** -0.08
        delta = -10.0 + delta_per_decade * math.log10(compute / COMPUTES[0])
        baseline = base * (1 + noise * generator.standard_normal(seeds))
        method = baseline * (1 + delta / 100) * (1 + noise * generator.standard_normal(seeds))
        rungs.append(RungResult(index - 2, compute, tuple(baseline), tuple(method), "better"))
    return rungs


def test_gap_trend_and_multiplier_on_a_constructed_ladder():
    stats = ladder_statistics(_rungs(delta_per_decade=4.0), resamples=50)
    assert stats.gap_slope.value == pytest.approx(4.0, rel=1e-9)  # exact: no noise
    assert stats.trend == "shrinking"  # the -10% gap closes by 4 points per decade
    assert [row["mean"] for row in stats.delta][0] == pytest.approx(-10.0, rel=1e-9)
    # the method's top-rung loss on the baseline's exact law: C' = (a / L)^(1/alpha)
    top = stats.delta[-1]
    method_loss = 5.0 * COMPUTES[3] ** -0.08 * (1 + top["mean"] / 100)
    expected = (5.0 / method_loss) ** (1 / 0.08) / COMPUTES[3]
    assert stats.compute_multiplier.value == pytest.approx(expected, rel=1e-6)
    assert stats.ladder_class == "holds"
    assert all(pair["held"] for pair in stats.transfers) and len(stats.transfers) == 3


def test_bootstrap_interval_is_reproducible_and_covers_the_truth():
    first = ladder_statistics(_rungs(0.0, noise=0.01), resamples=300, seed=3)
    second = ladder_statistics(_rungs(0.0, noise=0.01), resamples=300, seed=3)
    assert first.gap_slope == second.gap_slope
    assert first.gap_slope.low < 0.0 < first.gap_slope.high  # a constant gap: slope 0 inside
    assert first.trend == "stable"
    assert first.alpha["baseline"].low < 0.08 < first.alpha["baseline"].high


def test_bad_ladders_are_refused():
    with pytest.raises(ConfigError, match="at least 2 rungs"):
        ladder_statistics(_rungs(0.0)[:1])
    with pytest.raises(ConfigError, match="paired seeds"):
        RungResult(0, 1e10, (1.0, 2.0), (1.0,))
    with pytest.raises(ConfigError, match="ascending"):
        ladder_statistics(list(reversed(_rungs(0.0))))
