"""Human-readable reports (``README.md`` + plots) from schema-v2 artifacts.

Takes a validated, typed artifact (``llmevo.artifacts.load_artifact``; an unvalidated dict
is refused). What the report says is worded once, in ``llmevo.reports.sections``
(``artifact_sections``); this module lays those sections out as Markdown, draws the plots
that go with them and names the folders reports are written to. Historical artifacts that
lack the newer optional blocks still get a report: a missing block is said to be missing,
never invented.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from llmevo.artifacts.io import write_text_atomic
from llmevo.artifacts.schema import Artifact, DiagnosticArtifact, ReproductionArtifact
from llmevo.errors import ArtifactError
from llmevo.eval.metrics import LOWER_IS_BETTER
from llmevo.reports.sections import Section, artifact_sections, table_cell

__all__ = ["against_slug", "default_report_dir", "report_variant", "markdown_section", "write_report"]

TRAINING_PLOT = "plots/training_loss.png"
TUNING_PLOT = "plots/tuning_loss_vs_lr.png"
TUNING_AXIS_PLOT = "plots/tuning_loss_vs_{axis}.png"  # space tuning: one per tuned axis
FULL_EXPERIMENT_PLOT = "plots/full_experiment.png"


def against_slug(against: str) -> str:
    """A ``--against`` choice in file and folder names: ``rope`` stays ``rope``,
    ``rope:theta=5e5`` becomes ``rope-theta-5e5``."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", against).strip("-")


def report_variant(against: str | None = None, space: bool = False, size: str | None = None) -> Path:
    """The subfolder of a component's report folder that a variant of its reproduction
    reports in, so that no variant overwrites the declared comparison's README and plots:
    ``vs-<other>`` for a baseline chosen by ``--against``, then ``tune-space`` for space
    tuning, then the size (``rung1``; ``runner.size.size_label``). Empty for the declared,
    grid-tuned comparison at rung 0."""
    parts = [f"vs-{against_slug(against)}"] if against is not None else []
    return Path(*parts, *(["tune-space"] if space else []), *([size] if size else []))


def default_report_dir(artifact: Artifact) -> Path:
    """``docs/reproductions/<arxiv>-<name>/`` (or ``docs/foundation-models/...``), with the
    variant's subfolder (``report_variant``) where ``reproduce --publish`` writes it too: a
    baseline chosen by ``--against OTHER``, space tuning, a rung other than 0. A reproduction
    at explicit sizes (no rung) has no default folder: pass --out DIR."""
    if artifact.arxiv is None:
        raise ArtifactError("artifact names no arXiv id (paper.arxiv_id); pass --out DIR")
    parent = "reproductions" if artifact.kind == "reproduction" else "foundation-models"
    folder = Path("docs") / parent / f"{artifact.arxiv}-{artifact.name}"
    if not isinstance(artifact, ReproductionArtifact):
        return folder
    setup = artifact.setup
    if setup.rung is None and setup.parameters is not None:
        raise ArtifactError("the artifact was trained at explicit sizes (no rung), which have no "
                            "default report folder; pass --out DIR")
    space = artifact.tuning is not None and artifact.tuning.protocol == "space"
    return folder / report_variant(artifact.against, space, f"rung{setup.rung}" if setup.rung else None)


def markdown_section(section: Section, level: int = 2) -> list[str]:
    """One section as Markdown lines: a heading, its sentences, warnings, then its table."""
    lines = ["#" * level + f" {section.title}", ""]
    for sentence in section.sentences:
        lines += [sentence, ""]
    for warning in section.warnings:
        lines += [f"**Warning:** {warning}", ""]
    if section.rows:
        columns = section.columns or ("", "")
        lines.append("| " + " | ".join(table_cell(column) for column in columns) + " |")
        lines.append("|" + "|".join("---" for _ in columns) + "|")
        lines += ["| " + " | ".join(table_cell(cell) for cell in row) + " |" for row in section.rows]
        lines.append("")
    return lines


def _image(alt: str, relative: str) -> list[str]:
    return [f"![{alt}]({relative})", ""]


def _reproduction_plots(artifact: ReproductionArtifact, out_dir: Path) -> list[str]:
    """The training-curve and paired-difference plots, or why there are none."""
    from llmevo.reports import plots  # matplotlib: imported only where a plot is drawn

    lines = ["## Plots", ""]
    labels = {"baseline": artifact.baseline.name, "method": artifact.method.name}
    curves = artifact.training_curves
    if artifact.post_training_curves and artifact.pretraining_curve is not None:
        # post-training: one shared pretraining per seed (its curve), then each arm's stage
        # (the per-step post-training plots below; training_curves holds the same losses)
        plots.plot_training_curves(
            {"method": artifact.pretraining_curve.model_dump(mode="python", exclude_unset=True)},
            out_dir / TRAINING_PLOT,
            {"method": "llama_modern pretraining, shared by both arms"},
            title="Pretraining loss (one checkpoint per seed, both arms start from it)",
        )
        lines += _image("Pretraining loss per step, mean over seeds with min-max band",
                        TRAINING_PLOT)
    elif curves is not None:
        plots.plot_training_curves(
            curves.model_dump(mode="python", exclude_unset=True),
            out_dir / TRAINING_PLOT,
            labels,
            title=f"Training loss: {labels['method']} vs {labels['baseline']}",
        )
        lines += _image(
            "Training loss per step, mean over seeds with min-max band", TRAINING_PLOT
        )
    else:
        lines += ["No training curves are recorded in this artifact.", ""]
    lines += _post_training_plots(artifact, out_dir, labels)
    metric = artifact.verdict_metric
    rows = [row.model_dump(mode="python", exclude_unset=True) for row in artifact.per_seed or []]
    if rows and all(
        row["baseline"].get(metric) is not None and row["method"].get(metric) is not None
        for row in rows
    ):
        relative = f"plots/paired_{metric}.png"
        plots.plot_paired_differences(
            rows, metric, out_dir / relative, labels,
            lower_is_better=LOWER_IS_BETTER.get(metric, True),
        )
        lines += _image(f"Per-seed paired {metric} difference, method minus baseline", relative)
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


def _post_training_plots(artifact: ReproductionArtifact, out_dir: Path,
                         labels: dict[str, str]) -> list[str]:
    """Per-step curves of a post-training stage (``post_training_curves``), where recorded."""
    from llmevo.reports import plots  # matplotlib: imported only where a plot is drawn

    curves = artifact.post_training_curves
    if not curves:
        return []
    lines: list[str] = []
    for series, (relative, title, ylabel) in POST_TRAINING_SERIES.items():
        arms = {arm: curves[arm][series].model_dump(mode="python", exclude_unset=True)
                for arm in ("baseline", "method") if arm in curves and series in curves[arm]}
        if not arms:
            continue
        plots.plot_training_curves(arms, out_dir / relative, labels, title=title, ylabel=ylabel)
        lines += _image(title, relative)
    return lines


def _plots_after(artifact: Artifact, key: str, out_dir: Path) -> list[str]:
    """Plots that belong right after a section (Markdown only: the terminal draws none)."""
    from llmevo.reports import plots  # matplotlib: imported only where a plot is drawn

    if isinstance(artifact, ReproductionArtifact) and key == "tuning":
        lines: list[str] = []
        if artifact.tuning is not None:
            labels = {"baseline": artifact.baseline.name, "method": artifact.method.name}
            tuning = artifact.tuning.model_dump(mode="python", exclude_unset=True)
            if artifact.tuning.space:  # one plot per tuned axis
                for axis in plots.tuned_axes(tuning):
                    relative = TUNING_AXIS_PLOT.format(axis=axis)
                    plots.plot_tuning_axis(tuning, axis, out_dir / relative, labels)
                    lines += _image(f"Validation loss against {axis}, every trial of both arms",
                                    relative)
            else:
                plots.plot_tuning(tuning, out_dir / TUNING_PLOT, labels)
                lines += _image("Validation loss against learning rate, both arms", TUNING_PLOT)
        return lines + _reproduction_plots(artifact, out_dir)
    if isinstance(artifact, DiagnosticArtifact) and key == "full_experiment":
        table = (artifact.full_experiment.model_extra or {}).get("table") or []
        if "retention_ratio" in table[0] and "lm_loss" in table[0]:
            plots.plot_full_experiment(table, out_dir / FULL_EXPERIMENT_PLOT)
            return _image("lm_loss against retention ratio", FULL_EXPERIMENT_PLOT)
    return []


def _markdown(artifact: Artifact, artifact_path: Path, out_dir: Path) -> list[str]:
    relative = os.path.relpath(Path(artifact_path).resolve(), Path(out_dir).resolve())
    lines: list[str] = []
    sections = artifact_sections(artifact, artifact_link=f"[`{relative}`]({relative})")
    for index, section in enumerate(sections):
        lines += markdown_section(section, level=1 if index == 0 else 2)
        lines += _plots_after(artifact, section.key, out_dir)
    return lines


def write_report(artifact: Artifact, artifact_path: Path, out_dir: Path) -> Path:
    """Write ``out_dir/README.md`` (and ``out_dir/plots/*.png``) for one validated artifact."""
    if not isinstance(artifact, ReproductionArtifact | DiagnosticArtifact):
        raise ArtifactError(
            f"{artifact_path}: write_report takes a validated artifact (load_artifact), "
            f"not a {type(artifact).__name__}"
        )
    out_dir = Path(out_dir)
    try:
        lines = _markdown(artifact, Path(artifact_path), out_dir)
    except (KeyError, TypeError, ValueError) as error:
        raise ArtifactError(
            f"{artifact_path}: malformed {artifact.kind} artifact ({error!r})"
        ) from error
    readme = out_dir / "README.md"
    write_text_atomic(readme, "\n".join(lines).rstrip() + "\n")
    return readme
