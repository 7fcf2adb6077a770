"""Figures for reproduction reports: training curves and per-seed paired differences.

Uses matplotlib's object API with the Agg canvas (no pyplot global state, no display).
PNG bytes are written atomically.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from llmevo.artifacts.io import write_bytes_atomic
from llmevo.errors import ArtifactError

DPI = 120
ARM_COLOURS = {"baseline": "#1f77b4", "method": "#d62728"}


def save_png(figure: Figure, path: Path) -> Path:
    """``figure`` as PNG at ``path``, written atomically (its folder made; a failed write is one
    ``WriteError`` naming the file)."""
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    write_bytes_atomic(Path(path), buffer.getvalue())
    return Path(path)


def _arm_curves(curve: Mapping, arm: str) -> tuple[np.ndarray, np.ndarray]:
    """``(steps (S,), losses (n_seeds, S))`` of one arm's training curve."""
    steps = np.asarray(curve.get("steps", []), dtype=float)
    per_seed = curve.get("per_seed", {})
    if len(steps) == 0 or not per_seed:
        raise ArtifactError(f"training_curves.{arm} needs non-empty 'steps' and 'per_seed'")
    rows = []
    for seed, losses in per_seed.items():
        if len(losses) != len(steps):
            raise ArtifactError(
                f"training_curves.{arm}.per_seed.{seed} has {len(losses)} losses for "
                f"{len(steps)} steps; expected one per step"
            )
        rows.append(losses)
    return steps, np.asarray(rows, dtype=float)


def plot_training_curves(
    training_curves: Mapping[str, Mapping],
    path: Path,
    labels: Mapping[str, str] | None = None,
    title: str = "Training loss",
    ylabel: str = "training loss (nats per token or byte)",
) -> Path:
    """Loss against step for each arm: mean over seeds with a min-max band."""
    figure = Figure(figsize=(7.0, 4.2))
    axes = figure.add_subplot()
    for arm in ("baseline", "method"):
        if arm not in training_curves:
            continue
        steps, losses = _arm_curves(training_curves[arm], arm)  # (S,), (n_seeds, S)
        colour = ARM_COLOURS[arm]
        name = (labels or {}).get(arm, arm)
        n_seeds = losses.shape[0]
        seeds_word = "seed" if n_seeds == 1 else "seeds"
        axes.plot(
            steps,
            losses.mean(axis=0),
            color=colour,
            linewidth=1.8,
            label=f"{name} (mean of {n_seeds} {seeds_word})",
        )
        if n_seeds > 1:
            axes.fill_between(
                steps,
                losses.min(axis=0),
                losses.max(axis=0),
                color=colour,
                alpha=0.2,
                linewidth=0,
                label=f"{name} min-max over seeds",
            )
    axes.set_title(title)
    axes.set_xlabel("training step")
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper right", fontsize="small")
    return save_png(figure, path)


def plot_paired_differences(
    per_seed: Sequence[Mapping],
    metric: str,
    path: Path,
    labels: Mapping[str, str] | None = None,
    lower_is_better: bool = True,
) -> Path:
    """Per-seed ``method - baseline`` of one metric as bars, with the zero line and the mean.

    Bars are green where the method is better on that seed, red where it is worse.
    """
    seeds: list[str] = []
    differences: list[float] = []
    for row in per_seed:
        baseline = row.get("baseline", {}).get(metric)
        method = row.get("method", {}).get(metric)
        if baseline is None or method is None:
            raise ArtifactError(f"per_seed row for seed {row.get('seed')} lacks {metric!r}")
        seeds.append(str(row.get("seed")))
        differences.append(float(method) - float(baseline))
    if not differences:
        raise ArtifactError(f"no per-seed values of {metric!r} to plot")
    names = {"baseline": "baseline", "method": "method", **(labels or {})}
    figure = Figure(figsize=(6.0, 4.0))
    axes = figure.add_subplot()
    positions = np.arange(len(seeds))
    colours = ["#2ca02c" if (value < 0) == lower_is_better else "#d62728" for value in differences]
    axes.bar(
        positions,
        differences,
        color=colours,
        width=0.6,
        label="per-seed difference (green: method better)",
    )
    axes.axhline(0.0, color="black", linewidth=1.0)
    mean = float(np.mean(differences))
    axes.axhline(mean, color="#555555", linestyle="--", linewidth=1.2, label=f"mean {mean:+.4g}")
    low, high = min(0.0, *differences), max(0.0, *differences)
    pad = 0.35 * (high - low or 1.0)
    axes.set_ylim(low - (pad if low < 0 else 0.05 * pad), high + (pad if high > 0 else 0.6 * pad))
    axes.set_xticks(positions, [f"seed {seed}" for seed in seeds])
    axes.set_xlabel("paired seed")
    axes.set_ylabel(f"{metric}: method - baseline")
    axes.set_title(
        f"Paired {metric} difference per seed ({names['method']} vs {names['baseline']})"
    )
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize="small")
    return save_png(figure, path)


def plot_full_experiment(table: Sequence[Mapping], path: Path, metric: str = "lm_loss") -> Path:
    """A full experiment's ``metric`` against retention ratio, one line per arm.

    Rows are ``{arm, retention_ratio, <metric>}``; an arm measured at a single ratio (e.g.
    the unbounded cache) is drawn as a horizontal reference line.
    """
    arms: dict[str, list[tuple[float, float]]] = {}
    for row in table:
        if row.get(metric) is None or row.get("retention_ratio") is None:
            continue
        arms.setdefault(str(row["arm"]), []).append((float(row["retention_ratio"]), float(row[metric])))
    if not arms:
        raise ArtifactError(f"the full experiment has no {metric!r} values to plot")
    figure = Figure(figsize=(6.0, 4.0))
    axes = figure.add_subplot()
    for arm, points in arms.items():
        points.sort()
        if len(points) == 1:
            axes.axhline(points[0][1], color="black", linestyle="--", linewidth=1.2,
                         label=f"{arm} ({points[0][1]:.3f})")
            continue
        ratios, values = zip(*points, strict=True)
        axes.plot(ratios, values, marker="o", linewidth=2, label=arm)
    axes.set_xlabel("retention ratio (kept entries / cache capacity)")
    axes.set_ylabel(f"{metric} (mean over seeds)")
    axes.set_title(f"{metric} against retention")
    axes.invert_xaxis()
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    return save_png(figure, path)


def plot_tuning(
    tuning: Mapping,
    path: Path,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """Validation loss against learning rate (log axis) for each tuned arm, chosen marked.

    A diverged setting (mean null) is left out of the line and marked on the top edge.
    """
    metric = str(tuning.get("metric", "lm_loss"))
    arms = tuning.get("arms") or {}
    if not arms:
        raise ArtifactError("tuning.arms is empty; nothing to plot")
    figure = Figure(figsize=(7.0, 4.2))
    axes = figure.add_subplot()
    for arm in ("baseline", "method"):
        if arm not in arms:
            continue
        settings = sorted(arms[arm].get("settings") or [], key=lambda s: s["lr"])
        finite = [s for s in settings if s.get("mean") is not None]
        colour = ARM_COLOURS[arm]
        name = (labels or {}).get(arm, arm)
        axes.plot([s["lr"] for s in finite], [s["mean"] for s in finite], marker="o",
                  color=colour, linewidth=1.6, label=name)
        chosen = (arms[arm].get("chosen") or {}).get("lr")
        best = [s for s in finite if s["lr"] == chosen]
        if best:
            axes.plot([chosen], [best[0]["mean"]], marker="*", markersize=15, color=colour,
                      linestyle="none", label=f"{name}: chosen lr {chosen:.3g}")
        for s in settings:
            if s.get("mean") is None:
                axes.axvline(s["lr"], color=colour, linestyle=":", linewidth=1.0)
    axes.set_xscale("log")
    axes.set_xlabel("learning rate")
    seeds = tuning.get("seeds") or []
    axes.set_ylabel(f"validation {metric} (mean of {len(seeds)} tuning seed(s))")
    axes.set_title("Tuning: validation loss vs learning rate (dotted: diverged)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return save_png(figure, path)


def tuned_axes(tuning: Mapping) -> list[str]:
    """The axes of a space tuning block (``protocol: space``), in the arms' order, each once."""
    names: list[str] = []
    for arm in ("baseline", "method"):
        for name in ((tuning.get("arms") or {}).get(arm) or {}).get("space") or {}:
            if name not in names:
                names.append(name)
    return names


def plot_tuning_axis(
    tuning: Mapping,
    axis: str,
    path: Path,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """One axis of a space tuning: every trial's mean validation metric against its value on
    ``axis`` (the other axes vary: a scatter, not a curve), per arm; the chosen trial starred,
    the declared range shaded, diverged trials dotted. Log axes are drawn on a log scale;
    ``log1m`` axes (beta2, momentum) as ``1 - value`` on a log scale."""
    metric = str(tuning.get("metric", "lm_loss"))
    arms = tuning.get("arms") or {}
    figure = Figure(figsize=(6.4, 4.0))
    axes = figure.add_subplot()
    scale, plotted = "linear", False
    for arm in ("baseline", "method"):
        block = arms.get(arm) or {}
        record = (block.get("space") or {}).get(axis)
        if record is None:
            continue
        scale = record.get("scale", "linear")

        def shown(value: float, scale: str = scale) -> float:
            return 1.0 - value if scale == "log1m" else value

        colour, name = ARM_COLOURS[arm], (labels or {}).get(arm, arm)
        settings = block.get("settings") or []
        finite = [s for s in settings if s.get("mean") is not None and axis in (s.get("values") or {})]
        axes.scatter([shown(s["values"][axis]) for s in finite], [s["mean"] for s in finite],
                     color=colour, s=28, label=name,
                     marker="o", edgecolors=[colour if s.get("phase") != "extension" else "black"
                                             for s in finite])
        chosen = [s for s in finite if s.get("trial") == block.get("chosen_trial")]
        if chosen:
            value = chosen[0]["values"][axis]
            axes.plot([shown(value)], [chosen[0]["mean"]], marker="*", markersize=15, color=colour,
                      linestyle="none", label=f"{name}: chosen {axis} {value:.3g}")
        for s in settings:
            if s.get("mean") is None and axis in (s.get("values") or {}):
                axes.axvline(shown(s["values"][axis]), color=colour, linestyle=":", linewidth=1.0)
        axes.axvspan(*sorted((shown(record["low"]), shown(record["high"]))), color=colour, alpha=0.06)
        plotted = True
    if not plotted:
        raise ArtifactError(f"tuning: no arm tuned axis {axis!r}; nothing to plot")
    if scale in ("log", "log1m"):
        axes.set_xscale("log")
    axes.set_xlabel(f"1 - {axis}" if scale == "log1m" else axis)
    seeds = tuning.get("seeds") or []
    axes.set_ylabel(f"validation {metric} (mean of {len(seeds)} tuning seed(s))")
    axes.set_title(f"Tuning: validation {metric} vs {axis} (other axes vary; "
                   "black edge: extension trial)", fontsize=9)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return save_png(figure, path)
