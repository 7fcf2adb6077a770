"""The terminal views of ``llmevo show`` and ``llmevo compare``, as rich renderables.

``artifact_view`` lays out the sections of ``llmevo.reports.sections`` (the same words as
the README report) and adds nothing of its own; ``comparison_view`` puts two artifacts of
one kind side by side with the same cell formatters. Long texts are cut first
(``bounded``), so an artifact with huge fields prints short.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from llmevo.artifacts.schema import (
    Artifact,
    DiagnosticArtifact,
    MeanStd,
    ReproductionArtifact,
    dump_artifact,
    validate_artifact,
)
from llmevo.errors import ArtifactError
from llmevo.reports.sections import (
    NOT_RECORDED,
    Section,
    artifact_sections,
    format_metric,
    format_number,
    format_percent,
    numeric_values,
    ordered_union,
    relative_change_percent,
)

_KIND_NAMES = {ReproductionArtifact: "reproduction", DiagnosticArtifact: "component-diagnostic"}


# --- show ------------------------------------------------------------------------------------


def _section_view(section: Section, first: bool) -> list[RenderableType]:
    """One section: its title (underlined for the first), sentences, warnings, then its table."""
    views: list[RenderableType] = [
        Text(section.title, style="bold underline" if first else "bold")
    ]
    views += [Text(sentence) for sentence in section.sentences]
    views += [Text(f"warning: {warning}", style="bold yellow") for warning in section.warnings]
    if section.rows:
        if section.columns:
            table = Table()
            for column in section.columns:
                table.add_column(Text(column), overflow="fold")
        else:
            table = Table(show_header=False, box=None, pad_edge=False)
            table.add_column(style="bold")
            table.add_column(overflow="fold")
        for row in section.rows:
            style = "yellow" if NOT_RECORDED in row[-1] else ""
            table.add_row(*(Text(cell) for cell in row), style=style)
        views.append(table)
    return views


MAX_SHOWN_CHARACTERS = 400


def _clip(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}… ({len(value):,} characters)"
    if isinstance(value, dict):
        return {_clip(k, limit): _clip(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(item, limit) for item in value]
    return value


def bounded(artifact: Artifact, limit: int = MAX_SHOWN_CHARACTERS) -> Artifact:
    """The artifact with every text longer than ``limit`` cut (its length noted), so that
    printing an artifact with huge fields stays short."""
    return validate_artifact(_clip(dump_artifact(artifact), limit), "artifact")


def artifact_view(artifact: Artifact) -> list[RenderableType]:
    """Every section of one artifact (``artifact_sections``), as rich renderables; long
    texts are cut (``bounded``)."""
    artifact = bounded(artifact)
    views: list[RenderableType] = []
    for index, section in enumerate(artifact_sections(artifact)):
        views += _section_view(section, first=index == 0)
    return views


# --- comparison ------------------------------------------------------------------------------


def _comparison_header(title: str, rows: list[tuple[str, str]]) -> RenderableType:
    table = Table(title=title, show_header=False, box=None, pad_edge=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, Text(value))
    return table


def _compare_reproductions(
    a: ReproductionArtifact, b: ReproductionArtifact, labels: tuple[str, str]
) -> list[RenderableType]:
    header = _comparison_header(
        "comparison (Δ% is B relative to A, arm by arm)",
        [
            (
                side,
                f"{label}: {x.manifest_ref}, {x.baseline.name} vs {x.method.name}, "
                f"{x.evaluation_protocol.tier}, seeds {x.evaluation_protocol.seeds}",
            )
            for side, label, x in (("A", labels[0], a), ("B", labels[1], b))
        ],
    )
    arms = {
        "A.baseline": numeric_values(a.baseline),
        "A.method": numeric_values(a.method),
        "B.baseline": numeric_values(b.baseline),
        "B.method": numeric_values(b.method),
    }
    table = Table(title="validation metrics", title_justify="left")
    table.add_column("metric", style="bold", no_wrap=True)
    for column in (*arms, "Δ% baseline", "Δ% method"):
        table.add_column(column, justify="right")
    for metric in ordered_union(*arms.values()):
        values = [arms[column].get(metric) for column in arms]
        table.add_row(
            Text(metric),
            *(format_number(value) for value in values),
            format_percent(relative_change_percent(values[0], values[2])),
            format_percent(relative_change_percent(values[1], values[3])),
        )
    return [header, table]


def _compare_diagnostics(
    a: DiagnosticArtifact, b: DiagnosticArtifact, labels: tuple[str, str]
) -> list[RenderableType]:
    la, lb = labels
    header = _comparison_header(
        "comparison (Δ% is B relative to A, of the means)",
        [
            ("A", f"{la}: {a.manifest_ref}, seeds {a.seeds}"),
            ("B", f"{lb}: {b.manifest_ref}, seeds {b.seeds}"),
        ],
    )
    table = Table(title="metrics", title_justify="left")
    table.add_column("metric", style="bold")
    for column in ("A", "B", "Δ% of mean"):
        table.add_column(column, justify="right")
    for metric in ordered_union(a.metrics, b.metrics):
        value_a, value_b = a.metrics.get(metric), b.metrics.get(metric)
        if isinstance(value_a, MeanStd) and isinstance(value_b, MeanStd):
            change = format_percent(relative_change_percent(value_a.mean, value_b.mean))
        elif value_a is None or value_b is None:
            change = "—"
        else:
            change = "same" if value_a == value_b else "changed"
        table.add_row(Text(metric), format_metric(value_a), format_metric(value_b), change)
    return [header, table]


_COMPARISONS: dict[type, Callable[[Any, Any, tuple[str, str]], list[RenderableType]]] = {
    ReproductionArtifact: _compare_reproductions,
    DiagnosticArtifact: _compare_diagnostics,
}


def comparison_view(
    a: Artifact, b: Artifact, labels: tuple[str, str] = ("A", "B")
) -> list[RenderableType]:
    """Two artifacts of the same kind side by side, with B's change relative to A."""
    a, b = bounded(a), bounded(b)
    if type(a) is not type(b):
        raise ArtifactError(
            f"cannot compare a {_KIND_NAMES[type(a)]} artifact ({labels[0]}) with a "
            f"{_KIND_NAMES[type(b)]} artifact ({labels[1]}); compare artifacts of one kind"
        )
    return _COMPARISONS[type(a)](a, b, labels)
