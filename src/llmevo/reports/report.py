"""Human-readable reports (``README.md`` + plots) from schema-v2 artifacts.

Takes a validated, typed artifact (``llmevo.artifacts.load_artifact``; an unvalidated dict
is refused) and reads its JSON form, so that historical artifacts that lack the newer
optional blocks still get a report: a missing block is said to be missing, never invented. Two kinds are rendered: reproduction artifacts (baseline arm vs
method arm) and component-diagnostic artifacts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from llmevo.artifacts.io import write_text_atomic
from llmevo.artifacts.schema import Artifact, DiagnosticArtifact, ReproductionArtifact
from llmevo.errors import ArtifactError, ConfigError
from llmevo.eval.metrics import LOWER_IS_BETTER
from llmevo.eval.stats import claim_policy, relative_changes_percent, verdict
from llmevo.reports.plots import (
    plot_full_experiment,
    plot_paired_differences,
    plot_training_curves,
    plot_tuning,
)

# Validation metrics shown in the results table, in this order, where the artifact has them.
TABLE_METRICS = (
    "lm_loss",
    "perplexity",
    "bits_per_byte",
    "instruction_loss",
    "instruction_bpb",
    "preference_loss",
    "preference_accuracy",
    "hh_preference_loss",
    "hh_preference_accuracy",
    "reasoning_nll",
    "reasoning_accuracy",
    "primary",
    "public_composite",
    "composite_bpb",
    "fitness",
    "initial_loss",
    "final_loss",
    "heldout_preference_accuracy",
    "arithmetic_exact_match",
    "arithmetic_error_rate",
    "post_training_loss",
    "reward_bearing_group_rate",
)
TRAINING_PLOT = "plots/training_loss.png"
TUNING_PLOT = "plots/tuning_loss_vs_lr.png"


def default_report_dir(artifact: Artifact) -> Path:
    """``docs/reproductions/<arxiv>-<name>/`` (or ``docs/foundation-models/...``)."""
    if artifact.arxiv is None:
        raise ArtifactError("artifact names no arXiv id (paper.arxiv_id); pass --out DIR")
    parent = "reproductions" if artifact.kind == "reproduction" else "foundation-models"
    return Path("docs") / parent / f"{artifact.arxiv}-{artifact.name}"


def _fmt(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "—"}[value]
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == 0.0:
            return "0"
        if abs(value) < 1e-3:
            return f"{value:.3e}"
        if abs(value) < 1000:
            return f"{value:.4f}"
        return f"{value:,.1f}"
    return str(value)


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}%"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def _arm_label(artifact: Mapping, arm: str) -> str:
    return str(artifact.get(arm, {}).get("name", arm))


def _seeds(artifact: Mapping) -> list:
    protocol = artifact.get("evaluation_protocol") or {}
    seeds = protocol.get("seeds") or artifact.get("seeds")
    if not seeds:
        seeds = (artifact.get("setup") or {}).get("seeds") or []
    return list(seeds)


def _title(artifact: Mapping, name: str, arxiv: str | None) -> list[str]:
    paper = artifact.get("paper") or {}
    lines = [f"# {name}" + (f" (arXiv {arxiv})" if arxiv else ""), ""]
    if paper:
        title = paper.get("title", "untitled")
        link = f"[{title}]({paper['url']})" if paper.get("url") else title
        organization = f", {paper['organization']}" if paper.get("organization") else ""
        lines.append(f"Paper: {link}{organization}.")
    elif arxiv:
        lines.append(f"Paper: [arXiv {arxiv}](https://arxiv.org/abs/{arxiv}).")
    if artifact.get("manifest_ref"):
        lines.append(f"Manifest: `{artifact['manifest_ref']}`.")
    return lines + [""]


def _verdict_for(artifact: Mapping) -> dict | None:
    """The artifact's verdict block, or one recomputed from what it records."""
    if isinstance(artifact.get("verdict"), Mapping):
        return dict(artifact["verdict"])
    metric = "lm_loss"
    method_name = _arm_label(artifact, "method")
    rows = artifact.get("per_seed") or []
    try:
        if rows:
            baseline = [row["baseline"][metric] for row in rows]
            method = [row["method"][metric] for row in rows]
        else:
            baseline = [artifact["baseline"][metric]]
            method = [artifact["method"][metric]]
    except (KeyError, TypeError):
        return None
    result = verdict(metric, baseline, method, LOWER_IS_BETTER[metric], method_name)
    result["summary"] += " (recomputed by the report: the artifact has no verdict block)"
    return result


def _identical_arms(artifact: Mapping) -> bool:
    shared = [
        metric
        for metric in TABLE_METRICS
        if isinstance(artifact["baseline"].get(metric), int | float)
        and isinstance(artifact["method"].get(metric), int | float)
    ]
    return bool(shared) and all(
        artifact["baseline"][metric] == artifact["method"][metric] for metric in shared
    )


def _protocol(artifact: Mapping) -> list[str]:
    setup = artifact.get("setup") or {}
    dataset = artifact.get("dataset") or {}
    protocol = artifact.get("evaluation_protocol") or {}
    seeds = _seeds(artifact)
    formal, default_policy = claim_policy(len(seeds))
    tokens = ", ".join(
        f"{split} {dataset[f'{split}_tokens']:,}"
        for split in ("train", "validation", "test")
        if isinstance(dataset.get(f"{split}_tokens"), int)
    )
    equal = setup.get("same_tokens_optimizer_and_budget")
    stream = setup.get("token_stream_sha256")
    rows = [
        ["tier", protocol.get("tier", "not recorded")],
        ["preset", setup.get("preset", "not recorded")],
        ["suite", dataset.get("benchmark_suite", "not recorded")],
        [
            "data",
            f"{dataset.get('name', 'not recorded')} ({tokens or 'token budget not recorded'})",
        ],
        ["seeds", f"{len(seeds)}: {', '.join(str(seed) for seed in seeds)}" if seeds else "none"],
        ["steps per arm", _fmt(setup.get("steps_per_variant"))],
        [
            "batch size / learning rate",
            f"{_fmt(setup.get('batch_size'))} / {_fmt(setup.get('learning_rate'))}",
        ],
        [
            "model",
            (
                f"d_model {_fmt(setup.get('dimensions'))}, {_fmt(setup.get('layers'))} layers, "
                f"sequence length {_fmt(setup.get('sequence_length'))}"
                if setup.get("dimensions") is not None
                else "not recorded"
            ),
        ],
        [
            "equal budget",
            f"{_fmt(equal)}"
            + (
                f" (token stream sha256 `{stream[:16]}…`)"
                if stream
                else " (token stream hash not recorded)"
            ),
        ],
        ["formal comparison", _fmt(protocol.get("formal_comparison", formal))],
        ["claim policy", protocol.get("claim_policy", default_policy)],
        ["interval", protocol.get("interval", "not recorded")],
        ["selection split", protocol.get("selection_split", "not recorded")],
    ]
    return ["## Protocol", "", *_table(["", ""], [[key, str(value)] for key, value in rows]), ""]


def _validation_table(artifact: Mapping) -> list[str]:
    statistics = artifact.get("statistics") or {}
    baseline_arm, method_arm = artifact["baseline"], artifact["method"]
    rows = []
    for metric in TABLE_METRICS:
        entry = statistics.get(metric)
        if isinstance(entry, Mapping):
            cells = [
                f"{_fmt(entry[arm]['mean'])} ± {_fmt(entry[arm]['std'])} (n={entry[arm]['n']})"
                for arm in ("baseline", "method")
            ]
            change = entry["paired_relative_change_percent"]
            if change.get("ci_low") is None:
                delta = f"{_percent(change['mean'])} (no CI, n={change['n']})"
            else:
                delta = f"{_percent(change['mean'])} [{_percent(change['ci_low'])}, {_percent(change['ci_high'])}]"
            significant = _fmt(entry.get("significant"))
        elif isinstance(baseline_arm.get(metric), int | float) and isinstance(
            method_arm.get(metric), int | float
        ):
            cells = [_fmt(float(baseline_arm[metric])), _fmt(float(method_arm[metric]))]
            try:
                change = relative_changes_percent([baseline_arm[metric]], [method_arm[metric]])[0]
                delta = f"{_percent(change)} (means; no CI)"
            except ConfigError:  # a zero baseline has no relative change
                delta = "—"
            significant = "—"
        else:
            continue
        direction = "↓" if LOWER_IS_BETTER.get(metric, True) else "↑"
        rows.append([f"{metric} {direction}", *cells, delta, significant])
    header = [
        "metric (validation)",
        f"baseline: {_arm_label(artifact, 'baseline')}",
        f"method: {_arm_label(artifact, 'method')}",
        "Δ% paired [95% CI]",
        "significant",
    ]
    note = (
        "Mean ± sample std over seeds; Δ% is the mean per-seed relative change of the method "
        "against the baseline; ↓ lower is better, ↑ higher is better."
    )
    return ["## Validation results", "", note, "", *_table(header, rows), ""]


def _test_table(artifact: Mapping) -> list[str]:
    test = artifact.get("test")
    heading = "## Test split (evaluated once, not used for selection)"
    if not isinstance(test, Mapping):
        return [heading, "", "This artifact records no test-split results.", ""]
    rows = []
    for metric in TABLE_METRICS:
        baseline = (test.get("baseline") or {}).get(metric)
        method = (test.get("method") or {}).get(metric)
        if baseline is None or method is None:
            continue
        change = relative_changes_percent([baseline], [method])[0] if baseline else None
        rows.append([metric, _fmt(float(baseline)), _fmt(float(method)), _percent(change)])
    header = ["metric (test split)", "baseline", "method", "Δ% of means"]
    note = "Test split, evaluated once at the end, not used for selection."
    return [heading, "", note, "", *_table(header, rows), ""]


def _arms(artifact: Mapping) -> list[str]:
    rows = []
    for arm in ("baseline", "method"):
        data = artifact[arm]
        stats = data.get("architecture_stats") or {}
        rows.append(
            [
                arm,
                str(data.get("name", arm)),
                _fmt(data.get("parameters")),
                str(data.get("optimizer", "—")),
                str(data.get("device", "—")),
                str(data.get("status", "—")),
                ", ".join(f"{key}={_fmt(value)}" for key, value in stats.items()) or "—",
            ]
        )
    header = ["arm", "name", "parameters", "optimizer", "device", "status", "architecture stats"]
    return ["## Arms", "", *_table(header, rows), ""]


def _provenance(artifact: Mapping, artifact_path: Path, out_dir: Path) -> list[str]:
    provenance = artifact.get("provenance") or {}
    relative = os.path.relpath(Path(artifact_path).resolve(), Path(out_dir).resolve())
    lines = ["## Provenance", "", f"- artifact: [`{relative}`]({relative})"]
    commit = provenance.get("code_commit") or provenance.get("original_code_commit")
    lines.append(
        f"- code commit: `{commit or 'not recorded'}`"
        + (
            f" (working tree dirty: {_fmt(provenance['code_dirty'])})"
            if "code_dirty" in provenance
            else ""
        )
    )
    for key in (
        "command",
        "accelerator",
        "created_at",
        "dataset_fingerprint",
        "implementation_sha256",
        "runner_sha256",
        "historical_migration",
    ):
        if provenance.get(key) is not None:
            value = provenance[key]
            lines.append(f"- {key.replace('_', ' ')}: `{value}`")
    return lines + [""]


def _plots(artifact: Mapping, out_dir: Path, metric: str) -> list[str]:
    lines = ["## Plots", ""]
    labels = {arm: _arm_label(artifact, arm) for arm in ("baseline", "method")}
    curves = artifact.get("training_curves")
    if isinstance(curves, Mapping) and curves:
        plot_training_curves(
            curves,
            out_dir / TRAINING_PLOT,
            labels,
            title=f"Training loss: {labels['method']} vs {labels['baseline']}",
        )
        lines += [
            f"![Training loss per step, mean over seeds with min-max band]({TRAINING_PLOT})",
            "",
        ]
    else:
        lines += ["No training curves are recorded in this artifact.", ""]
    lines += _post_training_plots(artifact, out_dir, labels)
    rows = artifact.get("per_seed") or []
    if rows and all(
        metric in row.get("baseline", {}) and metric in row.get("method", {}) for row in rows
    ):
        relative = f"plots/paired_{metric}.png"
        plot_paired_differences(
            rows,
            metric,
            out_dir / relative,
            labels,
            lower_is_better=LOWER_IS_BETTER.get(metric, True),
        )
        lines += [f"![Per-seed paired {metric} difference, method minus baseline]({relative})", ""]
    else:
        lines += ["No per-seed values are recorded, so there is no paired-difference plot.", ""]
    return lines


POST_TRAINING_SERIES = {  # post_training_curves.<arm>.<series>: (file, title, y label)
    "losses": ("plots/post_training_loss.png", "Post-training loss per step",
               "stage loss (SFT nats/token, DPO or GRPO objective)"),
    "rewards": ("plots/post_training_reward.png", "GRPO mean reward per step",
                "mean exact-match reward of sampled answers"),
    "reward_bearing_rates": ("plots/reward_bearing_rate.png",
                             "Reward-bearing groups per step (rewards not all equal)",
                             "share of groups"),
}


def _post_training_plots(artifact: Mapping, out_dir: Path, labels: Mapping[str, str]) -> list[str]:
    """Per-step curves of a post-training stage (``post_training_curves``), where recorded."""
    curves = artifact.get("post_training_curves")
    if not isinstance(curves, Mapping):
        return []
    lines: list[str] = []
    for series, (relative, title, ylabel) in POST_TRAINING_SERIES.items():
        arms = {arm: curves[arm][series] for arm in ("baseline", "method")
                if isinstance(curves.get(arm), Mapping) and series in curves[arm]}
        if not arms:
            continue
        plot_training_curves(arms, out_dir / relative, labels, title=title, ylabel=ylabel)
        lines += [f"![{title}]({relative})", ""]
    return lines


def _tuning(artifact: Mapping, out_dir: Path) -> list[str]:
    """Each arm's tuning grid, chosen learning rate, and the loss-vs-lr plot."""
    tuning = artifact.get("tuning")
    post = (artifact.get("setup") or {}).get("post_training")
    if not isinstance(tuning, Mapping) and isinstance(post, Mapping):
        return ["## Tuning", "", "**Untuned:** both arms post-trained at one learning rate "
                f"({_fmt(post.get('lr'))}) from the same pretrained model; learning-rate tuning "
                "is not run for post-training comparisons.", ""]
    if not isinstance(tuning, Mapping):
        return ["## Tuning", "", "**Untuned:** both arms trained at the preset's one learning "
                "rate; a method that needs another learning rate may lose for that reason.", ""]
    seeds = ", ".join(str(s) for s in tuning.get("seeds") or [])
    lines = ["## Tuning", "",
             f"Each arm trained at every learning rate of one grid under tuning seed(s) {seeds} "
             f"(disjoint from the report seeds); chosen by {tuning.get('selection', 'validation')}.",
             ""]
    rows = []
    for arm, block in (tuning.get("arms") or {}).items():
        cells = ", ".join(f"{s['lr']:.3g}: {_fmt(s.get('mean'))}" for s in block.get("settings", []))
        edge = ("extended " + block["extended"]) if block.get("extended") else "not extended"
        if block.get("chosen_on_edge"):
            edge += "; **best still on the edge**"
        rows.append([_arm_label(artifact, arm), cells, f"{block['chosen']['lr']:.3g}", edge])
    lines += _table(["arm", f"lr: validation {tuning.get('metric', 'lm_loss')}", "chosen", "grid"], rows)
    labels = {arm: _arm_label(artifact, arm) for arm in ("baseline", "method")}
    plot_tuning(tuning, out_dir / TUNING_PLOT, labels)
    return lines + ["", f"![Validation loss against learning rate, both arms]({TUNING_PLOT})", ""]


def _render_reproduction(typed: Artifact, artifact_path: Path, out_dir: Path) -> list[str]:
    artifact = typed.to_json_dict()
    lines = _title(artifact, typed.name, typed.arxiv)
    verdict_block = _verdict_for(artifact)
    lines += ["## Verdict", ""]
    if verdict_block:
        lines.append(str(verdict_block["summary"]))
    else:
        lines.append("No verdict: the artifact records no lm_loss for both arms.")
    if _identical_arms(artifact):
        lines += [
            "",
            "**Warning:** both arms report identical validation metrics, so this comparison "
            "is vacuous (the baseline probably already contains the method).",
        ]
    lines += ["", "## Scope", "", str(artifact.get("scope") or "not recorded"), ""]
    lines += _protocol(artifact)
    lines += _validation_table(artifact)
    lines += _test_table(artifact)
    lines += _arms(artifact)
    lines += _tuning(artifact, out_dir)
    metric = (verdict_block or {}).get("metric", "lm_loss")
    lines += _plots(artifact, out_dir, metric)
    paper_results = artifact.get("paper_results")
    if isinstance(paper_results, Mapping) and paper_results:
        lines += ["## What the paper reports", ""]
        lines += [f"- {key}: {_fmt(value)}" for key, value in paper_results.items()]
        lines.append("")
    lines += _provenance(artifact, artifact_path, out_dir)
    return lines


def _metric_cell(value: object) -> str:
    if isinstance(value, Mapping) and "mean" in value:
        return f"{_fmt(float(value['mean']))} ± {_fmt(float(value.get('std', 0.0)))} (n={value.get('n')})"
    return _fmt(value)


def _render_diagnostic(typed: Artifact, artifact_path: Path, out_dir: Path) -> list[str]:
    artifact = typed.to_json_dict()
    lines = _title(artifact, typed.name, typed.arxiv)
    protocol = artifact.get("evaluation_protocol") or {}
    full = artifact.get("full_experiment") or {}
    seeds = _seeds(artifact)
    lines += [
        "## Status",
        "",
        f"Component diagnostic (tier `{artifact.get('evaluation_tier', protocol.get('tier', '?'))}`), "
        f"implementation status `{artifact.get('implementation_status', 'not recorded')}`, "
        f"full experiment `{full.get('status', 'not recorded')}`, "
        f"promotion eligible: {_fmt(artifact.get('promotion_eligible'))}.",
        "",
        f"Claim policy: {protocol.get('claim_policy', 'not recorded')}",
        "",
        f"Seeds: {', '.join(str(seed) for seed in seeds) or 'none'}.",
        "",
        "## Metrics",
        "",
        *_table(
            ["metric", "mean ± std (n) or check"],
            [[key, _metric_cell(value)] for key, value in (artifact.get("metrics") or {}).items()],
        ),
        "",
    ]
    lines += _full_experiment(full, out_dir)
    configuration = artifact.get("configuration") or {}
    if configuration:
        lines += ["## Configuration", ""]
        lines += [f"- {key}: {_fmt(value)}" for key, value in configuration.items()]
        lines.append("")
    lines += _provenance(artifact, artifact_path, out_dir)
    return lines


def _full_experiment(full: Mapping, out_dir: Path) -> list[str]:
    """The L2 experiment's table and plot, where the diagnostic ran one."""
    table = full.get("table") or []
    if not table:
        return []
    columns = [key for key in ("arm", "retention_ratio", "budget", "lm_loss") if key in table[0]]
    lines = ["## Full experiment (L2)", "", str(full.get("status", "")), ""]
    lines += _table(columns, [[_fmt(row.get(key)) for key in columns] for row in table])
    lines.append("")
    if "retention_ratio" in columns and "lm_loss" in columns:
        relative = "plots/full_experiment.png"
        plot_full_experiment(table, out_dir / relative)
        lines += [f"![lm_loss against retention ratio]({relative})", ""]
    return lines


RENDERERS: dict[str, Callable[[Artifact, Path, Path], list[str]]] = {
    "reproduction": _render_reproduction,
    "diagnostic": _render_diagnostic,
}


def write_report(artifact: Artifact, artifact_path: Path, out_dir: Path) -> Path:
    """Write ``out_dir/README.md`` (and ``out_dir/plots/*.png``) for one validated artifact."""
    if not isinstance(artifact, ReproductionArtifact | DiagnosticArtifact):
        raise ArtifactError(
            f"{artifact_path}: write_report takes a validated artifact (load_artifact), "
            f"not a {type(artifact).__name__}"
        )
    kind = artifact.kind
    out_dir = Path(out_dir)
    try:
        lines = RENDERERS[kind](artifact, Path(artifact_path), out_dir)
    except (KeyError, TypeError, ValueError) as error:
        raise ArtifactError(f"{artifact_path}: malformed {kind} artifact ({error!r})") from error
    readme = out_dir / "README.md"
    write_text_atomic(readme, "\n".join(lines).rstrip() + "\n")
    return readme
