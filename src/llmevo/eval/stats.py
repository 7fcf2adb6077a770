"""Multi-seed statistics and the claim rules (SPEC "Tiers and claims").

Fewer than 3 paired seeds is a smoke result: no formal comparison, no significance. With 3
or more, each metric gets mean / std / n per arm and a 95% Student t confidence interval of
the paired per-seed relative change; a change is called significant only when that
interval excludes zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from llmevo.errors import ConfigError

FORMAL_MIN_SEEDS = 3
SMOKE_CLAIM = "single/few-seed smoke result; do not claim a stable improvement"
FORMAL_CLAIM = (
    "formal comparison over {n} paired seeds: mean, sample std and n per metric; 95% paired "
    "Student t-interval of the per-seed relative change; significant only when the interval "
    "excludes zero"
)


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean (``math.fsum``); an empty list is an error."""
    if len(values) == 0:
        raise ConfigError("cannot average an empty list of values")
    return math.fsum(values) / len(values)


def summarize(values: Sequence[float]) -> dict:
    """``{"mean", "std", "n"}`` with the sample std (ddof=1); one value has std 0.0."""
    if len(values) == 0:
        raise ConfigError("cannot summarise an empty list of values; expected one per seed")
    n = len(values)
    mean = math.fsum(values) / n
    if n == 1:
        return {"mean": float(mean), "std": 0.0, "n": 1}
    variance = math.fsum((value - mean) ** 2 for value in values) / (n - 1)
    return {"mean": float(mean), "std": math.sqrt(variance), "n": n}


def relative_changes_percent(baseline: Sequence[float], method: Sequence[float]) -> list[float]:
    """Per-seed ``100 * (m_i - b_i) / |b_i|``.

    The absolute value in the denominator keeps the sign equal to the direction of the
    change for negative metrics too (``primary``, ``fitness``); for the usual positive
    losses it is the plain relative change.
    """
    if len(baseline) != len(method):
        raise ConfigError(
            f"paired comparison needs one baseline and one method value per seed; got "
            f"{len(baseline)} baseline and {len(method)} method values"
        )
    if len(baseline) == 0:
        raise ConfigError("paired comparison needs at least one seed; got none")
    if any(value == 0 for value in baseline):
        raise ConfigError("relative change is undefined for a baseline value of 0")
    return [100.0 * (m - b) / abs(b) for b, m in zip(baseline, method, strict=True)]


def paired_relative_change(
    baseline: Sequence[float], method: Sequence[float], confidence: float = 0.95
) -> dict:
    """Mean per-seed relative change (percent) and its Student t confidence interval.

    Returns ``{"mean", "ci_low", "ci_high", "n", "interval"}``; with fewer than 2 seeds the
    bounds are ``None`` and ``interval`` says why.
    """
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must lie in (0, 1), got {confidence}")
    changes = relative_changes_percent(baseline, method)
    summary = summarize(changes)
    n = summary["n"]
    level = f"{100 * confidence:g}%"
    if n < 2:
        return {
            "mean": summary["mean"],
            "ci_low": None,
            "ci_high": None,
            "n": n,
            "interval": f"none: a {level} t-interval needs at least 2 paired seeds, got {n}",
        }
    from scipy import stats as scipy_stats  # imported when a claim needs it (slow import)

    t_value = float(scipy_stats.t.ppf(0.5 + confidence / 2.0, df=n - 1))
    half_width = t_value * summary["std"] / math.sqrt(n)
    return {
        "mean": summary["mean"],
        "ci_low": summary["mean"] - half_width,
        "ci_high": summary["mean"] + half_width,
        "n": n,
        "interval": (
            f"{level} paired Student t-interval of the per-seed relative change "
            f"(t={t_value:.3f}, {n - 1} df)"
        ),
    }


def claim_policy(n_seeds: int) -> tuple[bool, str]:
    """``(formal_comparison, claim_policy text)`` for a number of paired seeds."""
    if n_seeds < FORMAL_MIN_SEEDS:
        return False, SMOKE_CLAIM
    return True, FORMAL_CLAIM.format(n=n_seeds)


def _excludes_zero(change: Mapping) -> bool:
    low, high = change["ci_low"], change["ci_high"]
    return low is not None and high is not None and (low > 0.0 or high < 0.0)


def is_significant(change: Mapping) -> bool | None:
    """``None`` when not a formal comparison, else whether the interval excludes zero."""
    formal, _ = claim_policy(change["n"])
    if not formal:
        return None
    return _excludes_zero(change)


def _percent(value: float) -> str:
    return f"{value:.2f}%"


def verdict(
    metric: str,
    baseline_values: Sequence[float],
    method_values: Sequence[float],
    lower_is_better: bool = True,
    method_name: str = "the method",
    confidence: float = 0.95,
) -> dict:
    """The claim about one metric, in numbers and in plain words.

    Returns ``{metric, lower_is_better, significant, noise_floor_percent, summary}``.
    ``significant`` is ``None`` below 3 seeds; ``noise_floor_percent`` is the baseline's
    seed-to-seed std as a percentage of its mean (``None`` with one seed: unknown).
    """
    change = paired_relative_change(baseline_values, method_values, confidence)
    n = change["n"]
    baseline_summary = summarize(baseline_values)
    noise_floor = (
        100.0 * baseline_summary["std"] / abs(baseline_summary["mean"])
        if n >= 2 and baseline_summary["mean"] != 0
        else None
    )
    significant = is_significant(change)
    mean = change["mean"]
    if mean == 0.0:
        movement = f"{method_name} leaves {metric} unchanged (0.00%)"
    else:
        verb = "lowers" if mean < 0 else "raises"
        movement = f"{method_name} {verb} {metric} by {_percent(abs(mean))}"
    seeds_word = "seed" if n == 1 else "seeds"
    if change["ci_low"] is None:
        detail = f"({n} {seeds_word}, no interval)"
    else:
        level = f"{100 * confidence:g}%"
        detail = (
            f"({level} CI {_percent(change['ci_low'])} to {_percent(change['ci_high'])}, "
            f"paired t over {n} {seeds_word})"
        )
    if significant is None:
        conclusion = SMOKE_CLAIM
    elif not significant:
        conclusion = "no significant difference (CI includes zero)"
    elif (mean < 0) == lower_is_better:
        conclusion = "significant improvement"
    else:
        conclusion = "significantly worse"
    summary = f"{movement} {detail}: {conclusion}."
    if noise_floor is not None:
        summary += f" Baseline seed-to-seed std is {_percent(noise_floor)} of its mean."
    return {
        "metric": metric,
        "lower_is_better": lower_is_better,
        "significant": significant,
        "noise_floor_percent": noise_floor,
        "summary": summary,
    }


def _arm_values(per_seed_rows: Sequence[Mapping], arm: str, metric: str) -> list[float] | None:
    values = [row.get(arm, {}).get(metric) for row in per_seed_rows]
    if all(value is None for value in values):
        return None
    if any(value is None for value in values):
        seeds = [
            row.get("seed")
            for row, value in zip(per_seed_rows, values, strict=True)
            if value is None
        ]
        raise ConfigError(f"metric {metric!r} of the {arm} arm is missing for seeds {seeds}")
    return [float(value) for value in values]


def build_statistics(per_seed_rows: Sequence[Mapping], metrics: Sequence[str]) -> dict:
    """The ``statistics`` block of a reproduction artifact (docs/ARTIFACTS.md).

    ``per_seed_rows`` are ``{seed, baseline: {metric: value}, method: {metric: value}}``.
    A metric measured in no row is left out, and so is one whose baseline is 0 for some
    seed (its relative change is undefined); one measured for only some seeds is an error.
    """
    if len(per_seed_rows) == 0:
        raise ConfigError("build_statistics needs at least one per-seed row; got none")
    block: dict = {}
    for metric in metrics:
        baseline = _arm_values(per_seed_rows, "baseline", metric)
        method = _arm_values(per_seed_rows, "method", metric)
        if baseline is None or method is None:
            continue
        if any(value == 0 for value in baseline):
            continue  # relative change undefined (e.g. an accuracy of 0); the arm means still report it
        change = paired_relative_change(baseline, method)
        block[metric] = {
            "baseline": summarize(baseline),
            "method": summarize(method),
            "paired_relative_change_percent": change,
            "significant": is_significant(change),
        }
    return block


# --- four-class verdicts with a margin (non-inferiority) ---------------------------------

VERDICT_CLASSES = ("better", "non-inferior", "inconclusive", "worse")
# the class of a comparison whose arms compute the same function (``runner.equivalence``), run
# on ``--allow-noop``: whatever its interval says, it is no evidence and never promotes
NOOP_CLASS = "no-op"
DEFAULT_MARGIN_PERCENT = 1.0


def check_margin(margin_percent: float) -> float:
    """The non-inferiority margin δ (percent), refused unless positive and finite."""
    if not (margin_percent > 0 and math.isfinite(margin_percent)):
        raise ConfigError(f"the non-inferiority margin must be a positive percentage, got {margin_percent}")
    return margin_percent


def classify_change(
    ci_low: float | None, ci_high: float | None, margin_percent: float, lower_is_better: bool = True
) -> str | None:
    """One of ``VERDICT_CLASSES`` for a relative change's interval (percent), or ``None``
    without an interval.

    In the direction where negative is an improvement (``lower_is_better``; otherwise the
    interval is negated first): ``worse`` when the lower bound is above 0 (significantly
    worse, even inside the margin), ``better`` when the upper bound is below 0,
    ``non-inferior`` when the upper bound is below the margin δ, else ``inconclusive``
    (the interval reaches δ without excluding 0 from above).
    """
    check_margin(margin_percent)
    if ci_low is None or ci_high is None:
        return None
    low, high = (ci_low, ci_high) if lower_is_better else (-ci_high, -ci_low)
    if low > 0.0:
        return "worse"
    if high < 0.0:
        return "better"
    if high < margin_percent:
        return "non-inferior"
    return "inconclusive"


def leave_one_seed_out(baseline: Sequence[float], method: Sequence[float], margin_percent: float,
                       lower_is_better: bool = True) -> list[tuple[int, str | None]]:
    """The class of the paired comparison read again without each seed in turn: ``(index of
    the seed left out, class)``. Needs 4 or more seeds (3 left: the smallest formal
    comparison); fewer give an empty list."""
    if len(baseline) < 4:
        return []
    found = []
    for left in range(len(baseline)):
        kept_b = [value for i, value in enumerate(baseline) if i != left]
        kept_m = [value for i, value in enumerate(method) if i != left]
        change = paired_relative_change(kept_b, kept_m)
        found.append((left, classify_change(change["ci_low"], change["ci_high"], margin_percent, lower_is_better)))
    return found


def fragile_seeds(seeds: Sequence[int], baseline: Sequence[float], method: Sequence[float],
                  classification: str | None, margin_percent: float, lower_is_better: bool = True) -> list[int]:
    """The report seeds whose leaving out changes ``classification``: a verdict with any is
    *fragile* (it rests on one seed; issue 34)."""
    return [seeds[left] for left, other in leave_one_seed_out(baseline, method, margin_percent, lower_is_better)
            if other != classification]


def classified_verdict(block: dict, change: Mapping, margin_percent: float) -> dict:
    """``block`` (a ``verdict`` dict) with ``classification`` and ``margin_percent`` added and
    the class named in its summary; ``None`` below the formal seed count."""
    formal, _ = claim_policy(change["n"])
    lower = bool(block.get("lower_is_better", True))
    label = classify_change(change["ci_low"], change["ci_high"], margin_percent, lower) if formal else None
    out = dict(block)
    out["classification"] = label
    out["margin_percent"] = margin_percent
    if label is not None:
        out["summary"] = f"{block['summary']} Class (margin {margin_percent:g}%): {label}."
    return out


def decide(metric: str, rows: Sequence[Mapping], statistics: Mapping[str, Mapping],
           margin_percent: float, method_name: str, lower_is_better: bool,
           noop_reason: str | None = None) -> dict:
    """A paired comparison's verdict on ``metric``: the claim in words (``verdict``) over
    ``rows`` (one per seed: ``{"baseline": {...}, "method": {...}}``), with its four-way class
    from the paired relative change's interval in ``statistics`` against ``margin_percent``
    (``classified_verdict``; 3+ seeds). With ``noop_reason`` (arms that compute the same
    function, run anyway) the class is no-op. Every verdict llmevo writes comes from here."""
    decision = verdict(metric, [row["baseline"][metric] for row in rows],
                       [row["method"][metric] for row in rows],
                       lower_is_better=lower_is_better, method_name=method_name)
    if metric in statistics:
        decision = classified_verdict(decision, statistics[metric]["paired_relative_change_percent"],
                                      margin_percent)
    if noop_reason is not None:
        decision = {**decision, "classification": NOOP_CLASS, "margin_percent": margin_percent,
                    "summary": f"{decision['summary']} Class: no-op ({noop_reason}); it never promotes."}
    if len(rows) >= 4:  # each arm's report seeds that stalled (``stalled_seeds``), said in the summary
        stalled = stalled_seeds([row.get("seed", index) for index, row in enumerate(rows)],
                                [row["baseline"][metric] for row in rows], [row["method"][metric] for row in rows],
                                lower_is_better)
        said = [f"the {arm} at seed {', '.join(map(str, seeds))}" for arm, seeds in stalled.items() if seeds]
        decision = {**decision, "stalled_seeds": stalled, **({"summary": decision["summary"] + (
            f" Stalled: {'; '.join(said)} (a paired change far from the other seeds')." )} if said else {})}
    return decision


STALL_Z = 3.5  # Iglewicz & Hoaglin's cut for a modified z-score outlier
STALL_POINTS = 1.0  # and at least this many percentage points off the other seeds' changes


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def stalled_seeds(seeds: Sequence[int], baseline: Sequence[float], method: Sequence[float],
                  lower_is_better: bool = True, threshold: float = STALL_Z,
                  points: float = STALL_POINTS) -> dict[str, list[int]]:
    """Each arm's seeds whose run *stalled*: the seed's paired change (method against
    baseline, in percent, positive when the method is worse) is an outlier among the seeds by
    the modified z-score 0.6745 (d - median) / MAD beyond ``threshold`` (Iglewicz & Hoaglin,
    "How to Detect and Handle Outliers", 1993: robust to the outlier itself) and at least
    ``points`` percentage points from the median change; a change far on the worse side is the
    method's stall, far on the better side the baseline's. A seed's difficulty, shared by both
    arms, cancels in the pairing, so it is never read as a stall. A run that diverged (a value
    not finite) stalled. Fewer than 4 seeds: none can be told from the rest."""
    found: dict[str, list[int]] = {"baseline": [], "method": []}
    changes: dict[int, float] = {}
    for seed, b, m in zip(seeds, baseline, method, strict=True):
        for arm, value in (("baseline", b), ("method", m)):
            if not math.isfinite(value):
                found[arm].append(seed)
        if math.isfinite(b) and math.isfinite(m) and b != 0:
            change = 100.0 * (m - b) / abs(b)
            changes[seed] = change if lower_is_better else -change
    if len(seeds) < 4 or len(changes) < 3:
        return found
    median = _median(list(changes.values()))
    mad = _median([abs(change - median) for change in changes.values()])
    for seed, change in changes.items():
        off = change - median
        if abs(off) >= points and (mad == 0 or 0.6745 * abs(off) / mad > threshold):
            found["method" if off > 0 else "baseline"].append(seed)
    return {arm: sorted(found_seeds) for arm, found_seeds in found.items()}
