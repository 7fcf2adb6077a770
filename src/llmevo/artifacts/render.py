"""Readable terminal views of artifacts (rich renderables), one or two side by side."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from llmevo.artifacts.schema import (
    ArmResult,
    Artifact,
    DiagnosticArtifact,
    MeanStd,
    Provenance,
    ReproductionArtifact,
)
from llmevo.errors import ArtifactError

NOT_RECORDED = "not recorded"
_KIND_NAMES = {ReproductionArtifact: "reproduction", DiagnosticArtifact: "component-diagnostic"}
# Arm fields that are bookkeeping, not metrics.
_ARM_NON_METRICS = frozenset(
    {"name", "device", "optimizer", "architecture_stats", "seeds", "status", "genome"}
)


def format_number(value: Any) -> str:
    """Integers as they are, floats to 6 significant digits, booleans as true/false."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def relative_change_percent(before: float | None, after: float | None) -> float | None:
    """``100 * (after - before) / |before|``; None when undefined (missing or zero base)."""
    if before is None or after is None or isinstance(before, bool) or isinstance(after, bool):
        return None
    if before == 0 or not (math.isfinite(before) and math.isfinite(after)):
        return None
    return 100.0 * (after - before) / abs(before)


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:+.3f}%"


def _mean_std(stats: MeanStd) -> str:
    return f"{format_number(stats.mean)} ± {format_number(stats.std)} (n={stats.n})"


def _arm_metrics(arm: ArmResult) -> dict[str, float | int]:
    values = arm.model_dump(mode="python", exclude_unset=True)
    return {
        key: value
        for key, value in values.items()
        if key not in _ARM_NON_METRICS
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    }


def _ordered_union(*key_lists: Iterable[str]) -> list[str]:
    keys: list[str] = []
    for key_list in key_lists:
        keys.extend(key for key in key_list if key not in keys)
    return keys


def _header(title: str, rows: list[tuple[str, str]]) -> RenderableType:
    table = Table(title=title, show_header=False, box=None, pad_edge=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, value)
    return table


def _provenance_table(provenance: Provenance) -> RenderableType:
    table = Table(title="provenance", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    recorded = provenance.model_dump(mode="python", exclude_unset=True)
    for key in _ordered_union(type(provenance).model_fields, recorded):
        if key in ("historical_migration", "original_code_commit") and key not in recorded:
            continue  # only historical artifacts carry these
        value = recorded.get(key, NOT_RECORDED)
        if key == "library_versions" and isinstance(value, Mapping):
            value = ", ".join(f"{name} {version}" for name, version in value.items())
        elif key == "implementation_files" and isinstance(value, Mapping):
            value = "\n".join(f"{path}  {digest[:12]}" for path, digest in value.items())
        style = "yellow" if isinstance(value, str) and NOT_RECORDED in value else ""
        table.add_row(key, Text(format_number(value), style=style))
    return table


def _protocol_rows(artifact: Artifact) -> list[tuple[str, str]]:
    protocol = artifact.evaluation_protocol
    return [
        ("tier", protocol.tier),
        ("formal comparison", format_number(protocol.formal_comparison)),
        ("claim policy", protocol.claim_policy),
        ("seeds", ", ".join(str(seed) for seed in protocol.seeds)),
    ]


# --- reproduction ----------------------------------------------------------------------------


def _reproduction_views(artifact: ReproductionArtifact) -> list[RenderableType]:
    paper, setup, dataset = artifact.paper, artifact.setup, artifact.dataset
    header = _header(
        f"reproduction: {artifact.manifest_ref}",
        [
            ("paper", f"{paper.arxiv_id}  {paper.title} ({paper.organization})"),
            ("arms", f"baseline {artifact.baseline.name}  vs  method {artifact.method.name}"),
            *_protocol_rows(artifact),
            (
                "dataset",
                f"{dataset.name}, suite {dataset.benchmark_suite}, "
                f"{dataset.train_tokens}/{dataset.validation_tokens}/{dataset.test_tokens} tokens",
            ),
            (
                "setup",
                f"{setup.steps_per_variant} steps, d={setup.dimensions}, "
                f"{setup.layers} layers, seq {setup.sequence_length}, "
                f"same budget verified: {format_number(setup.same_tokens_optimizer_and_budget)}",
            ),
            ("scope", artifact.scope),
        ],
    )
    views: list[RenderableType] = [header, _reproduction_metrics(artifact)]
    if _arm_metrics(artifact.baseline) == _arm_metrics(artifact.method):
        views.append(
            Text(
                "warning: both arms report identical metrics; the comparison is "
                "probably vacuous (does the baseline already use the method?)",
                style="bold yellow",
            )
        )
    if artifact.test is not None:
        views.append(
            _two_arm_table(
                "test split (evaluated once)", artifact.test.baseline, artifact.test.method
            )
        )
    stats_rows = [
        (
            f"{arm} architecture_stats",
            ", ".join(
                f"{key}={format_number(value)}"
                for key, value in getattr(artifact, arm).architecture_stats.items()
            ),
        )
        for arm in ("baseline", "method")
        if getattr(artifact, arm).architecture_stats
    ]
    relative = artifact.relative.model_dump(mode="python", exclude_unset=True)
    stats_rows.append(
        (
            "recorded relative",
            ", ".join(
                f"{key} {_percent(value) if isinstance(value, float) else value}"
                for key, value in relative.items()
            ),
        )
    )
    views.append(_header("", stats_rows))
    if artifact.verdict is not None:
        verdict = artifact.verdict
        mark = "significant" if verdict.significant else "not significant"
        views.append(Text(f"verdict ({verdict.metric}, {mark}): {verdict.summary}", style="bold"))
    views.append(_provenance_table(artifact.provenance))
    return views


def _reproduction_metrics(artifact: ReproductionArtifact) -> RenderableType:
    statistics = artifact.statistics or {}
    baseline, method = _arm_metrics(artifact.baseline), _arm_metrics(artifact.method)
    table = Table(title="validation metrics (means over seeds)", title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column(f"baseline ({artifact.baseline.name})", justify="right")
    table.add_column(f"method ({artifact.method.name})", justify="right")
    table.add_column("Δ%", justify="right")
    if statistics:
        table.add_column("paired Δ% [CI]", justify="right")
    for metric in _ordered_union(baseline, method):
        cells = [
            format_number(baseline.get(metric)),
            format_number(method.get(metric)),
            _percent(relative_change_percent(baseline.get(metric), method.get(metric))),
        ]
        if statistics:
            stats = statistics.get(metric)
            if stats is not None:
                cells[0], cells[1] = _mean_std(stats.baseline), _mean_std(stats.method)
                change = stats.paired_relative_change_percent
                interval = (
                    f" [{_percent(change.ci_low)}, {_percent(change.ci_high)}]"
                    if change.ci_low is not None and change.ci_high is not None
                    else ""
                )
                star = " *" if stats.significant else ""
                cells.append(f"{_percent(change.mean)}{interval}{star}")
            else:
                cells.append("")
        table.add_row(metric, *cells)
    return table


def _two_arm_table(title: str, baseline: Mapping[str, Any], method: Mapping[str, Any]) -> Table:
    table = Table(title=title, title_justify="left")
    for name, justify in (
        ("metric", "left"),
        ("baseline", "right"),
        ("method", "right"),
        ("Δ%", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for metric in _ordered_union(baseline, method):
        before, after = baseline.get(metric), method.get(metric)
        table.add_row(
            metric,
            format_number(before),
            format_number(after),
            _percent(relative_change_percent(before, after)),
        )
    return table


# --- diagnostic ------------------------------------------------------------------------------


def _metric_cell(value: MeanStd | bool | None) -> str:
    if isinstance(value, MeanStd):
        return _mean_std(value)
    return format_number(value)


def _diagnostic_views(artifact: DiagnosticArtifact) -> list[RenderableType]:
    dataset = artifact.dataset
    full = artifact.full_experiment.model_dump(mode="python", exclude_unset=True)
    header = _header(
        f"component diagnostic: {artifact.manifest_ref}",
        [
            ("method", artifact.method),
            (
                "implementation",
                f"{artifact.implementation_status}, tier {artifact.evaluation_tier}",
            ),
            (
                "flags",
                f"diagnostic_only={format_number(artifact.diagnostic_only)}, "
                f"promotion_eligible={format_number(artifact.promotion_eligible)}, "
                f"evolve_integrated={format_number(artifact.evolve_integrated)}, "
                f"measured_locally={format_number(artifact.measured_locally)}",
            ),
            *_protocol_rows(artifact),
            ("dataset", f"{dataset.id} @ {dataset.revision}"),
            (
                "full experiment",
                ", ".join(f"{key}={format_number(value)}" for key, value in full.items()),
            ),
        ],
    )
    table = Table(title="metrics", title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value (mean ± std over seeds)", justify="right")
    for metric, value in artifact.metrics.items():
        table.add_row(metric, _metric_cell(value))
    return [header, table, _provenance_table(artifact.provenance)]


_VIEWS: dict[type, Callable[[Any], list[RenderableType]]] = {
    ReproductionArtifact: _reproduction_views,
    DiagnosticArtifact: _diagnostic_views,
}


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
    from llmevo.artifacts.schema import dump_artifact, validate_artifact

    return validate_artifact(_clip(dump_artifact(artifact), limit), "artifact")


def render_artifact(artifact: Artifact) -> list[RenderableType]:
    """Header, metrics, verdict and provenance of one artifact, as rich renderables; long
    texts are cut (``bounded``)."""
    artifact = bounded(artifact)
    return _VIEWS[type(artifact)](artifact)


# --- comparison ------------------------------------------------------------------------------


def _compare_reproductions(
    a: ReproductionArtifact, b: ReproductionArtifact, labels: tuple[str, str]
) -> list[RenderableType]:
    la, lb = labels
    header = _header(
        "comparison (Δ% is B relative to A, arm by arm)",
        [
            (
                "A",
                f"{la}: {a.manifest_ref}, {a.baseline.name} vs {a.method.name}, "
                f"{a.evaluation_protocol.tier}, seeds {a.evaluation_protocol.seeds}",
            ),
            (
                "B",
                f"{lb}: {b.manifest_ref}, {b.baseline.name} vs {b.method.name}, "
                f"{b.evaluation_protocol.tier}, seeds {b.evaluation_protocol.seeds}",
            ),
        ],
    )
    arms = {
        "A.baseline": _arm_metrics(a.baseline),
        "A.method": _arm_metrics(a.method),
        "B.baseline": _arm_metrics(b.baseline),
        "B.method": _arm_metrics(b.method),
    }
    table = Table(title="validation metrics", title_justify="left")
    table.add_column("metric", style="bold", no_wrap=True)
    for column in (*arms, "Δ% baseline", "Δ% method"):
        table.add_column(column, justify="right")
    for metric in _ordered_union(*arms.values()):
        values = [arms[column].get(metric) for column in arms]
        table.add_row(
            metric,
            *(format_number(value) for value in values),
            _percent(relative_change_percent(values[0], values[2])),
            _percent(relative_change_percent(values[1], values[3])),
        )
    return [header, table]


def _compare_diagnostics(
    a: DiagnosticArtifact, b: DiagnosticArtifact, labels: tuple[str, str]
) -> list[RenderableType]:
    la, lb = labels
    header = _header(
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
    for metric in _ordered_union(a.metrics, b.metrics):
        value_a, value_b = a.metrics.get(metric), b.metrics.get(metric)
        if isinstance(value_a, MeanStd) and isinstance(value_b, MeanStd):
            change = _percent(relative_change_percent(value_a.mean, value_b.mean))
        elif value_a is None or value_b is None:
            change = "—"
        else:
            change = "same" if value_a == value_b else "changed"
        table.add_row(metric, _metric_cell(value_a), _metric_cell(value_b), change)
    return [header, table]


_COMPARISONS: dict[type, Callable[[Any, Any, tuple[str, str]], list[RenderableType]]] = {
    ReproductionArtifact: _compare_reproductions,
    DiagnosticArtifact: _compare_diagnostics,
}


def render_comparison(
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
