"""A ladder's report: two plots and a README, from its ladder file alone.

- ``loss-vs-compute.png``: each arm's verdict metric per rung (mean over seeds, the seeds'
  min-max as error bars) against 6·N·D on log-log axes, with the arm's fit drawn through
  the rungs and dashed one decade past the top rung (the projection).
- ``delta-vs-compute.png``: the per-rung change of the method against the baseline
  (percent) with its 95% paired t-interval, the margin band, and the fitted trend line.
- ``README.md``: the per-rung table (degenerate rungs marked), the fits, the trend (the
  rung-level interval of record, its leave-one-rung-out check, and the seed bootstrap's
  narrower interval beside it), the multiplier, the projection (labelled an extrapolation),
  the class and the transfers. A ladder file without ``trend_fit`` (written before) shows
  the seed bootstrap's trend alone.

The leaderboard's view of every published ladder: ``scan_ladders``, ``ladder_row``,
``ladder_section``; the decision accuracy over them is ``reports.decisions``.

Public API: ``write_ladder_report``, ``plot_ladder_loss``, ``plot_ladder_delta``,
``ladder_summary``, ``rung_table``, ``scan_ladders``, ``ladder_row``, ``ladder_section``,
``same_runs``, ``ladder_details`` (the ladders results page's generated section, between
``LADDERS_START`` and ``LADDERS_END``).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from llmevo.artifacts.io import write_text_atomic
from llmevo.artifacts.ladder import IntervalRecord, LadderFile, RungRecord
from llmevo.artifacts.schema import ReproductionArtifact
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
    fitted = np.array([r.rung in fitted_rungs(ladder) for r in ladder.rungs])
    axes.errorbar(computes[fitted], deltas[fitted], yerr=[(deltas - low)[fitted], (high - deltas)[fitted]],
                  fmt="o", color="#333333", capsize=4, label="per rung: mean, 95% paired t-interval")
    if not fitted.all():
        axes.errorbar(computes[~fitted], deltas[~fitted], yerr=[(deltas - low)[~fitted], (high - deltas)[~fitted]],
                      fmt="o", color="#333333", markerfacecolor="white", capsize=4,
                      label="degenerate rung (left out of the trend)")
    axes.axhline(0.0, color="black", linewidth=1.0)
    margin_percent = ladder.margin_percent
    axes.axhspan(-margin_percent, margin_percent, color="#bbbbbb", alpha=0.3, label=f"±{margin_percent:g}% margin")
    trend = ladder.trend_fit
    slope = trend.slope.value if trend is not None else ladder.gap_slope_per_decade.value
    if slope is not None:
        centre = np.log10(computes[fitted])
        weights = np.asarray(trend.weights) if trend is not None else np.ones(centre.size)
        intercept = float(np.sum(weights * (deltas[fitted] - slope * centre)) / np.sum(weights))
        line = np.geomspace(computes[fitted][0], computes[fitted][-1], 20)
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


def fitted_rungs(ladder: LadderFile) -> list[int]:
    """The rungs the across-rung quantities read (all but the excluded degenerate ones)."""
    left_out = set(ladder.degenerate.rungs) if ladder.degenerate and ladder.degenerate.excluded else set()
    return [r.rung for r in ladder.rungs if r.rung not in left_out]


def trend_interval(ladder: LadderFile) -> IntervalRecord:
    """The trend's interval of record: the rung-level one, else (a file written before) the seed bootstrap's."""
    return ladder.trend_fit.slope if ladder.trend_fit is not None else ladder.gap_slope_per_decade


def _slope(record: IntervalRecord) -> str:
    if record.low is None or record.high is None:
        return f"{record.value:+.2f} (two rungs: no interval)"
    return f"{record.value:+.2f} [{record.low:+.2f}, {record.high:+.2f}]"


def trend_lines(ladder: LadderFile) -> list[str]:
    """The README's trend bullets: the rung-level interval, the leave-one-rung-out check, the
    seed bootstrap's interval, and the degenerate-rung note."""
    trend = ladder.trend_fit
    seed_only = (f"seed bootstrap only (rungs fixed): {_interval(ladder.gap_slope_per_decade, 2)}")
    if trend is None:
        return [f"- gap trend: {_interval(ladder.gap_slope_per_decade, 2)} percentage points of Δ per decade "
                f"of compute → {ladder.trend} ({seed_only}; this file has no rung-level fit: "
                "`llmevo report --refit` recomputes it)"]
    lines = [f"- gap trend (rung-level, of record): {_slope(trend.slope)} percentage points of Δ per decade of "
             f"compute over rungs {', '.join(map(str, trend.rungs))} (t, {trend.df} df; rung-level variance "
             f"tau² = {'—' if trend.tau2 is None else f'{trend.tau2:.2f}'}) → **{ladder.trend}**"
             + (f" (the interval alone: {trend.trend})" if trend.unstable else "")]
    if trend.leave_one_out:
        refits = "; ".join(f"without rung {r.left_out}: {_slope(r.slope)}" + (f" ({r.trend})" if r.df else "")
                           + (" — sign flips" if r.sign_flip else "") + (" — class flips" if r.class_flip else "")
                           for r in trend.leave_one_out)
        verdict = "unstable: a refit flips" if trend.unstable else "stable: no refit flips its sign or class"
        lines.append(f"- leave one rung out: {refits} → {verdict}")
    else:
        lines.append("- leave one rung out: not applicable (fewer than 3 rungs fitted)")
    lines.append(f"- {seed_only} → {trend.seed_only_trend} (too narrow: it ignores the rungs' scatter)")
    lines.append(f"- trend method: {trend.method}")
    return lines


def degenerate_line(ladder: LadderFile) -> list[str]:
    record = ladder.degenerate
    if record is None:
        return []
    rungs = ", ".join(map(str, record.rungs))
    what = ("left out of the fits, the trend, the multiplier, the projection, the class and the transfers "
            "(shown in the table)") if record.excluded else "kept in every across-rung quantity (asked for)"
    return [f"- degenerate rung(s) {rungs}: {record.reason}; {what}"]


def lr_transfer_line(ladder: LadderFile) -> list[str]:
    """The chosen learning rates' drift across rungs and what the rule's grids saved."""
    record = ladder.lr_transfer
    if record is None:
        return []
    labels = _labels(ladder)
    drift = "; ".join(f"{labels[arm]} {record.drift_steps[arm]} step(s) ({', '.join(f'{s:+d}' for s in steps)})"
                      for arm, steps in record.steps.items())
    saved = ("every rung was tuned on the full grid" if record.saved_share is None else
             f"the rule's grids on rung(s) {', '.join(map(str, record.ruled_rungs))} cost "
             f"{100 * (1 - record.saved_share):.0f}% of the full grid's compute there ("
             + (f"saved {100 * record.saved_share:.0f}%" if record.saved_share >= 0
                else "more: the arms' predictions lay apart")
             + "; edge extensions not counted)")
    return [f"- chosen lr across rungs under {record.parametrization} parametrization, in lattice steps of "
            f"{record.lattice}: {drift}; {saved}"]


def rung_table(ladder: LadderFile) -> str:
    """The per-rung table in Markdown."""
    labels = _labels(ladder)
    degenerate = set(ladder.degenerate.rungs) if ladder.degenerate else set()
    lines = [f"| rung | parameters | context | tokens | epochs | 6·N·D | seeds | {labels['baseline']} | {labels['method']} "
             "| Δ% [95% CI] | class | noise floor | chosen lr (baseline / method) | grid |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ladder.rungs:
        ci = "" if r.ci_low is None else f" [{r.ci_low:+.2f}, {r.ci_high:+.2f}]"
        floor = "" if r.noise_floor_percent is None else f"{r.noise_floor_percent:.2f}%"
        grid = f"{len(r.grid)} points, {r.grid[0]:.3g} … {r.grid[-1]:.3g}"
        lines.append(
            f"| {r.rung}{' (degenerate)' if r.rung in degenerate else ''} | {r.parameters:,} | {r.sequence_length} | {r.training_tokens:,} | {r.epochs:.2f} | {r.compute_6nd:.2e} "
            f"| {len(r.seeds)} | {np.mean(r.baseline):.4f} | {np.mean(r.method):.4f} | {r.delta_percent:+.2f}{ci} "
            f"| {r.classification} | {floor} | {r.chosen_lr['baseline']:.3g} / {r.chosen_lr['method']:.3g} "
            f"| {grid} ({r.grid_rule.get('rule', '')}) |")
    return "\n".join(lines)


def ladder_summary(ladder: LadderFile) -> str:
    """One sentence: the class, the gap at the ends, the trend and the multiplier."""
    kept = fitted_rungs(ladder)
    fitted = [r for r in ladder.rungs if r.rung in kept]
    first, last = fitted[0], fitted[-1]
    multiplier = ladder.compute_multiplier
    left_out = [r.rung for r in ladder.rungs if r.rung not in kept]
    return (f"{ladder.name} vs {_labels(ladder)['baseline']} over rungs {first.rung}..{last.rung} "
            + (f"(rung {', '.join(map(str, left_out))} left out: degenerate) " if left_out else "")
            + f"({last.parameters / first.parameters:.1f}x parameters, {last.compute_6nd / first.compute_6nd:.0f}x "
            f"compute): **{ladder.ladder_class}** — "
            f"Δ {first.delta_percent:+.2f}% ({first.classification}) at the bottom, {last.delta_percent:+.2f}% "
            f"({last.classification}) at the top; the gap moves {_interval(trend_interval(ladder), 2)} "
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
        *trend_lines(ladder),
        *degenerate_line(ladder),
        *lr_transfer_line(ladder),
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
    kept = fitted_rungs(ladder)
    fitted = [r for r in ladder.rungs if r.rung in kept]
    first, last = fitted[0], fitted[-1]
    trend = ladder.trend_fit
    return {
        "kind": "ladder", "name": ladder.name, "against": ladder.against, "source": source,
        "baseline": ladder.arm_names.get("baseline"),
        "rungs": kept, "all_rungs": [r.rung for r in ladder.rungs], "parameters": [first.parameters, last.parameters],
        "compute_span": last.compute_6nd / first.compute_6nd, "ladder_class": ladder.ladder_class, "trend": ladder.trend,
        "bottom": {"delta_percent": first.delta_percent, "class": first.classification},
        "top": {"delta_percent": last.delta_percent, "class": last.classification},
        "gap_slope_per_decade": ladder.gap_slope_per_decade.model_dump(),
        "trend_interval": trend_interval(ladder).model_dump(),
        "trend_rule": "rung-level" if trend is not None else "seed bootstrap",
        "leave_one_out_flips": None if trend is None else trend.unstable,
        "degenerate_rungs": [r for r in (ladder.degenerate.rungs if ladder.degenerate else [])
                             if r not in kept],
        "compute_multiplier": ladder.compute_multiplier.model_dump(),
        "transfers": ladder.transfers, "code_dirty": ladder.provenance.get("code_dirty"),
        "trend_df": None if trend is None else trend.df,
        "per_rung": [{"rung": r.rung, "parameters": r.parameters, "delta_percent": r.delta_percent,
                      "ci_low": r.ci_low, "ci_high": r.ci_high, "class": r.classification,
                      "fitted": r.rung in kept} for r in ladder.rungs],
    }


def same_runs(record: RungRecord, artifact: ReproductionArtifact) -> bool:
    """Whether a rung's runs are ``artifact``'s: the same report seeds and, seed for seed, the
    same values of the rung's verdict metric for both arms (a rerun under another commit or
    machine gives other last bits)."""
    rows = artifact.per_seed or []
    try:
        values = ([row.seed for row in rows], [float(row.baseline[record.metric]) for row in rows],
                  [float(row.method[record.metric]) for row in rows])
    except (KeyError, TypeError):
        return False
    return values == (record.seeds, record.baseline, record.method)


LADDERS_START = "<!-- ladder details: generated by `llmevo leaderboard`; do not edit by hand -->"
LADDERS_END = "<!-- end of the ladder details -->"


def _change(delta: float, low: float | None, high: float | None) -> str:
    return f"{delta:+.2f}" + ("" if low is None or high is None else f" [{low:+.2f}, {high:+.2f}]")


def ladder_details(rows: list[dict]) -> str:
    """What goes between ``LADDERS_START`` and ``LADDERS_END`` (the ladders results page): how
    many ladders there are and what they span, then one row per ladder with every rung's
    change and class, the trend with its degrees of freedom, the class, and what its rung 0 is
    to the evidence table's quick row (``quick_row`` of the leaderboard's ladder row: the same
    runs, a rerun with the same printed figures, or a run of its own)."""
    if not rows:
        return "No ladder is published."
    tops = sorted({row["all_rungs"][-1] for row in rows})
    by_top = "; ".join(f"{sum(1 for row in rows if row['all_rungs'][-1] == top)} to rung {top}" for top in tops)
    with_row = [row for row in rows if row.get("quick_row") is not None]
    count = {kind: sum(1 for row in with_row if row["quick_row"] == kind)
             for kind in ("same runs", "same figures", "other figures")}
    trends = {trend: sum(1 for row in rows if row["trend"] == trend) for trend in sorted({r["trend"] for r in rows})}
    lines = [
        f"{len(rows)} published ladders; the highest rung each reaches: {by_top}. Of the "
        f"{len(with_row)} whose comparison has a row in the [evidence table](index.md), "
        f"{count['same runs']} have that row's runs as their rung 0 (the same seeds and per-seed "
        f"values), {count['same figures']} a rerun whose change and interval print as the row's, "
        f"and {count['other figures']} a run of their own with other figures than the row's. "
        "Trend (the rung-level interval, its degrees of freedom the fitted rungs less two): "
        + ", ".join(f"{trend} in {count}" for trend, count in trends.items()) + ".",
        "",
        "| ladder | baseline | Δ% [95% CI] and class per rung (parameters) | trend [pts/decade] (df) "
        "| class | rung 0 | report |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        rungs = "; ".join(
            f"rung {r['rung']} ({r['parameters']:,}): {_change(r['delta_percent'], r['ci_low'], r['ci_high'])} "
            f"{r['class']}" + ("" if r["fitted"] else " (left out of the fits)") for r in row["per_rung"])
        slope = IntervalRecord.model_validate(row.get("trend_interval") or row["gap_slope_per_decade"])
        df = "" if row.get("trend_df") is None else f" ({row['trend_df']} df)"
        quick = {None: "no evidence row", "same runs": "the quick row's runs",
                 "same figures": "a rerun, the quick row's figures",
                 "other figures": "its own run, other figures"}[row.get("quick_row")]
        folder = posixpath.dirname(row["source"])
        report = (f"[report](../{posixpath.relpath(folder, 'docs')}/README.md)" if row.get("in_repository")
                  and folder.startswith("docs/") else "—")
        # the ladder's folder names it (two ladders of one comparison differ in it: ``-mup``)
        name = re.sub(r"^\d{4}\.\d{4,5}-", "", posixpath.basename(folder)) or row["name"]
        lines.append(f"| {name} | {row.get('baseline') or row.get('against') or 'ablation'} | {rungs} "
                     f"| {row['trend']} {_interval(slope)}{df} | {row['ladder_class']} | {quick} | {report} |")
    return "\n".join(lines)


def ladder_section(rows: list[dict], link) -> list[str]:
    """The leaderboard's Markdown section for the ladders (``link(row)``: the file's link)."""
    lines = ["", "## Scale ladders", "",
             "Each ladder is the tuned, paired comparison at every rung of the size dial "
             "(`llmevo ladder`); its class reads the lowest and highest fitted rungs' verdicts, its trend "
             "the slope of Δ% with log compute (a t-interval carrying the rungs' scatter and their seed "
             "variance; *unstable* when leaving out one rung flips it). A one-head rung is left out of "
             "ladders of head-dependent slots (position, attention).", "",
             "| method | baseline | rungs | parameters | compute × | Δ% bottom → top | trend [pts/decade] "
             "| compute multiplier | class | ladder |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        slope = IntervalRecord.model_validate(row.get("trend_interval") or row["gap_slope_per_decade"])
        multiplier = IntervalRecord.model_validate(row["compute_multiplier"])
        lines.append(
            f"| {row['name']} | {row.get('baseline') or row['against'] or 'ablation'} | {row['rungs'][0]}..{row['rungs'][-1]} "
            f"| {row['parameters'][0]:,} → {row['parameters'][1]:,} | {row['compute_span']:.0f} "
            f"| {row['bottom']['delta_percent']:+.2f} ({row['bottom']['class']}) → "
            f"{row['top']['delta_percent']:+.2f} ({row['top']['class']}) "
            f"| {row['trend']} {_interval(slope)}"
            + (f" (rung {', '.join(map(str, row['degenerate_rungs']))} left out)" if row.get("degenerate_rungs") else "")
            + f" | {_interval(multiplier, 2, '×')} | {row['ladder_class']} "
            f"| {link(row)} |")
    if not rows:
        lines.append("| — | | | | | | | | no ladders published | |")
    return lines
