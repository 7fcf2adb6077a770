"""Learning-rate sensitivity of a tuned comparison (Wortsman et al., arXiv 2309.14322).

Wortsman et al. show that small-scale instabilities and design choices show up as how
sharply the final loss depends on the learning rate, not only as the best loss. A tuned
artifact already holds that curve: every arm's validation metric at every learning rate of
its grid (``tuning`` block, ``llmevo.runner.tuning``). From it, derived here and never
stored (so published artifacts gain it without retraining):

- per arm (``ArmSensitivity``): the spread (worst − best mean over the settings that
  trained), the relative spread (percent of the best), and the *band*: the contiguous run of
  grid settings around the best whose mean is within ``tolerance_percent`` (1%) of it, and
  its width in decades of learning rate (log10 of its highest over its lowest lr; 0 when only
  the best is inside, i.e. narrower than one grid step);
- for the comparison (``AdvantageBand``): the method's learning rates whose mean beats the
  baseline arm's best, and whether the method's advantage is *narrow*: no two neighbouring
  grid points both beat that best (it beats it at its chosen lr but at neither neighbour, at
  isolated learning rates, or nowhere on the tuning seeds).

Every setting is read as its mean over the tuning seeds common to all settings (the
``seeds`` of the block), so confirmed settings (retrained on more seeds) are compared like
for like; a setting with a diverged run on those seeds did not train and is left out of the
spread (and counts as not beating). The tuner chooses the lowest mean, so lower is better.
Wortsman et al.'s own "LR sensitivity" (the expected excess loss over a fixed lr range,
capped at the initial loss) needs the initial loss per setting, which the block does not
record; the spread and the band are what it allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmevo.artifacts.schema import ArmTuning, Tuning
from llmevo.errors import ConfigError

DEFAULT_TOLERANCE_PERCENT = 1.0  # the band: settings within 1% of the arm's best


@dataclass(frozen=True)
class ArmSensitivity:
    """How one arm's tuning metric varies over its learning-rate grid."""

    arm: str
    seeds: tuple[int, ...]  # the tuning seeds every setting was read on
    trained: tuple[float, ...]  # learning rates whose runs all trained, ascending
    diverged: tuple[float, ...]
    best_lr: float
    best: float
    worst_lr: float
    worst: float
    spread: float  # worst − best
    relative_spread_percent: float  # 100 · spread / |best|
    tolerance_percent: float
    band_low_lr: float
    band_high_lr: float
    band_decades: float  # log10(band_high_lr / band_low_lr)


def curve(arm: ArmTuning, seeds: Sequence[int]) -> list[tuple[float, float | None]]:
    """``(lr, mean over seeds)`` ascending by lr; None where a run on those seeds diverged.
    Settings stopped at a halving rung (``--tune-fidelity halving``) are left out."""
    if not seeds:
        raise ConfigError("a tuning block with no tuning seeds has no curve")
    points: list[tuple[float, float | None]] = []
    for setting in sorted(arm.settings, key=lambda s: s.lr):
        if setting.status == "stopped":  # a halving rung's reading is not on the full-length curve
            continue
        missing = [seed for seed in seeds if str(seed) not in setting.validation]
        if missing:
            raise ConfigError(f"tuning setting lr {setting.lr:g} has no value for tuning seed(s) {missing}")
        values = [setting.validation[str(seed)] for seed in seeds]
        trained = all(value is not None and math.isfinite(value) for value in values)
        points.append((setting.lr, math.fsum(values) / len(values) if trained else None))  # type: ignore[arg-type]
    return points


def arm_sensitivity(label: str, arm: ArmTuning, seeds: Sequence[int],
                    tolerance_percent: float = DEFAULT_TOLERANCE_PERCENT) -> ArmSensitivity:
    """The spread and the band of one arm's curve (module docstring)."""
    if not (tolerance_percent > 0 and math.isfinite(tolerance_percent)):
        raise ConfigError(f"the band tolerance must be a positive percentage, got {tolerance_percent}")
    points = curve(arm, seeds)
    trained = [(lr, value) for lr, value in points if value is not None]
    if not trained:
        raise ConfigError(f"{label} arm: no tuning setting trained; there is no curve to read")
    best_lr, best = min(trained, key=lambda point: (point[1], point[0]))
    worst_lr, worst = max(trained, key=lambda point: (point[1], -point[0]))
    threshold = best + abs(best) * tolerance_percent / 100.0
    index = [lr for lr, _ in points].index(best_lr)
    low = high = index
    while low > 0 and points[low - 1][1] is not None and points[low - 1][1] <= threshold:
        low -= 1
    while high < len(points) - 1 and points[high + 1][1] is not None and points[high + 1][1] <= threshold:
        high += 1
    band_low, band_high = points[low][0], points[high][0]
    return ArmSensitivity(
        arm=label, seeds=tuple(seeds), trained=tuple(lr for lr, _ in trained),
        diverged=tuple(lr for lr, value in points if value is None),
        best_lr=best_lr, best=best, worst_lr=worst_lr, worst=worst, spread=worst - best,
        relative_spread_percent=100.0 * (worst - best) / abs(best) if best else math.inf,
        tolerance_percent=tolerance_percent, band_low_lr=band_low, band_high_lr=band_high,
        band_decades=math.log10(band_high / band_low))


def lr_sensitivity(tuning: Tuning, tolerance_percent: float = DEFAULT_TOLERANCE_PERCENT
                   ) -> dict[str, ArmSensitivity]:
    """``{arm: ArmSensitivity}`` for every arm of a tuning block; none for a space tuning
    (``protocol: space``), where the other axes vary from trial to trial and loss against lr
    is not a curve."""
    if tuning.protocol == "space":
        return {}
    return {label: arm_sensitivity(label, arm, tuning.seeds, tolerance_percent)
            for label, arm in tuning.arms.items()}


@dataclass(frozen=True)
class AdvantageBand:
    """Where on the grid the method arm beats the baseline arm's best (tuning seeds)."""

    baseline_best_lr: float
    baseline_best: float
    chosen_lr: float
    neighbours: tuple[float, ...]  # the chosen lr's neighbours on the method's grid
    beating: tuple[float, ...]  # the method's lrs whose mean is below the baseline's best
    narrow: bool
    sentence: str


def advantage_band(tuning: Tuning) -> AdvantageBand | None:
    """The method's advantage over the baseline arm's best across its grid; None unless the
    block has both a ``baseline`` and a ``method`` arm (and for a space tuning: no grid)."""
    if "baseline" not in tuning.arms or "method" not in tuning.arms or tuning.protocol == "space":
        return None
    baseline = arm_sensitivity("baseline", tuning.arms["baseline"], tuning.seeds)
    method = tuning.arms["method"]
    points = curve(method, tuning.seeds)
    chosen = float(method.chosen["lr"])
    lrs = [lr for lr, _ in points]
    index = lrs.index(chosen)
    neighbours = tuple(lrs[i] for i in (index - 1, index + 1) if 0 <= i < len(lrs))
    beats = [value is not None and value < baseline.best for _, value in points]
    beating = tuple(lr for lr, beat in zip(lrs, beats, strict=True) if beat)
    # narrow: no two neighbouring grid points both beat it (empty, one lr, or isolated lrs)
    narrow = not any(beats[i] and beats[i + 1] for i in range(len(beats) - 1))
    seeds = ", ".join(str(seed) for seed in tuning.seeds)
    against = f"the baseline arm's best ({baseline.best:.4f} at lr {baseline.best_lr:.3g})"
    listed = ", ".join(f"{lr:.3g}" for lr in beating)
    if not beating:
        sentence = (f"Narrow advantage: on tuning seed(s) {seeds} no learning rate of the method "
                    f"beats {against}; the advantage is seen on the report seeds only.")
    elif beating == (chosen,):
        sentence = (f"Narrow advantage: on tuning seed(s) {seeds} the method beats {against} "
                    f"only at its chosen lr {chosen:.3g}, not at its neighbours "
                    f"({', '.join(f'{lr:.3g}' for lr in neighbours)}).")
    elif narrow:
        sentence = (f"Narrow advantage: on tuning seed(s) {seeds} the method beats {against} "
                    f"only at isolated learning rates ({listed}), never at two neighbouring "
                    "grid points.")
    else:
        sentence = f"On tuning seed(s) {seeds} the method beats {against} at lr {listed}."
    return AdvantageBand(baseline.best_lr, baseline.best, chosen, neighbours, beating, narrow, sentence)
