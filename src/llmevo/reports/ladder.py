"""A ladder's report: two plots and a README, from its ladder file alone.

- ``loss-vs-compute.png``: each arm's verdict metric per rung (mean over seeds, the seeds'
  min-max as error bars) against 6·N·D on log-log axes, with the arm's fit drawn through
  the rungs and dashed one decade past the top rung (the projection).
- ``delta-vs-compute.png``: the per-rung change of the method against the baseline
  (percent) with its 95% paired t-interval, the margin band, and the fitted trend line.
- ``README.md``: the per-rung table, the fits, the trend, the multiplier, the projection
  (labelled an extrapolation), the class and the transfers.

Public API: ``write_ladder_report``, ``plot_ladder_loss``, ``plot_ladder_delta``,
``ladder_summary``, ``rung_table``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from llmevo.artifacts.io import write_text_atomic
from llmevo.artifacts.ladder import IntervalRecord, LadderFile
from llmevo.reports.plots import ARM_COLOURS, _save_png

LOSS_PLOT = "loss-vs-compute.png"
DELTA_PLOT = "delta-vs-compute.png"


def _labels(ladder: LadderFile) -> dict[str, str]:
    return dict(ladder.arm_names)


def plot_ladder_loss(ladder: LadderFile, path: Path) -> Path:
    """Loss against compute per arm, log-log, with each arm's fit and its projection."""
    figure = Figure(figsize=(7.0, 4.4))
    axes = figure.add_subplot()
    computes = np.array([r.compute_6nd for r in ladder.rungs])
    labels = _labels(ladder)
    for arm in ("baseline", "method"):
        values = [np.asarray(getattr(r, arm)) for r in ladder.rungs]
        means = np.array([v.mean() for v in values])
        below = means - np.array([v.min() for v in values])
        above = np.array([v.max() for v in values]) - means
        axes.errorbar(computes, means, yerr=[below, above], fmt="o", color=ARM_COLOURS[arm], capsize=3,
                      label=f"{labels[arm]} (mean, seeds' range)")
        fit = ladder.fits[arm]
        inside = np.geomspace(computes[0], computes[-1], 50)
        past = np.geomspace(computes[-1], ladder.projection["compute"], 20)
        axes.plot(inside, fit.a * inside ** -fit.alpha + fit.l_inf, color=ARM_COLOURS[arm], linewidth=1.2,
                  label=f"fit: alpha {fit.alpha:.3f}")
        axes.plot(past, fit.a * past ** -fit.alpha + fit.l_inf, color=ARM_COLOURS[arm], linewidth=1.0,
                  linestyle="--")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.yaxis.set_major_formatter(ScalarFormatter())
    axes.yaxis.set_minor_formatter(ScalarFormatter())
    axes.set_xlabel("training compute 6·N·D (FLOPs)")
    axes.set_ylabel(f"validation {ladder.metric}")
    axes.set_title(f"{ladder.name} ladder: {ladder.metric} vs compute (dashed: extrapolation)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    return _save_png(figure, path)


def plot_ladder_delta(ladder: LadderFile, path: Path) -> Path:
    """The per-rung change (percent) with its interval, the margin band and the trend line."""
    figure = Figure(figsize=(7.0, 4.2))
    axes = figure.add_subplot()
    computes = np.array([r.compute_6nd for r in ladder.rungs])
    deltas = np.array([r.delta_percent for r in ladder.rungs])
    low = np.array([r.ci_low if r.ci_low is not None else r.delta_percent for r in ladder.rungs])
    high = np.array([r.ci_high if r.ci_high is not None else r.delta_percent for r in ladder.rungs])
    axes.errorbar(computes, deltas, yerr=[deltas - low, high - deltas], fmt="o", color="#333333",
                  capsize=4, label="per rung: mean, 95% paired t-interval")
    axes.axhline(0.0, color="black", linewidth=1.0)
    margin_percent = ladder.margin_percent
    axes.axhspan(-margin_percent, margin_percent, color="#bbbbbb", alpha=0.3, label=f"±{margin_percent:g}% margin")
    slope = ladder.gap_slope_per_decade.value
    if slope is not None:
        centre = np.log10(computes)
        intercept = float(np.mean(deltas) - slope * np.mean(centre))
        line = np.geomspace(computes[0], computes[-1], 20)
        axes.plot(line, intercept + slope * np.log10(line), color="#d62728", linewidth=1.2,
                  label=f"trend: {slope:+.2f} points per decade ({ladder.trend})")
    for record, compute, delta in zip(ladder.rungs, computes, deltas, strict=True):
        axes.annotate(f"rung {record.rung}", (compute, delta), textcoords="offset points", xytext=(6, 6),
                      fontsize="x-small")
    axes.set_xscale("log")
    axes.set_xlabel("training compute 6·N·D (FLOPs)")
    axes.set_ylabel(f"{ladder.metric} change, method vs baseline (%)")
    axes.set_title(f"{ladder.name} vs {_labels(ladder)['baseline']}: the gap across scale ({ladder.ladder_class})")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    return _save_png(figure, path)


def _interval(record: IntervalRecord, digits: int = 2, suffix: str = "") -> str:
    def show(x: float | None) -> str:
        return "∞" if x is None else f"{x:.{digits}f}{suffix}"
    return f"{show(record.value)} [{show(record.low)}, {show(record.high)}]"


def rung_table(ladder: LadderFile) -> str:
    """The per-rung table in Markdown."""
    labels = _labels(ladder)
    lines = [f"| rung | parameters | tokens | epochs | 6·N·D | seeds | {labels['baseline']} | {labels['method']} "
             "| Δ% [95% CI] | class | noise floor | chosen lr (baseline / method) | grid |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ladder.rungs:
        ci = "" if r.ci_low is None else f" [{r.ci_low:+.2f}, {r.ci_high:+.2f}]"
        floor = "" if r.noise_floor_percent is None else f"{r.noise_floor_percent:.2f}%"
        grid = f"{len(r.grid)} points, {r.grid[0]:.3g} … {r.grid[-1]:.3g}"
        lines.append(
            f"| {r.rung} | {r.parameters:,} | {r.training_tokens:,} | {r.epochs:.2f} | {r.compute_6nd:.2e} "
            f"| {len(r.seeds)} | {np.mean(r.baseline):.4f} | {np.mean(r.method):.4f} | {r.delta_percent:+.2f}{ci} "
            f"| {r.classification} | {floor} | {r.chosen_lr['baseline']:.3g} / {r.chosen_lr['method']:.3g} "
            f"| {grid} ({r.grid_rule.get('rule', '')}) |")
    return "\n".join(lines)


def ladder_summary(ladder: LadderFile) -> str:
    """One sentence: the class, the gap at the ends, the trend and the multiplier."""
    first, last = ladder.rungs[0], ladder.rungs[-1]
    multiplier = ladder.compute_multiplier
    return (f"{ladder.name} vs {_labels(ladder)['baseline']} over rungs {first.rung}..{last.rung} "
            f"({ladder.span[0]:.1f}x parameters, {ladder.span[1]:.0f}x compute): **{ladder.ladder_class}** — "
            f"Δ {first.delta_percent:+.2f}% ({first.classification}) at the bottom, {last.delta_percent:+.2f}% "
            f"({last.classification}) at the top; the gap moves {_interval(ladder.gap_slope_per_decade, 2)} "
            f"points per decade of compute (**{ladder.trend}**); at the top rung the baseline needs "
            f"{_interval(multiplier, 2, '×')} its compute to match the method.")


def ladder_readme(ladder: LadderFile) -> str:
    fits = "\n".join(
        f"- {_labels(ladder)[arm]}: {fit.form}; a = {fit.a:.4g}, alpha = {_interval(fit.alpha_interval, 4)}"
        + (f", L_inf = {fit.l_inf:.4f}" if fit.l_inf else "") + (f" ({fit.note})" if fit.note else "")
        for arm, fit in ladder.fits.items())
    projection = ladder.projection
    delta = IntervalRecord.model_validate(projection["delta_percent"])
    transfers = "; ".join(f"rung {t['rung']} {t['class']} → rung {t['next']} {t['next_class']}: "
                          f"{'held' if t['held'] else 'did not hold'}" for t in ladder.transfers) or "none (no rung had a significant direction below the top)"
    provenance = ladder.provenance
    return "\n".join([
        f"# Ladder: {ladder.name} vs {_labels(ladder)['baseline']}",
        "",
        ladder_summary(ladder),
        "",
        rung_table(ladder),
        "",
        f"![{ladder.metric} vs compute]({LOSS_PLOT})",
        f"![Δ vs compute]({DELTA_PLOT})",
        "",
        "## Across rungs",
        "",
        fits,
        f"- gap trend: {_interval(ladder.gap_slope_per_decade, 2)} percentage points of Δ per decade of compute → {ladder.trend}",
        f"- compute multiplier at the top rung: {_interval(ladder.compute_multiplier, 2, '×')}",
        f"- projected Δ at {projection['compute']:.2e} FLOPs: {_interval(delta, 2, '%')} — {projection['label']}",
        f"- transfers: {transfers}",
        f"- intervals: {ladder.bootstrap['method']}, {ladder.bootstrap['resamples']} resamples, seed {ladder.bootstrap['seed']}",
        *([f"- {ladder.top_seeds_note}"] if ladder.top_seeds_note else []),
        f"- tokens per parameter: {ladder.tokens_per_parameter:.2f}; wall time {ladder.wall_seconds / 60:.1f} min",
        "",
        f"Command: `{provenance.get('command')}`; commit {provenance.get('code_commit')} "
        f"(dirty: {provenance.get('code_dirty')}). Each rung's full artifact: "
        + ", ".join(f"[{r.artifact}]({r.artifact})" for r in ladder.rungs) + ".",
        "",
    ])


def write_ladder_report(ladder: LadderFile, folder: Path) -> list[Path]:
    """The two plots and the README into ``folder``."""
    folder = Path(folder)
    written = [plot_ladder_loss(ladder, folder / LOSS_PLOT), plot_ladder_delta(ladder, folder / DELTA_PLOT)]
    write_text_atomic(folder / "README.md", ladder_readme(ladder))
    written.append(folder / "README.md")
    return written
