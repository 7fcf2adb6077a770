"""Family-wise error control over many paired comparisons: Holm's step-down procedure.

A table of m comparisons, each read at 95% as if alone, calls about m/20 differences that
are not there. Holm (1979) controls the family-wise error rate at α: sort the p-values,
reject the r-th smallest while it is at most α / (m − r + 1), and stop at the first that is
not. The adjustment is statsmodels' ``multipletests(method="holm")`` step for step
(``holm_step_down``; a reference test holds the two equal, bit for bit, on random families
with ties): statsmodels' Holm branch calls ``gc.collect()`` on every call, 0.35-0.9 s in a
process with torch loaded (measured, docs/LOG.md), which a research loop asking for thousands
of verdicts (``experiments.verdict``) cannot pay. This module adds what the library does not
give: each comparison's p-value from the same paired Student t procedure its interval uses
(``llmevo.eval.stats``), and an adjusted interval.

**The adjusted interval.** For the comparison of rank r (by ascending p), it is the same
paired t-interval at confidence 1 − α / (m − r + 1), the level Holm's step r tests at; once
the procedure stops at rank k (the first comparison it does not reject), every comparison
from rank k on uses rank k's level α / (m − k + 1). So an adjusted interval excludes zero
exactly when Holm rejects (a later comparison never looks significant after an earlier one
failed), and it is never narrower than the per-comparison 95% interval. The four classes are
read from it with the same rules (``classify_change``); the family controls the error of
"differs from zero" (better / worse), while non-inferior read from the widened interval is a
stricter reading of the same rule, not a separate Holm family of non-inferiority tests.

The estimate of a comparison is ``PairedT`` (mean per-seed relative change, its standard
error, n seeds); ``from_interval`` recovers it from a recorded symmetric t-interval (the
standard error is the half-width over t at that confidence, n − 1 degrees of freedom).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmevo.errors import ConfigError

DEFAULT_ALPHA = 0.05  # the family-wise error rate; the per-comparison intervals are 95%


@dataclass(frozen=True)
class PairedT:
    """A paired t estimate of a relative change (percent): mean, standard error, seeds."""

    mean: float
    standard_error: float
    n: int

    def __post_init__(self) -> None:
        values = (self.mean, self.standard_error)
        if self.n < 2 or not all(math.isfinite(v) for v in values) or self.standard_error < 0:
            raise ConfigError(
                f"a paired t estimate needs n >= 2 seeds and a finite mean and standard error "
                f">= 0; got mean {self.mean}, standard error {self.standard_error}, n {self.n}")


def _t_quantile(confidence: float, n: int) -> float:
    from scipy import stats as scipy_stats  # imported when a claim needs it (slow import)

    return float(scipy_stats.t.ppf(0.5 + confidence / 2.0, df=n - 1))


def _check_level(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and 0.0 < value < 1.0):
        raise ConfigError(f"{name} must lie in (0, 1), got {value}")
    return float(value)


def from_interval(mean: float, ci_low: float, ci_high: float, n: int,
                  confidence: float = 0.95) -> PairedT:
    """The estimate behind a recorded paired Student t-interval ``[ci_low, ci_high]`` at
    ``confidence`` over ``n`` seeds (``llmevo.eval.stats.paired_relative_change``)."""
    _check_level("confidence", confidence)
    if n < 2:
        raise ConfigError(f"a t-interval needs at least 2 paired seeds, got {n}")
    half = (ci_high - ci_low) / 2.0
    if not (math.isfinite(half) and half >= 0):
        raise ConfigError(f"interval [{ci_low}, {ci_high}] is not a finite interval")
    centre = (ci_high + ci_low) / 2.0
    if not math.isclose(centre, mean, rel_tol=1e-6, abs_tol=1e-9 + 1e-6 * half):
        raise ConfigError(f"interval [{ci_low}, {ci_high}] is not centred on its mean {mean}; "
                          "not a paired t-interval")
    return PairedT(mean, half / _t_quantile(confidence, n), n)


def p_value(estimate: PairedT) -> float:
    """Two-sided p-value of the paired t-test of no change (mean 0), n − 1 df; with no
    seed-to-seed spread, 0 for a nonzero mean and 1 for zero."""
    if estimate.standard_error == 0.0:
        return 1.0 if estimate.mean == 0.0 else 0.0
    from scipy import stats as scipy_stats

    t_statistic = abs(estimate.mean) / estimate.standard_error
    return float(2.0 * scipy_stats.t.sf(t_statistic, df=estimate.n - 1))


def t_interval(estimate: PairedT, confidence: float) -> tuple[float, float]:
    """The paired Student t-interval of ``estimate`` at ``confidence``."""
    _check_level("confidence", confidence)
    half = _t_quantile(confidence, estimate.n) * estimate.standard_error
    return estimate.mean - half, estimate.mean + half


@dataclass(frozen=True)
class HolmAdjusted:
    """One comparison of a Holm family: its p-value alone and adjusted, whether Holm rejects
    no change, the step-down level its interval uses and that interval (percent)."""

    p_value: float
    p_holm: float
    rejected: bool
    rank: int  # 1 = smallest p-value
    level: float  # α / (m − rank + 1), or the level where the procedure stopped
    ci_low: float
    ci_high: float
    family_size: int
    alpha: float


def holm_step_down(p_values: Sequence[float], alpha: float = DEFAULT_ALPHA):
    """(reject, adjusted p-values), in the order given: Holm's procedure exactly as
    statsmodels' ``multipletests(method="holm")`` computes it (sort, reject while
    p_(r) <= alpha / (m - r + 1), adjusted p the running maximum of (m - r + 1) p_(r), at most
    1), without its ``gc.collect()`` (module docstring)."""
    import numpy as np

    p = np.asarray(p_values, dtype=float)
    m = len(p)
    order = np.argsort(p)
    p_sorted = p[order]
    steps = np.arange(m, 0, -1)
    not_rejected = p_sorted > alpha / steps
    first = np.nonzero(not_rejected)[0]
    not_rejected[(first.min() if first.size else m):] = True
    adjusted = np.maximum.accumulate(p_sorted * steps)
    adjusted[adjusted > 1] = 1
    reject, p_holm = np.empty(m, dtype=bool), np.empty(m)
    reject[order], p_holm[order] = ~not_rejected, adjusted
    return reject, p_holm


def holm(estimates: Sequence[PairedT], alpha: float = DEFAULT_ALPHA) -> list[HolmAdjusted]:
    """Holm's step-down adjustment of ``estimates`` (one family), in their order: p-values
    and rejections from ``holm_step_down``, intervals at each comparison's step-down level
    (module docstring)."""
    _check_level("alpha", alpha)
    if not estimates:
        return []
    import numpy as np

    p_values = [p_value(estimate) for estimate in estimates]
    reject, p_holm = holm_step_down(p_values, alpha)
    m = len(estimates)
    order = [int(i) for i in np.argsort(np.asarray(p_values), kind="stable")]
    rejected_count = int(np.sum(reject))
    results: list[HolmAdjusted | None] = [None] * m
    for position, index in enumerate(order):
        rank = position + 1
        step = min(rank, rejected_count + 1)  # past the first non-rejection: its level
        level = alpha / (m - step + 1)
        low, high = t_interval(estimates[index], 1.0 - level)
        results[index] = HolmAdjusted(
            p_value=p_values[index], p_holm=float(p_holm[index]), rejected=bool(reject[index]),
            rank=rank, level=level, ci_low=low, ci_high=high, family_size=m, alpha=alpha)
    return [result for result in results if result is not None]
