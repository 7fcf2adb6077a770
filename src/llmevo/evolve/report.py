"""The evolution report: ``summary.json`` (schema v2 style, with provenance), a README with
the champion's lineage and the champion-vs-baseline verdict, and two PNG plots (fitness
per trial with the best-so-far line; fitness against parameters). The verdict of record is the
final comparison's typed artifact (``final-comparison.json`` beside the summary, a
``ReproductionArtifact`` with its margin class); the summary's ``final_evaluation`` names it
(``artifact``), copies its verdict (``verdict_of_record``) and shows the same runs' validation
and test metrics, fitness included.

Public API: ``trial_rows``, ``build_summary``, ``write_report``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from matplotlib.figure import Figure
from optuna.trial import FrozenTrial, TrialState

from llmevo.artifacts.io import write_json_atomic, write_text_atomic
from llmevo.artifacts.schema import ReproductionArtifact
from llmevo.evolve.champion import FINAL_COMPARISON, FinalEvaluation, lineage
from llmevo.evolve.knockouts import knockout_lines
from llmevo.evolve.proposer import chosen_by
from llmevo.evolve.sampler import LOST_STATES
from llmevo.reports.plots import save_png
from llmevo.reports.sections import format_decimals

SCHEMA_VERSION = 2
STATE_COLOURS = {"complete": "#1f77b4", "pruned": "#ff7f0e", "diverged": "#d62728",
                 "failed": "#7f7f7f", "invalid": "#9467bd", "duplicate": "#8c564b",
                 "lost": "#bcbd22"}
ARM_NAMES = {"method": "champion"}  # the final comparison's method arm is the champion


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    rows = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        state = attrs.get("state", trial.state.name.lower())
        if trial.state == TrialState.FAIL and state in LOST_STATES:
            state = "lost"  # its worker was killed or interrupted; not counted, retried
        rows.append({
            "number": trial.number,
            "optuna_state": trial.state.name.lower(),
            "state": state,
            "genome_hash": attrs.get("genome_hash"),
            "parent": attrs.get("parent"),
            "mutated_gene": attrs.get("mutated_gene"),
            "chosen_by": chosen_by(trial),
            **({"note": attrs["note"]} if attrs.get("note") else {}),  # a proposer's word on it
            "label": attrs.get("label"),
            # a pruned trial's Optuna value is its hurdle estimate, not a fitness
            "fitness": trial.value if trial.state == TrialState.COMPLETE else None,
            "hurdle_values": {str(k): v for k, v in trial.intermediate_values.items()},
            "fitness_per_seed": attrs.get("fitness_per_seed"),
            "score": attrs.get("score"),
            "seeds": attrs.get("seeds"),
            "parameters": attrs.get("parameters"),
            "retry_of": trial.system_attrs.get("failed_trial"),
            "duration_seconds": trial.duration.total_seconds() if trial.duration else None,
        })
    return rows


def build_summary(
    study: optuna.Study,
    settings: dict[str, Any],
    space: dict[str, Any],
    champion: FrozenTrial,
    baseline: FrozenTrial | None,
    final: FinalEvaluation,
    provenance: dict[str, Any],
    dataset: dict[str, Any],
    comparison: ReproductionArtifact,
    proposer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary; ``comparison``: the final comparison's artifact (its verdict is the
    verdict of record, its tuning block the summary's ``final_tuning``); ``proposer``: the
    external proposer's block (``proposer.proposer_summary``), None for a sampled study."""
    rows = trial_rows(study)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "evolution",
        "study": study.study_name,
        "settings": settings,
        "search_space": space,
        "dataset": dataset,
        "trial_counts": counts,
        "champion": {
            "trial": champion.number,
            "genome_hash": champion.user_attrs.get("genome_hash"),
            "genome": champion.user_attrs.get("genome"),
            "label": champion.user_attrs.get("label"),
            "validation_fitness_per_seed": champion.user_attrs.get("fitness_per_seed"),
            "validation_score": champion.user_attrs.get("score"),
            "parameters": champion.user_attrs.get("parameters"),
            "lineage": [t.number for t in lineage(study, champion)],
        },
        "baseline": None if baseline is None else {
            "trial": baseline.number,
            "genome_hash": baseline.user_attrs.get("genome_hash"),
            "label": baseline.user_attrs.get("label"),
            "validation_fitness_per_seed": baseline.user_attrs.get("fitness_per_seed"),
            "validation_score": baseline.user_attrs.get("score"),
            "parameters": baseline.user_attrs.get("parameters"),
        },
        "final_evaluation": {
            **final.summary(), "artifact": FINAL_COMPARISON,
            "verdict_of_record": comparison.verdict.model_dump(mode="json") if comparison.verdict else None,
        },
        "evaluation_protocol": {
            "selection_split": "validation",
            "test_split": "champion and baseline only, once, after the search",
            "score": "mean validation fitness over re-evaluation seeds minus k standard errors",
            "final_comparison": (f"{FINAL_COMPARISON}: llama_modern against the champion genome as "
                                 "`reproduce --genome` compares it (each arm tuned, paired report seeds, "
                                 f"the verdict on validation {comparison.setup.verdict_metric} with its "
                                 "margin class); the fitness verdicts are reported, not of record"),
        },
        **({"final_tuning": comparison.tuning.model_dump(mode="json", exclude_none=True)}
           if comparison.tuning is not None else {}),
        **({"proposer": proposer} if proposer is not None else {}),
        "trials": rows,
        "provenance": provenance,
    }


def plot_fitness(rows: list[dict[str, Any]], path: Path) -> Path:
    """Fitness per trial with the best-so-far line (matplotlib's object API, no global state;
    written atomically, a failed write one ``WriteError`` naming the file)."""
    figure = Figure(figsize=(7, 4))
    axis = figure.add_subplot()
    best: float | None = None
    xs, best_line = [], []
    for row in rows:
        if row["fitness"] is None:
            continue
        colour = STATE_COLOURS.get(row["state"], "#000000")
        axis.scatter(row["number"], row["fitness"], s=18, color=colour)
        if row["state"] == "complete":
            best = row["fitness"] if best is None else max(best, row["fitness"])
        if best is not None:
            xs.append(row["number"])
            best_line.append(best)
    axis.step(xs, best_line, where="post", color="black", label="best so far")
    for state, colour in STATE_COLOURS.items():
        if any(r["state"] == state and r["fitness"] is not None for r in rows):
            axis.scatter([], [], color=colour, label=state)
    axis.set_xlabel("trial")
    axis.set_ylabel("validation fitness (higher is better)")
    axis.legend(fontsize=8)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    return save_png(figure, path)


def plot_fitness_vs_parameters(rows: list[dict[str, Any]], champion: int, path: Path) -> Path:
    figure = Figure(figsize=(6, 4))
    axis = figure.add_subplot()
    points = [r for r in rows if r["fitness"] is not None and r["parameters"]]
    axis.scatter([r["parameters"] for r in points], [r["fitness"] for r in points], s=18,
                 color="#1f77b4", label="trial")
    for row in points:
        if row["number"] in (0, champion):
            axis.annotate("baseline" if row["number"] == 0 else "champion",
                          (row["parameters"], row["fitness"]), fontsize=8)
    axis.set_xlabel("parameters")
    axis.set_ylabel("validation fitness (higher is better)")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    return save_png(figure, path)


def _tuning_lines(summary: dict[str, Any]) -> list[str]:
    factors = summary["settings"].get("trial_lr_factors")
    lines = [f"Trials were scored at their best of lr x {factors}." if factors else
             "Trials were trained at one learning rate each (untuned)."]
    tuning = summary.get("final_tuning")
    if tuning:
        chosen = ", ".join(f"{ARM_NAMES.get(arm, arm)} {block['chosen']['lr']:.3g}"
                           + (" (on the grid's edge)" if block["chosen_on_edge"] else "")
                           for arm, block in tuning["arms"].items())
        lines.append(f"The final comparison tuned both arms on the grid {[f'{v:.3g}' for v in tuning['grid']]} "
                     f"(tuning seeds {tuning['seeds']}); chosen lr: {chosen}.")
    else:
        lines.append("The final comparison was not tuned: both arms ran at the preset's learning rate.")
    return [" ".join(lines), ""]


def _proposer_lines(block: dict[str, Any] | None) -> list[str]:
    """Who chose the genomes, and what it spent of the budget (a proposer study)."""
    if block is None:
        return []
    command = " ".join(block.get("command", [])) or "an earlier proposer"
    files = ", ".join(f"`{name}` sha256 {digest[:12]}" for name, digest in block.get("files", {}).items())
    calls = block["calls"]
    outcomes = ", ".join(f"{calls[key]} {key.replace('_', ' ')}" for key in
                         ("genome", "out_of_space", "broken", "stop") if calls.get(key))
    states = ", ".join(f"{count} {state}" for state, count in block["trial_states"].items())
    return [f"Genomes chosen by the proposer `{command}`" + (f" ({files})" if files else "")
            + f": {block['trials_chosen']} trial(s) ({states or 'none'}), {block['training_runs']} "
            f"training run(s); {calls['total']} call(s) ({outcomes or 'none'}), {calls['seconds']:.1f} s"
            + ("; it stopped the search" if block["stopped"] else "") + ". Budget: "
            f"{block['budget']['finished']} of {block['budget']['trials']} trials finished; training, "
            "hurdles, rescoring and the final comparison are llmevo's.", ""]


def readme_text(summary: dict[str, Any], study: optuna.Study) -> str:
    champion = summary["champion"]
    final = summary["final_evaluation"]
    by_number = {row["number"]: row for row in summary["trials"]}
    lines = [
        f"# Evolution study `{summary['study']}`",
        "",
        f"Command: `{summary['provenance'].get('command', '')}`",
        "",
        f"Trials: {', '.join(f'{k} {v}' for k, v in sorted(summary['trial_counts'].items()))}. "
        f"Sampler: {summary['settings'].get('sampler')}; preset: {summary['settings'].get('preset')}.",
        "",
        *_proposer_lines(summary.get("proposer")),
        f"Champion: trial {champion['trial']} (`{champion['genome_hash']}`), "
        f"{format_decimals(champion['parameters'])} parameters: {champion['label']}",
        "",
        "## Champion vs baseline (trained again under the same seeds)",
        "",
        "| split | metric | baseline mean ± std | champion mean ± std | Δ% (95% CI) |",
        "|---|---|---|---|---|",
    ]
    for split, metrics in final["splits"].items():
        for metric, block in metrics.items():
            change = block["paired_relative_change_percent"]
            ci = ("" if change["ci_low"] is None
                  else f" ({change['ci_low']:+.2f}, {change['ci_high']:+.2f})")
            lines.append(
                f"| {split} | {metric} | {block['baseline']['mean']:.4f} ± {block['baseline']['std']:.4f} "
                f"| {block['champion']['mean']:.4f} ± {block['champion']['std']:.4f} "
                f"| {change['mean']:+.2f}%{ci} |")
    record = final.get("verdict_of_record")
    lines += ["", f"Seeds: {final['seeds']}. {final['claim_policy']}.", "",
              *([f"**Verdict of record** (validation {record['metric']}, `{final['artifact']}`): "
                 f"{record['summary']}", ""] if record else []),
              f"Test fitness (reported): {final['verdict']['test']['summary']}", "",
              f"Validation fitness (reported): {final['verdict']['validation']['summary']}", "",
              *_tuning_lines(summary),
              *(knockout_lines(summary["knockouts"]) if summary.get("knockouts") else []),
              "## Lineage of the champion", "",
              "| trial | mutated gene | fitness | score | genome |", "|---|---|---|---|---|"]
    for number in champion["lineage"]:
        row = by_number[number]
        how = row["mutated_gene"] or ("baseline" if number == 0 else
                                      "proposed" if row.get("chosen_by") == "proposer" else "random")
        if row.get("note"):
            how += f" ({' '.join(row['note'].split())[:80].replace('|', '/')})"
        lines.append(f"| {number} | {how} "
                     f"| {format_decimals(row['fitness'])} | {format_decimals(row['score'])} | {row['label']} |")
    lines += ["", "![fitness per trial](fitness.png)", "",
              "![fitness against parameters](fitness_vs_parameters.png)", "",
              "Open the study in a browser: `pip install optuna-dashboard; optuna-dashboard "
              f"{summary['settings'].get('storage_display', '<storage URL>')}`.", ""]
    return "\n".join(lines)


def write_report(summary: dict[str, Any], study: optuna.Study, folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "summary": folder / "summary.json",
        "readme": folder / "README.md",
        "fitness": folder / "fitness.png",
        "fitness_vs_parameters": folder / "fitness_vs_parameters.png",
    }
    plot_fitness(summary["trials"], paths["fitness"])
    plot_fitness_vs_parameters(summary["trials"], summary["champion"]["trial"],
                               paths["fitness_vs_parameters"])
    write_json_atomic(paths["summary"], summary)
    write_text_atomic(paths["readme"], readme_text(summary, study))
    return paths
