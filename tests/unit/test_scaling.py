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
    assert first.trend_fit.trend == "stable" and first.trend in ("stable", "unstable")
    assert first.alpha["baseline"].low < 0.08 < first.alpha["baseline"].high


def test_bad_ladders_are_refused():
    with pytest.raises(ConfigError, match="at least 2 fitted rungs"):
        ladder_statistics(_rungs(0.0)[:1])
    with pytest.raises(ConfigError, match="at least 2 fitted rungs.*degenerate"):
        ladder_statistics(_rungs(0.0)[:2], exclude=[-2])
    with pytest.raises(ConfigError, match="not in the ladder"):
        ladder_statistics(_rungs(0.0), exclude=[5])
    with pytest.raises(ConfigError, match="paired seeds"):
        RungResult(0, 1e10, (1.0, 2.0), (1.0,))
    with pytest.raises(ConfigError, match="ascending"):
        ladder_statistics(list(reversed(_rungs(0.0))))


# --- the rung-level trend (rung_level_trend), leave-one-rung-out, degenerate rungs ------------

X = np.log10(COMPUTES[:4])


def _flat_rungs(deltas: list[float], seeds: int = 5) -> list[RungResult]:
    """Rungs whose every seed has the same relative change: no seed variance at all."""
    return [RungResult(index - 3, c, (5.0 * c ** -0.08,) * seeds, tuple([5.0 * c ** -0.08 * (1 + d / 100)] * seeds),
                       "better")
            for index, (c, d) in enumerate(zip(COMPUTES[:4], deltas, strict=True))]


def test_without_seed_variance_the_trend_is_the_ols_slopes_t_interval():
    """Reference: scipy's linregress slope and standard error, Student t with n-2 df."""
    from scipy.stats import linregress
    from scipy.stats import t as student_t

    deltas = [-2.5, -2.8, -10.8, -12.1]  # rope's rung means, rounded
    fit = scaling.trend_fit(_flat_rungs(deltas))
    reference = linregress(X, deltas)
    half = student_t.ppf(0.975, 2) * reference.stderr
    assert fit.df == 2 and fit.rungs == (-3, -2, -1, 0)
    assert fit.slope == pytest.approx(reference.slope, rel=1e-9)
    assert (fit.low, fit.high) == pytest.approx((reference.slope - half, reference.slope + half), rel=1e-9)
    assert fit.tau2 == pytest.approx(np.sum((np.array(deltas) - reference.intercept - reference.slope * X) ** 2) / 2)
    assert fit.trend == "stable"  # rope's -5 points per decade, once the rungs' scatter counts


def test_with_seed_variances_the_trend_is_the_weighted_closed_form():
    """Reference: the WLS slope and its variance written out (weights 1 / (tau^2 + s_k^2),
    tau^2 by moments from the OLS residuals, variance scaled by max(1, q))."""
    from scipy.stats import t as student_t

    y = np.array([-2.0, -4.5, -5.0, -8.5])
    s2 = np.array([0.4, 0.1, 0.9, 0.2])
    fit = scaling.rung_level_trend([-3, -2, -1, 0], X, y, s2)
    design = np.column_stack([np.ones(4), X])
    hat = design @ np.linalg.inv(design.T @ design) @ design.T
    residual = y - hat @ y
    tau2 = max(0.0, (residual @ residual - np.sum((1 - np.diag(hat)) * s2)) / 2)
    w = 1 / (tau2 + s2)
    xw = np.sum(w * X) / np.sum(w)
    slope = np.sum(w * (X - xw) * (y - np.sum(w * y) / np.sum(w))) / np.sum(w * (X - xw) ** 2)
    intercept = np.sum(w * (y - slope * X)) / np.sum(w)
    q = np.sum(w * (y - intercept - slope * X) ** 2) / 2
    half = student_t.ppf(0.975, 2) * np.sqrt(max(1.0, q) / np.sum(w * (X - xw) ** 2))
    assert fit.tau2 == pytest.approx(tau2, rel=1e-9)
    assert fit.weights == pytest.approx(tuple(w), rel=1e-9)
    assert fit.slope == pytest.approx(slope, rel=1e-9)
    assert (fit.low, fit.high) == pytest.approx((slope - half, slope + half), rel=1e-9)


def test_the_rung_level_interval_covers_the_true_slope_where_a_seed_only_one_does_not():
    """Monte Carlo: rungs scatter about a line (tau = 2 points) and each rung mean carries seed
    noise; the rung-level interval covers the true slope about 95% of the time; an interval
    from the seed variances alone (the fixed-rung view) covers far less often."""
    generator = np.random.default_rng(11)
    true_slope, tau, trials = -3.0, 2.0, 1500
    covered = covered_seed_only = 0
    for _ in range(trials):
        s2 = generator.uniform(0.05, 0.5, 4)
        y = 1.0 + true_slope * X + generator.normal(0, tau, 4) + generator.normal(0, np.sqrt(s2))
        fit = scaling.rung_level_trend([-3, -2, -1, 0], X, y, s2)
        covered += fit.low <= true_slope <= fit.high
        w = 1 / s2
        xw = np.sum(w * X) / np.sum(w)
        slope = np.sum(w * (X - xw) * y) / np.sum(w * (X - xw) ** 2)
        half = 1.96 / np.sqrt(np.sum(w * (X - xw) ** 2))
        covered_seed_only += slope - half <= true_slope <= slope + half
    assert 0.93 <= covered / trials <= 0.995
    assert covered_seed_only / trials < 0.6


def test_two_rungs_give_a_line_and_no_interval():
    fit = scaling.rung_level_trend([0, 1], X[:2], [1.0, 3.0], [0.1, 0.1])
    assert fit.df == 0 and fit.slope == pytest.approx(2.0 / (X[1] - X[0]))
    assert math.isnan(fit.low) and fit.trend == "stable"


def test_leave_one_rung_out_marks_a_trend_carried_by_one_rung_unstable():
    # a clean line: every refit keeps the sign and the class
    line = scaling.trend_fit(_flat_rungs([-10.0 + 4.0 * (x - X[0]) for x in X]))
    loro = scaling.leave_one_rung_out(_flat_rungs([-10.0 + 4.0 * (x - X[0]) for x in X]))
    assert [rung for rung, _ in loro] == [-3, -2, -1, 0]
    assert scaling.trend_of_record(line, loro) == line.trend
    # flat above the bottom rung, one low bottom rung: the slope's sign rests on it
    carried = _flat_rungs([-12.0, -4.0, -4.4, -4.8])
    fit, refits = scaling.trend_fit(carried), scaling.leave_one_rung_out(carried)
    assert fit.slope > 0 and dict(refits)[-3].slope < 0
    assert scaling.trend_of_record(fit, refits) == "unstable"
    stats = ladder_statistics(carried, resamples=20)
    assert stats.trend == "unstable" and stats.trend_fit == fit
    assert scaling.leave_one_rung_out(carried[:2]) == []


def test_a_class_flip_without_a_sign_flip_is_unstable():
    full = scaling.TrendFit(-2.0, -3.0, -1.0, 2, 0.0, (1.0,) * 4, (0, 1, 2, 3), "growing")
    refit = scaling.TrendFit(-1.0, -4.0, 2.0, 1, 0.0, (1.0,) * 3, (1, 2, 3), "stable")
    no_interval = scaling.TrendFit(-1.0, math.nan, math.nan, 0, math.nan, (1.0,) * 2, (2, 3), "stable")
    assert scaling.trend_of_record(full, [(0, refit)]) == "unstable"
    assert scaling.trend_of_record(full, [(0, no_interval)]) == "growing"  # no class to compare


def test_an_excluded_rung_stays_in_the_deltas_and_out_of_every_fit():
    rungs = _rungs(delta_per_decade=4.0)
    kept = ladder_statistics(rungs[1:], resamples=30, seed=1)
    left_out = ladder_statistics(rungs, resamples=30, seed=1, exclude=[rungs[0].rung])
    assert left_out.excluded == (rungs[0].rung,)
    assert [row["fitted"] for row in left_out.delta] == [False, True, True, True]
    assert left_out.trend_fit == kept.trend_fit and left_out.gap_slope == kept.gap_slope
    assert left_out.compute_multiplier == kept.compute_multiplier
    assert left_out.transfers == kept.transfers and left_out.ladder_class == kept.ladder_class


def test_interval_matches_numpy_on_finite_samples_and_reads_infinite_ones_by_order_statistics():
    rng = np.random.default_rng(0)
    finite = rng.normal(size=101).tolist()
    interval = Interval.of(0.0, finite)
    tail = 100 * (1 - 0.95) / 2  # as the interval computes it (2.5 to the last ulp)
    assert (interval.low, interval.high) == (np.percentile(finite, tail), np.percentile(finite, 100 - tail))
    # 40 samples, 10 of them inf (a baseline fit that never reaches): the 97.5th percentile sits
    # at position 38.025 among the sorted samples, between two infinite ones -> inf; the 2.5th
    # at 0.975, between the two smallest finite samples -> their linear interpolation
    samples = [float(v) for v in range(1, 31)] + [math.inf] * 10
    with np.errstate(all="raise"):
        interval = Interval.of(1.0, samples)
    assert interval.low == pytest.approx(1 + 0.975) and interval.high == math.inf
    # a finite lower neighbour and an infinite upper one: inf (position 29.25 of 30 finite + 10 inf)
    assert scaling._percentile(np.asarray(samples), 100 * 29.25 / 39) == math.inf
    # equal infinite neighbours at weight 0.5, and -inf against +inf has no value
    assert scaling._percentile(np.asarray([math.inf, math.inf]), 50) == math.inf
    assert math.isnan(scaling._percentile(np.asarray([-math.inf, math.inf]), 50))
