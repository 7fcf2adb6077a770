"""Across-rung statistics of a ladder: loss-vs-compute fits, the gap's trend, the compute
multiplier, a projection, and the ladder class.

Input: one ``RungResult`` per rung, ascending in compute, holding the paired per-seed values
of the verdict metric (lower is better) for both arms and the rung's own verdict class.
Everything here is a function of those numbers; nothing trains.

**Fits** (per arm, on the rung means). With fewer than ``SATURATING_MIN_RUNGS`` rungs the
form is a power law, fitted as a straight line in log-log space (``scipy.stats.linregress``
of log L on log C): ``L = a * C**-alpha``. With at least that many rungs the saturating form
``L = a * C**-alpha + L_inf`` (Kaplan et al. 2001.08361; Hoffmann et al. 2203.15556 use
its two-variable form) is fitted by ``scipy.optimize.curve_fit`` and kept only when it
converges with ``0 <= L_inf < min(L)``; otherwise the power law is used and the record
says so. Three parameters from four points leave one degree of freedom, which is why the
saturating form waits for five rungs.

**Intervals** come from a paired bootstrap over seeds (``resamples``, fixed ``seed``: the
same ladder gives the same intervals): each resample draws, at every rung, the rung's
seeds with replacement (the same draws for both arms, which keeps the pairing), recomputes
the rung means, refits both arms and recomputes every derived quantity. The interval is the
2.5th..97.5th percentile of the resampled values (percentile bootstrap; with 3 or 5 seeds
per rung it is rough, and the record says how many seeds each rung had).

**Derived quantities**:

- ``delta`` per rung: the mean per-seed relative change of the method against the baseline
  (percent; negative: the method's loss is lower) with its paired t-interval
  (``stats.paired_relative_change``, the reproduction's own interval).
- ``gap_slope`` (seeds only): the slope of the per-rung delta (of the rung means) against
  log10 compute (percentage points per decade of compute, ``linregress``) with its paired
  bootstrap interval over seeds. It holds the rungs fixed, so it ignores their own scatter
  about the line: with four rungs it is 5-10x narrower than the scatter allows.
- ``trend_fit`` (the trend of record, ``rung_level_trend``): a weighted least-squares line of
  the per-rung delta on log10 compute that carries both sources of error, a random-effects
  meta-regression. Rung k's delta d_k has seed variance s_k^2 (the per-seed changes'
  variance over n_k) and the rungs scatter about the line with a rung-level variance tau^2,
  estimated by the method of moments from the OLS residuals (E[RSS] = (K-2) tau^2 +
  sum (1 - h_kk) s_k^2, clipped at 0). Each rung gets weight 1 / (tau^2 + s_k^2)
  (``statsmodels`` WLS); the slope's variance is its fixed-weight variance (X'WX)^-1 times
  max(1, q), q the weighted residual mean square (the Knapp-Hartung scaling, not allowed to
  shrink below the variance the weights imply: Roever et al. 2015), with a Student t of
  K-2 degrees of freedom. With no seed variance it is exactly the OLS slope's t-interval;
  with fewer than 3 rungs there is no interval. Read as the method's *advantage* (-delta):
  a slope whose interval lies below zero is *growing*, above zero *shrinking*, else *stable*.
- ``leave_one_out`` (``leave_one_rung_out``): the trend refitted without each rung in turn;
  when a refit's slope has the other sign, or its class (where it has an interval) differs,
  the trend is *unstable* (``trend``: the class, or ``unstable``).
- **Degenerate rungs** (``exclude``): rungs left out of every across-rung quantity (the fits,
  both slopes, the multiplier, the projection, the class and the transfers) but kept in the
  per-rung table, marked. The ladder leaves out a one-head rung (rung -3) for a comparison
  whose arms differ in a head-dependent slot (``HEAD_DEPENDENT_SLOTS``: with one head,
  attention has no heads to differ across and a position or attention variant acts on one
  head of width 16), unless told to include it.
- ``compute_multiplier``: the compute the baseline's fit needs to reach the method's
  measured loss at the top rung, over the top rung's compute (> 1: the method is worth that
  much more compute; < 1: the baseline gets there with less). Infinite when the method's
  loss lies below the baseline's fitted floor.
- ``projection``: the delta the two fits give at ``projection_factor`` times the top rung's
  compute: an *extrapolation*, labelled so, with its bootstrap interval.
- ``ladder_class`` from the verdict classes at the lowest and the highest rung, where
  "better" and "worse" are significant directions and the other two classes are not:
  *holds* (the same direction at both ends), *reverses* (opposite directions), *fades*
  (a direction at the bottom, none at the top), *emerges* (none at the bottom, one at the
  top), *absent* (none at either end).
- ``transfers``: for each rung k with a significant direction, whether rung k+1 has the
  same one.

Public API: ``RungResult``, ``LossFit``, ``fit_loss``, ``Interval``, ``LadderStatistics``,
``ladder_statistics``, ``ladder_class``, ``trend_class``, ``compute_to_reach``,
``transfers``, ``TrendFit``, ``rung_level_trend``, ``leave_one_rung_out``,
``trend_of_record``, ``HEAD_DEPENDENT_SLOTS``, ``SATURATING_MIN_RUNGS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from llmevo.errors import ConfigError
from llmevo.eval.stats import paired_relative_change, relative_changes_percent

SATURATING_MIN_RUNGS = 5
DIRECTIONS = {"better": 1, "worse": -1}  # the significant classes; the others carry none
LadderClass = Literal["holds", "reverses", "fades", "emerges", "absent"]
TrendClass = Literal["growing", "shrinking", "stable"]
TrendOfRecord = Literal["growing", "shrinking", "stable", "unstable"]
# slots whose components act per attention head: a one-head rung cannot show what they do
HEAD_DEPENDENT_SLOTS = frozenset({"position", "attention"})
TREND_METHOD = ("WLS of per-rung Δ% on log10 compute, weights 1/(tau^2 + s_k^2) (rung-level residual "
                "variance by moments + each rung's seed variance), Knapp-Hartung variance (scale >= 1), "
                "Student t with n_rungs - 2 df, 95%")
POWER_LAW = "power law L = a * C^-alpha (log-log linear fit)"
SATURATING = "saturating power law L = a * C^-alpha + L_inf (scipy curve_fit)"


@dataclass(frozen=True)
class RungResult:
    """One rung: its compute (6 N D), the paired per-seed values and its verdict class."""

    rung: int
    compute: float
    baseline: tuple[float, ...]
    method: tuple[float, ...]
    classification: str | None = None

    def __post_init__(self) -> None:
        if len(self.baseline) != len(self.method) or not self.baseline:
            raise ConfigError(f"rung {self.rung}: need the same number (>= 1) of paired seeds per arm, "
                              f"got {len(self.baseline)} and {len(self.method)}")
        if not (self.compute > 0 and math.isfinite(self.compute)):
            raise ConfigError(f"rung {self.rung}: compute must be positive, got {self.compute}")


@dataclass(frozen=True)
class LossFit:
    """A fitted loss-vs-compute curve: ``a * C**-alpha + l_inf`` (``l_inf`` 0 for the power law)."""

    form: str
    a: float
    alpha: float
    l_inf: float = 0.0
    note: str | None = None  # why the saturating form was not used, when it was tried

    def predict(self, compute: float | np.ndarray) -> float | np.ndarray:
        return self.a * np.power(compute, -self.alpha) + self.l_inf


def _power_law(compute: np.ndarray, loss: np.ndarray) -> LossFit:
    from scipy.stats import linregress

    fit = linregress(np.log(compute), np.log(loss))
    return LossFit(POWER_LAW, a=float(math.exp(fit.intercept)), alpha=float(-fit.slope))


def fit_loss(compute: Sequence[float], loss: Sequence[float], saturating: bool | None = None) -> LossFit:
    """The loss-vs-compute fit of one arm (see the module docstring for the forms).
    ``saturating`` None: the saturating form from ``SATURATING_MIN_RUNGS`` points on."""
    x, y = np.asarray(compute, dtype=float), np.asarray(loss, dtype=float)
    if x.size < 2 or np.any(y <= 0) or len(set(x.tolist())) < 2:
        raise ConfigError(f"a loss-vs-compute fit needs >= 2 distinct computes and positive losses; got "
                          f"{x.size} point(s)")
    power = _power_law(x, y)
    if saturating is None:
        saturating = x.size >= SATURATING_MIN_RUNGS
    if not saturating:
        return power
    import warnings

    from scipy.optimize import OptimizeWarning, curve_fit

    scale = float(np.exp(np.mean(np.log(x))))  # fit in C / scale: well-conditioned exponents

    def curve(c: np.ndarray, a: float, alpha: float, l_inf: float) -> np.ndarray:
        return a * np.power(c, -alpha) + l_inf

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", OptimizeWarning)
            (a, alpha, l_inf), _ = curve_fit(
                curve, x / scale, y, p0=(power.predict(scale) * 0.5, max(power.alpha, 1e-3) * 2,
                                         float(y.min()) * 0.5),
                bounds=([0.0, 0.0, 0.0], [np.inf, 5.0, float(y.min())]), maxfev=20_000)
    except (RuntimeError, ValueError, OptimizeWarning) as error:
        return LossFit(power.form, power.a, power.alpha, note=f"saturating fit failed: {error}")
    if not l_inf < y.min() or a <= 0:
        return LossFit(power.form, power.a, power.alpha, note="saturating fit put L_inf at the data")
    return LossFit(SATURATING, a=float(a * scale ** alpha), alpha=float(alpha), l_inf=float(l_inf))


def compute_to_reach(fit: LossFit, loss: float) -> float:
    """The compute at which ``fit`` reaches ``loss`` (inf when ``loss`` is at or below its floor)."""
    excess = loss - fit.l_inf
    if excess <= 0 or fit.alpha <= 0:
        return math.inf
    return float((fit.a / excess) ** (1.0 / fit.alpha))


@dataclass(frozen=True)
class Interval:
    """A point value with its percentile-bootstrap interval."""

    value: float
    low: float
    high: float

    @classmethod
    def of(cls, value: float, samples: Sequence[float], level: float = 0.95) -> Interval:
        values = np.asarray([s for s in samples if not math.isnan(s)], dtype=float)
        if values.size == 0:
            return cls(value, math.nan, math.nan)
        tail = 100 * (1 - level) / 2
        return cls(float(value), _percentile(values, tail), _percentile(values, 100 - tail))


def _percentile(values: np.ndarray, q: float) -> float:
    """``np.percentile(values, q)`` (linear interpolation between order statistics), also where
    samples are infinite (a baseline fit that never reaches the method's loss): numpy's
    interpolation subtracts inf from inf there and answers nan with a RuntimeWarning, where
    the order statistics give the answer (equal neighbours: that value; an infinite upper
    neighbour reached with weight > 0: inf)."""
    if np.isfinite(values).all():
        return float(np.percentile(values, q))
    ordered = np.sort(values)
    position = q / 100 * (ordered.size - 1)
    lower, upper = math.floor(position), math.ceil(position)
    weight = position - lower
    a, b = float(ordered[lower]), float(ordered[upper])
    if weight == 0 or a == b:
        return a
    if math.isinf(a) and math.isinf(b):  # -inf to +inf: no value between them
        return math.nan
    if math.isinf(a) or math.isinf(b):  # the infinite end dominates any weight in (0, 1)
        return a if math.isinf(a) else b
    return a + (b - a) * weight


@dataclass(frozen=True)
class LadderStatistics:
    """Everything the module docstring lists, for one ladder."""

    fits: dict[str, LossFit]
    alpha: dict[str, Interval]
    delta: list[dict]  # per rung (every rung, fitted or not): rung, compute, mean, ci_low, ci_high, n, fitted
    gap_slope: Interval  # delta percentage points per decade of compute: seed bootstrap, rungs fixed
    trend: TrendOfRecord  # trend_fit's class, or unstable (leave_one_out)
    compute_multiplier: Interval
    projection_compute: float
    projection: Interval  # delta percent at projection_compute (an extrapolation)
    ladder_class: LadderClass
    transfers: list[dict] = field(default_factory=list)  # rung, next, class, held
    resamples: int = 0
    bootstrap_seed: int = 0
    trend_fit: TrendFit | None = None
    leave_one_out: list[tuple[int, TrendFit]] = field(default_factory=list)
    excluded: tuple[int, ...] = ()  # rungs left out of every across-rung quantity (degenerate)

    @property
    def seed_only_trend(self) -> TrendClass:
        """The class the seed bootstrap alone gives (the rule before the rung-level fit)."""
        return trend_class(self.gap_slope)


def _direction(classification: str | None) -> int:
    return DIRECTIONS.get(classification or "", 0)


def ladder_class(classifications: Sequence[str | None]) -> LadderClass:
    """The class from the lowest and the highest rung's verdict classes."""
    if len(classifications) < 2:
        raise ConfigError("a ladder class needs at least 2 rungs")
    first, last = _direction(classifications[0]), _direction(classifications[-1])
    if first and last:
        return "holds" if first == last else "reverses"
    if first:
        return "fades"
    return "emerges" if last else "absent"


def trend_class(slope: Interval) -> TrendClass:
    """Of the delta's slope per decade: the advantage (-delta) grows when the slope's
    interval lies below zero, shrinks when it lies above, else stable."""
    if slope.high < 0:
        return "growing"
    if slope.low > 0:
        return "shrinking"
    return "stable"


@dataclass(frozen=True)
class TrendFit:
    """The rung-level trend: the slope of delta per decade with its t-interval (nan bounds
    with fewer than 3 rungs), the degrees of freedom, the rung-level variance tau^2 and the
    weights (both in percentage points squared / their inverse), the rungs fitted and the class."""

    slope: float
    low: float
    high: float
    df: int
    tau2: float
    weights: tuple[float, ...]
    rungs: tuple[int, ...]
    trend: TrendClass

    @property
    def interval(self) -> Interval:
        return Interval(self.slope, self.low, self.high)


def rung_level_trend(rungs: Sequence[int], log10_compute: Sequence[float], delta: Sequence[float],
                     seed_variance: Sequence[float], level: float = 0.95) -> TrendFit:
    """The trend of ``delta`` (per rung, percent) on ``log10_compute`` that carries the rungs'
    scatter and each rung's ``seed_variance`` (the variance of its mean delta); see the
    module docstring for the estimator."""
    x, y = np.asarray(log10_compute, dtype=float), np.asarray(delta, dtype=float)
    s2 = np.asarray(seed_variance, dtype=float)
    if not (x.size == y.size == s2.size == len(rungs)) or x.size < 2 or len(set(x.tolist())) < 2:
        raise ConfigError(f"a trend needs >= 2 rungs of distinct compute, got {x.size}")
    if np.any(s2 < 0) or not np.all(np.isfinite(np.concatenate([x, y, s2]))):
        raise ConfigError("a trend needs finite deltas and non-negative seed variances")
    import statsmodels.api as sm
    from scipy.stats import t as student_t

    design = sm.add_constant(x)  # (K, 2): intercept, log10 compute
    df = x.size - 2
    if df == 0:  # two rungs: the line through them, no interval
        slope = float((y[1] - y[0]) / (x[1] - x[0]))
        return TrendFit(slope, math.nan, math.nan, 0, math.nan, (1.0, 1.0), tuple(rungs), "stable")
    ols = sm.OLS(y, design).fit()
    leverage = ols.get_influence().hat_matrix_diag
    tau2 = max(0.0, float((ols.ssr - np.sum((1.0 - leverage) * s2)) / df))
    total = tau2 + s2
    weights = np.ones_like(total) if np.any(total <= 0) else 1.0 / total
    wls = sm.WLS(y, design, weights=weights).fit()
    scale = max(1.0, float(wls.scale)) if np.all(total > 0) else float(wls.scale)
    # all rungs without variance (no seed spread, no scatter): weights are uniform, the
    # fixed-weight variance is undefined and the OLS t-interval (scale = wls.scale) is the answer
    stderr = math.sqrt(scale * float(wls.normalized_cov_params[1, 1]))
    half = float(student_t.ppf(0.5 + level / 2.0, df)) * stderr
    slope = float(wls.params[1])
    interval = Interval(slope, slope - half, slope + half)
    return TrendFit(slope, interval.low, interval.high, df, tau2, tuple(float(w) for w in weights),
                    tuple(rungs), trend_class(interval))


def rung_deltas(rungs: Sequence[RungResult]) -> tuple[np.ndarray, np.ndarray]:
    """(mean per-seed delta percent, the variance of that mean) per rung; no seed spread
    (one seed) is variance 0."""
    means, variances = [], []
    for rung in rungs:
        changes = np.asarray(relative_changes_percent(list(rung.baseline), list(rung.method)), dtype=float)
        means.append(float(changes.mean()))
        variances.append(float(changes.var(ddof=1)) / changes.size if changes.size > 1 else 0.0)
    return np.array(means), np.array(variances)


def trend_fit(rungs: Sequence[RungResult], level: float = 0.95) -> TrendFit:
    """``rung_level_trend`` of ``rungs``' paired deltas on log10 compute."""
    means, variances = rung_deltas(rungs)
    return rung_level_trend([r.rung for r in rungs], np.log10([r.compute for r in rungs]), means, variances,
                            level)


def leave_one_rung_out(rungs: Sequence[RungResult], level: float = 0.95) -> list[tuple[int, TrendFit]]:
    """The trend refitted without each rung in turn (needs >= 3 rungs: two are left)."""
    if len(rungs) < 3:
        return []
    return [(left.rung, trend_fit([r for r in rungs if r is not left], level)) for left in rungs]


def trend_of_record(full: TrendFit, leave_one_out: Sequence[tuple[int, TrendFit]]) -> TrendOfRecord:
    """The class of ``full``, or *unstable* when a leave-one-out refit's slope has the other
    sign or its class (where it has an interval) differs."""
    for _, refit in leave_one_out:
        if np.sign(refit.slope) != np.sign(full.slope):
            return "unstable"
        if refit.df >= 1 and refit.trend != full.trend:
            return "unstable"
    return full.trend


def transfers(rungs: Sequence[RungResult]) -> list[dict]:
    """For each rung with a significant direction, whether the next rung has the same class."""
    found = []
    for lower, upper in zip(rungs, rungs[1:], strict=False):
        if _direction(lower.classification):
            found.append({"rung": lower.rung, "next": upper.rung, "class": lower.classification,
                          "next_class": upper.classification,
                          "held": upper.classification == lower.classification})
    return found


def _derived(computes: np.ndarray, baseline: np.ndarray, method: np.ndarray, top_method: float,
             projection_compute: float, saturating: bool | None) -> tuple[LossFit, LossFit, float, float, float]:
    """(baseline fit, method fit, delta slope per decade, compute multiplier, projected delta)
    from the rung means of one (re)sample."""
    fit_b = fit_loss(computes, baseline, saturating)
    fit_m = fit_loss(computes, method, saturating)
    deltas = 100.0 * (method / baseline - 1.0)
    from scipy.stats import linregress

    slope = float(linregress(np.log10(computes), deltas).slope)
    multiplier = compute_to_reach(fit_b, top_method) / float(computes[-1])
    projected = 100.0 * (float(fit_m.predict(projection_compute)) / float(fit_b.predict(projection_compute)) - 1.0)
    return fit_b, fit_m, slope, multiplier, projected


def ladder_statistics(rungs: Sequence[RungResult], resamples: int = 2000, seed: int = 0,
                      projection_factor: float = 10.0, exclude: Sequence[int] = ()) -> LadderStatistics:
    """The across-rung statistics of ``rungs`` (ascending compute), with bootstrap intervals;
    the rungs in ``exclude`` are in the per-rung deltas only (see the module docstring)."""
    every = list(rungs)
    ordered = sorted(every, key=lambda r: r.compute)
    if [r.rung for r in ordered] != [r.rung for r in every]:
        raise ConfigError("rungs must be given in ascending compute")
    unknown = set(exclude) - {r.rung for r in every}
    if unknown:
        raise ConfigError(f"excluded rung(s) {sorted(unknown)} are not in the ladder")
    rungs = [r for r in every if r.rung not in set(exclude)]
    if len(rungs) < 2:
        raise ConfigError(f"a ladder needs at least 2 fitted rungs, got {len(rungs)}"
                          + (f" (rungs {sorted(exclude)} left out as degenerate)" if exclude else ""))
    if resamples < 1:
        raise ConfigError(f"bootstrap resamples must be >= 1, got {resamples}")
    computes = np.array([r.compute for r in rungs], dtype=float)
    base = [np.asarray(r.baseline, dtype=float) for r in rungs]
    meth = [np.asarray(r.method, dtype=float) for r in rungs]
    means_b = np.array([values.mean() for values in base])
    means_m = np.array([values.mean() for values in meth])
    projection_compute = float(computes[-1] * projection_factor)
    fit_b, fit_m, slope, multiplier, projected = _derived(
        computes, means_b, means_m, float(means_m[-1]), projection_compute, None)
    saturating = fit_b.form == SATURATING and fit_m.form == SATURATING
    generator = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {"alpha_b": [], "alpha_m": [], "slope": [], "multiplier": [],
                                       "projected": []}
    for _ in range(resamples):
        draws = [generator.integers(0, len(values), len(values)) for values in base]
        sample_b = np.array([values[d].mean() for values, d in zip(base, draws, strict=True)])
        sample_m = np.array([values[d].mean() for values, d in zip(meth, draws, strict=True)])
        b, m, s, k, p = _derived(computes, sample_b, sample_m, float(sample_m[-1]), projection_compute,
                                 saturating)
        for name, value in (("alpha_b", b.alpha), ("alpha_m", m.alpha), ("slope", s),
                            ("multiplier", k), ("projected", p)):
            samples[name].append(value)
    delta = []
    for rung in every:
        change = paired_relative_change(list(rung.baseline), list(rung.method))
        delta.append({"rung": rung.rung, "compute": rung.compute, "mean": change["mean"],
                      "ci_low": change["ci_low"], "ci_high": change["ci_high"], "n": change["n"],
                      "fitted": rung.rung not in set(exclude)})
    gap_slope = Interval.of(slope, samples["slope"])
    fitted_trend = trend_fit(rungs)
    loro = leave_one_rung_out(rungs)
    return LadderStatistics(
        fits={"baseline": fit_b, "method": fit_m},
        alpha={"baseline": Interval.of(fit_b.alpha, samples["alpha_b"]),
               "method": Interval.of(fit_m.alpha, samples["alpha_m"])},
        delta=delta, gap_slope=gap_slope, trend=trend_of_record(fitted_trend, loro),
        compute_multiplier=Interval.of(multiplier, samples["multiplier"]),
        projection_compute=projection_compute, projection=Interval.of(projected, samples["projected"]),
        ladder_class=ladder_class([r.classification for r in rungs]),
        transfers=transfers(rungs), resamples=resamples, bootstrap_seed=seed,
        trend_fit=fitted_trend, leave_one_out=loro, excluded=tuple(sorted(set(exclude))),
    )
