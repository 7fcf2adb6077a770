"""Time to target: how much of the baseline's budget the method needs to reach the loss the
baseline ends with (issue 35, item 3), beside the change at equal budget.

Per seed, from the two arms' training-loss curves (the artifact's ``training_curves``, each
arm trained on the same windows in the same order): the *target* is the baseline's final
loss, the mean of its last ``window`` recorded points (a single step's loss is too noisy to
be a target); each arm's *steps to target* is the first recorded step at which the trailing
mean of its last ``window`` points is at or below the target. The seed's *fraction* is the
method's steps over the baseline's: 0.7 means the method reached the baseline's final loss
with 70% of the tokens (the arms consume equal tokens per step). A method that never
reaches it has no fraction (*not reached*). Across seeds the fractions are summarised by
their geometric mean with a paired Student-t interval on their logarithms (3 or more seeds
that reached it).

Where the runs recorded a validation curve (``--val-every N``: each report run's validation
loss on 32 fixed validation windows after every N-th step and the last; the artifact's
``validation_curves``), the reading is on it (``curve: validation``): the target is the
baseline's last point, its final validation loss on those windows, and each arm's steps to
target the first point at or below it (no trailing mean: every point evaluates the same
windows, so there is no window-sampling noise to average; the resolution is N steps, and a
crossing between two points counts at the later one). Without one it is read on the training
curves (``curve: training``): training losses on windows drawn from the training split, which
at this project's presets the runs see about once (one-epoch presets; quick draws ~1M of ~2M
tokens), so they estimate held-out loss. The change at equal budget remains the verdict; this
is the complementary reading of the same runs.

Public API: ``DEFAULT_WINDOW_SHARE``, ``steps_to_target``, ``time_to_target``,
``artifact_time_to_target``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmevo.artifacts.schema import ReproductionArtifact

DEFAULT_WINDOW_SHARE = 0.05  # the trailing mean spans 5% of a curve's recorded points (at least 1)


def _trailing(values: Sequence[float], window: int) -> list[float]:
    """The trailing mean of the last ``window`` values at each point (fewer at the start)."""
    means, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        means.append(total / min(index + 1, window))
    return means


def steps_to_target(steps: Sequence[int], losses: Sequence[float], target: float, window: int) -> int | None:
    """The first recorded step at which the trailing mean of ``losses`` is at or below
    ``target``; None when it never is (or the curve holds a non-finite loss before)."""
    for step, mean in zip(steps, _trailing(losses, window), strict=True):
        if not math.isfinite(mean):
            return None
        if mean <= target:
            return step
    return None


def time_to_target(curves: Mapping[str, Mapping[str, Any]], seeds: Sequence[int],
                   window_share: float = DEFAULT_WINDOW_SHARE, trailing: bool = True) -> dict[str, Any] | None:
    """Per seed the target, each arm's steps to it and the method's fraction; across seeds
    the geometric mean fraction and its 95% interval (``curves``: the artifact's
    ``training_curves``, or ``validation_curves``, as plain data). ``trailing`` False (a
    validation curve): the target is the baseline's last point and each point is read alone
    (a window of 1). None when a curve is missing."""
    from scipy import stats

    per_seed, logs = [], []
    for seed in seeds:
        arms = {arm: (curves.get(arm) or {}) for arm in ("baseline", "method")}
        series = {arm: [v for v in (block.get("per_seed") or {}).get(str(seed)) or []] for arm, block in arms.items()}
        steps = {arm: list(block.get("steps") or []) for arm, block in arms.items()}
        if any(not values or None in values or len(values) != len(steps[arm]) for arm, values in series.items()):
            return None
        window = max(1, round(window_share * len(series["baseline"]))) if trailing else 1
        target = sum(series["baseline"][-window:]) / window
        reached = {arm: steps_to_target(steps[arm], series[arm], target, window) for arm in series}
        fraction = (reached["method"] / reached["baseline"]
                    if reached["method"] is not None and reached["baseline"] else None)
        per_seed.append({"seed": seed, "target": target, "baseline_steps": reached["baseline"],
                         "method_steps": reached["method"], "fraction": fraction})
        if fraction is not None:
            logs.append(math.log(fraction))
    summary: dict[str, Any] = {"seeds": len(per_seed), "reached": len(logs), "fraction": None,
                               "ci_low": None, "ci_high": None}
    if logs:
        mean = math.fsum(logs) / len(logs)
        summary["fraction"] = math.exp(mean)
        if len(logs) >= 3:
            spread = math.sqrt(math.fsum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
            half = float(stats.t.ppf(0.975, len(logs) - 1)) * spread / math.sqrt(len(logs))
            summary["ci_low"], summary["ci_high"] = math.exp(mean - half), math.exp(mean + half)
    return {"per_seed": per_seed, **summary, "window_share": window_share if trailing else None}


def artifact_time_to_target(artifact: ReproductionArtifact) -> dict[str, Any] | None:
    """``time_to_target`` of a reproduction artifact's curves, its summary only (fraction,
    interval, seeds reached, and ``curve``: ``validation`` where the artifact holds validation
    curves, which are then read, else ``training``; with ``every`` for a validation curve);
    for compute-matched arms (``--match flops``) the fraction is of
    the baseline's training FLOPs (each step weighed by its arm's FLOPs per token; ``unit``
    ``flops``). None where the two training curves are not one quantity: without
    curves, after a post-training stage, arms drawing different data (a data recipe: a filtered
    stream has another loss) or another tokenization (a decisive metric other than lm_loss,
    e.g. bits per byte)."""
    validation = artifact.validation_curves
    curves = artifact.training_curves if validation is None else validation
    metric = artifact.headline_change[0]
    if curves is None or artifact.setup.post_training or artifact.dataset.data_recipes or metric != "lm_loss":
        return None
    found = time_to_target(curves.model_dump(), [row.seed for row in artifact.per_seed or []],
                           trailing=validation is None)
    if found is None:
        return None
    summary = {key: found[key] for key in ("fraction", "ci_low", "ci_high", "reached", "seeds")}
    summary["curve"] = "training" if validation is None else "validation"
    if validation is not None:
        summary["every"], summary["windows"] = validation.every, validation.windows
    flops = artifact.setup.flops if artifact.setup.match == "flops" else None
    if flops is not None:  # compute-matched arms: steps weighed by each arm's FLOPs per token
        per_token = flops.flops_per_token
        scale = per_token["method"]["counted"] / per_token["baseline"]["counted"]
        summary.update({key: None if summary[key] is None else summary[key] * scale
                        for key in ("fraction", "ci_low", "ci_high")})
        summary["unit"] = "flops"
    return summary


def describe(found: dict[str, Any] | None) -> str | None:
    """``72% [65, 80]`` (and `` (2 of 5 not reached)``), or None; read on a validation curve,
    `` on validation`` follows (the training curve, the default reading, says nothing more)."""
    if not found:
        return None
    on = " on validation" if found.get("curve") == "validation" else ""
    if found.get("fraction") is None:
        return "never (no seed got there)" + on
    share = f"{100 * found['fraction']:.0f}%"
    if found.get("ci_low") is not None:
        share += f" [{100 * found['ci_low']:.0f}, {100 * found['ci_high']:.0f}]"
    missing = found["seeds"] - found["reached"]
    return share + (f" ({missing} of {found['seeds']} not reached)" if missing else "") + on
