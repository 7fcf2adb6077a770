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
- ``gap_trend``: the slope of the per-rung delta against log10 compute (percentage points per
  decade of compute, ``linregress``). Read as the method's *advantage* (-delta): a slope whose
  interval shows the advantage growing is *growing*, shrinking is *shrinking*, else *stable*.
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
  same one (the project's calibration pools these over every ladder: ``transfer_rate``).

Public API: ``RungResult``, ``LossFit``, ``fit_loss``, ``Interval``, ``LadderStatistics``,
``ladder_statistics``, ``ladder_class``, ``trend_class``, ``transfer_rate``,
``compute_to_reach``, ``SATURATING_MIN_RUNGS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from llmevo.errors import ConfigError
from llmevo.eval.stats import paired_relative_change

SATURATING_MIN_RUNGS = 5
DIRECTIONS = {"better": 1, "worse": -1}  # the significant classes; the others carry none
LadderClass = Literal["holds", "reverses", "fades", "emerges", "absent"]
TrendClass = Literal["growing", "shrinking", "stable"]
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
        return cls(float(value), float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail)))


@dataclass(frozen=True)
class LadderStatistics:
    """Everything the module docstring lists, for one ladder."""

    fits: dict[str, LossFit]
    alpha: dict[str, Interval]
    delta: list[dict]  # per rung: rung, compute, mean, ci_low, ci_high, n
    gap_slope: Interval  # delta percentage points per decade of compute
    trend: TrendClass
    compute_multiplier: Interval
    projection_compute: float
    projection: Interval  # delta percent at projection_compute (an extrapolation)
    ladder_class: LadderClass
    transfers: list[dict] = field(default_factory=list)  # rung, next, class, held
    resamples: int = 0
    bootstrap_seed: int = 0


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


def transfers(rungs: Sequence[RungResult]) -> list[dict]:
    """For each rung with a significant direction, whether the next rung has the same class."""
    found = []
    for lower, upper in zip(rungs, rungs[1:], strict=False):
        if _direction(lower.classification):
            found.append({"rung": lower.rung, "next": upper.rung, "class": lower.classification,
                          "next_class": upper.classification,
                          "held": upper.classification == lower.classification})
    return found


def transfer_rate(pairs: Sequence[dict]) -> tuple[int, int]:
    """(held, total) over the transfer pairs of any number of ladders."""
    return sum(1 for pair in pairs if pair["held"]), len(pairs)


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
                      projection_factor: float = 10.0) -> LadderStatistics:
    """The across-rung statistics of ``rungs`` (ascending compute), with bootstrap intervals."""
    if len(rungs) < 2:
        raise ConfigError(f"a ladder needs at least 2 rungs, got {len(rungs)}")
    ordered = sorted(rungs, key=lambda r: r.compute)
    if [r.rung for r in ordered] != [r.rung for r in rungs]:
        raise ConfigError("rungs must be given in ascending compute")
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
    for rung, b_values, m_values in zip(rungs, base, meth, strict=True):
        change = paired_relative_change(b_values.tolist(), m_values.tolist())
        delta.append({"rung": rung.rung, "compute": rung.compute, "mean": change["mean"],
                      "ci_low": change["ci_low"], "ci_high": change["ci_high"], "n": change["n"]})
    gap_slope = Interval.of(slope, samples["slope"])
    return LadderStatistics(
        fits={"baseline": fit_b, "method": fit_m},
        alpha={"baseline": Interval.of(fit_b.alpha, samples["alpha_b"]),
               "method": Interval.of(fit_m.alpha, samples["alpha_m"])},
        delta=delta, gap_slope=gap_slope, trend=trend_class(gap_slope),
        compute_multiplier=Interval.of(multiplier, samples["multiplier"]),
        projection_compute=projection_compute, projection=Interval.of(projected, samples["projected"]),
        ladder_class=ladder_class([r.classification for r in rungs]),
        transfers=transfers(rungs), resamples=resamples, bootstrap_seed=seed,
    )
