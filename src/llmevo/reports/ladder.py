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
from llmevo.reports.plots import ARM_COLOURS, save_png

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
    return save_png(figure, path)


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
    return save_png(figure, path)


def _interval(record: IntervalRecord, digits: int = 2, suffix: str = "") -> str:
    def show(x: float | None) -> str:
        return "∞" if x is None else f"{x:.{digits}f}{suffix}"
    return f"{show(record.value)} [{show(record.low)}, {show(record.high)}]"


def rung_table(ladder: LadderFile) -> str:
    """The per-rung table in Markdown."""
    labels = _labels(ladder)
    lines = [f"| rung | parameters | context | tokens | epochs | 6·N·D | seeds | {labels['baseline']} | {labels['method']} "
             "| Δ% [95% CI] | class | noise floor | chosen lr (baseline / method) | grid |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ladder.rungs:
        ci = "" if r.ci_low is None else f" [{r.ci_low:+.2f}, {r.ci_high:+.2f}]"
        floor = "" if r.noise_floor_percent is None else f"{r.noise_floor_percent:.2f}%"
        grid = f"{len(r.grid)} points, {r.grid[0]:.3g} … {r.grid[-1]:.3g}"
        lines.append(
            f"| {r.rung} | {r.parameters:,} | {r.sequence_length} | {r.training_tokens:,} | {r.epochs:.2f} | {r.compute_6nd:.2e} "
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
        f"- tokens per parameter: {ladder.tokens_per_parameter:.2f}; wall time {ladder.wall_seconds / 60:.1f} min "
        f"({', '.join(f'rung {r.rung}: {r.wall_seconds / 60:.1f} min' + (f', {r.cpu_seconds / 60:.1f} core-min' if r.cpu_seconds else '') + (f', peak {r.peak_memory_mb:.0f} MiB' if r.peak_memory_mb else '') for r in ladder.rungs)})",
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


# --- the leaderboard's view of every published ladder ----------------------------------------

LADDER_FILE = "ladder.json"


def scan_ladders(roots: list[Path]) -> list[tuple[Path, LadderFile]]:
    """Every ladder file at ``<root>/ladders/*/ladder.json``, loaded and validated (one that
    does not load is an ``ArtifactError`` naming it), sorted by path."""
    from llmevo.artifacts.ladder import load_ladder

    found = []
    for root in roots:
        folder = Path(root) / "ladders"
        if Path(root).is_dir() and folder.is_dir():
            found += [(path, load_ladder(path)) for path in sorted(folder.glob(f"*/{LADDER_FILE}"))]
    return found


def ladder_row(path: Path, ladder: LadderFile, source: str) -> dict:
    """One leaderboard row of a ladder (the JSON the leaderboard writes)."""
    first, last = ladder.rungs[0], ladder.rungs[-1]
    return {
        "kind": "ladder", "name": ladder.name, "against": ladder.against, "source": source,
        "baseline": ladder.arm_names.get("baseline"),
        "rungs": [r.rung for r in ladder.rungs], "parameters": [first.parameters, last.parameters],
        "compute_span": ladder.span[1], "ladder_class": ladder.ladder_class, "trend": ladder.trend,
        "bottom": {"delta_percent": first.delta_percent, "class": first.classification},
        "top": {"delta_percent": last.delta_percent, "class": last.classification},
        "gap_slope_per_decade": ladder.gap_slope_per_decade.model_dump(),
        "compute_multiplier": ladder.compute_multiplier.model_dump(),
        "transfers": ladder.transfers, "code_dirty": ladder.provenance.get("code_dirty"),
    }


def calibration(rows: list[dict]) -> dict:
    """The project's own transfer rate: over every ladder, the rung-k verdicts (better or
    worse) whose class still holds at rung k+1."""
    pairs = [pair for row in rows for pair in row["transfers"]]
    held = sum(1 for pair in pairs if pair["held"])
    return {"held": held, "pairs": len(pairs), "ladders": len(rows),
            "rate": held / len(pairs) if pairs else None,
            "definition": "over every published ladder, the share of rung-k verdicts classed better or "
                          "worse whose class is the same at rung k+1"}


def calibration_sentence(summary: dict) -> str:
    if not summary["pairs"]:
        return (f"Transfer across scale: no rung-to-rung pair yet over {summary['ladders']} ladder(s) "
                "(no rung below the top with a better or worse verdict).")
    return (f"Transfer across scale: of {summary['pairs']} rung-k verdicts (better or worse) over "
            f"{summary['ladders']} ladder(s), {summary['held']} held at rung k+1 "
            f"({100 * summary['rate']:.0f}%).")


def ladder_section(rows: list[dict], link) -> list[str]:
    """The leaderboard's Markdown section for the ladders (``link(row)``: the file's link)."""
    lines = ["", "## Scale ladders", "",
             "Each ladder is the tuned, paired comparison at every rung of the size dial "
             "(`llmevo ladder`); its class reads the lowest and highest rungs' verdicts, its trend "
             "the slope of Δ% with log compute (bootstrap interval over seeds).", "",
             "| method | baseline | rungs | parameters | compute × | Δ% bottom → top | trend [pts/decade] "
             "| compute multiplier | class | ladder |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        slope = IntervalRecord.model_validate(row["gap_slope_per_decade"])
        multiplier = IntervalRecord.model_validate(row["compute_multiplier"])
        lines.append(
            f"| {row['name']} | {row.get('baseline') or row['against'] or 'ablation'} | {row['rungs'][0]}..{row['rungs'][-1]} "
            f"| {row['parameters'][0]:,} → {row['parameters'][1]:,} | {row['compute_span']:.0f} "
            f"| {row['bottom']['delta_percent']:+.2f} ({row['bottom']['class']}) → "
            f"{row['top']['delta_percent']:+.2f} ({row['top']['class']}) "
            f"| {row['trend']} {_interval(slope)} | {_interval(multiplier, 2, '×')} | {row['ladder_class']} "
            f"| {link(row)} |")
    if not rows:
        lines.append("| — | | | | | | | | no ladders published | |")
    lines += ["", calibration_sentence(calibration(rows))]
    return lines
