"""The leaderboard: one row per reproduction artifact, one per component diagnostic.

Reads plain JSON artifacts (docs/ARTIFACTS.md). Files that are not schema-v2 reproduction or
diagnostic artifacts are skipped and counted, never guessed at.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from llmevo.artifacts.io import write_text_atomic
from llmevo.errors import ArtifactError, ConfigError
from llmevo.eval.stats import claim_policy, relative_changes_percent
from llmevo.reports.report import artifact_kind, artifact_name, arxiv_id


def scan_artifacts(roots: Iterable[Path]) -> tuple[list[tuple[Path, dict]], list[Path]]:
    """``(artifacts, skipped)``: every ``*.json`` under the roots, sorted by path."""
    found: list[tuple[Path, dict]] = []
    skipped: list[Path] = []
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise ArtifactError(
                f"leaderboard root {root} does not exist; expected a folder of artifacts"
            )
        paths = [root] if root.is_file() else sorted(root.rglob("*.json"))
        for path in paths:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                skipped.append(path)
                continue
            if artifact_kind(data) is None:
                skipped.append(path)
            else:
                found.append((path, data))
    return found, skipped


def _seeds(artifact: Mapping) -> list:
    protocol = artifact.get("evaluation_protocol") or {}
    return list(protocol.get("seeds") or artifact.get("seeds") or [])


def _headline_change(artifact: Mapping) -> tuple[str, float | None, float | None, float | None]:
    """``(metric, mean Δ%, ci_low, ci_high)`` of the verdict's metric (lm_loss by default,
    bits_per_byte across tokenizations), from the richest block present."""
    metric = (artifact.get("verdict") or {}).get("metric", "lm_loss")
    entry = (artifact.get("statistics") or {}).get(metric)
    if isinstance(entry, Mapping):
        change = entry["paired_relative_change_percent"]
        return metric, change["mean"], change.get("ci_low"), change.get("ci_high")
    relative = (artifact.get("relative") or {}).get(f"{metric}_percent")
    if isinstance(relative, int | float):
        return metric, float(relative), None, None
    baseline = artifact["baseline"].get(metric)
    method = artifact["method"].get(metric)
    if isinstance(baseline, int | float) and isinstance(method, int | float) and baseline:
        return metric, relative_changes_percent([baseline], [method])[0], None, None
    return metric, None, None, None


def _reproduction_row(path: Path, artifact: Mapping) -> dict:
    seeds = _seeds(artifact)
    protocol = artifact.get("evaluation_protocol") or {}
    formal_default, policy_default = claim_policy(len(seeds))
    verdict = artifact.get("verdict") or {}
    metric, delta, ci_low, ci_high = _headline_change(artifact)
    return {
        "kind": "reproduction",
        "name": artifact_name(artifact),
        "paper": (artifact.get("paper") or {}).get("title"),
        "arxiv": arxiv_id(artifact),
        "suite": (artifact.get("dataset") or {}).get("benchmark_suite"),
        "tier": protocol.get("tier"),
        "seeds": len(seeds),
        "formal": bool(protocol.get("formal_comparison", formal_default)),
        "baseline": artifact["baseline"].get("name"),
        "metric": metric,
        "baseline_value": artifact["baseline"].get(metric),
        "method_value": artifact["method"].get(metric),
        "change_percent": delta,
        "ci_low": ci_low,
        "ci_high": ci_high,
        "significant": verdict.get("significant"),
        "claim": verdict.get("summary") or protocol.get("claim_policy") or policy_default,
        "status": None,
        "source": str(path),
    }


def _diagnostic_row(path: Path, artifact: Mapping) -> dict:
    protocol = artifact.get("evaluation_protocol") or {}
    full = artifact.get("full_experiment") or {}
    status = f"{artifact.get('implementation_status', '?')}; full experiment {full.get('status', 'not recorded')}"
    return {
        "kind": "diagnostic",
        "name": artifact_name(artifact),
        "paper": None,
        "arxiv": arxiv_id(artifact),
        "suite": None,
        "tier": artifact.get("evaluation_tier") or protocol.get("tier"),
        "seeds": len(_seeds(artifact)),
        "formal": bool(protocol.get("formal_comparison", False)),
        "baseline": None,
        "metric": None,
        "baseline_value": None,
        "method_value": None,
        "change_percent": None,
        "ci_low": None,
        "ci_high": None,
        "significant": None,
        "claim": protocol.get("claim_policy"),
        "status": status,
        "source": str(path),
    }


ROW_BUILDERS = {"reproduction": _reproduction_row, "diagnostic": _diagnostic_row}


def build_leaderboard(entries: Sequence[tuple[Path, Mapping]]) -> list[dict]:
    """Rows for the leaderboard: reproductions first (by arXiv id, name), then diagnostics."""
    rows = []
    for path, artifact in entries:
        kind = artifact_kind(artifact)
        if kind is None:
            raise ArtifactError(f"{path}: not a schema-v2 reproduction or diagnostic artifact")
        try:
            rows.append(ROW_BUILDERS[kind](path, artifact))
        except (KeyError, TypeError) as error:
            raise ArtifactError(f"{path}: malformed {kind} artifact ({error!r})") from error
    order = {"reproduction": 0, "diagnostic": 1}
    return sorted(
        rows, key=lambda row: (order[row["kind"]], row["arxiv"] or "", row["name"], row["source"])
    )


def _number(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _change(row: Mapping) -> str:
    if row["change_percent"] is None:
        return "—"
    text = f"{row['change_percent']:+.2f}%"
    if row["ci_low"] is not None:
        text += f" [{row['ci_low']:+.2f}%, {row['ci_high']:+.2f}%]"
    return text


def _escape(text: object) -> str:
    return str(text if text is not None else "—").replace("|", "\\|").replace("\n", " ")


def render_markdown(rows: Sequence[Mapping], md_path: Path) -> str:
    """The leaderboard as Markdown; sources are linked relative to ``md_path``."""

    def link(row: Mapping) -> str:
        target = os.path.relpath(Path(row["source"]).resolve(), Path(md_path).resolve().parent)
        return f"[{Path(row['source']).name}]({target})"

    reproductions = [row for row in rows if row["kind"] == "reproduction"]
    diagnostics = [row for row in rows if row["kind"] == "diagnostic"]
    lines = [
        "# Leaderboard",
        "",
        "Generated by `llmevo leaderboard` from the artifacts; do not edit by hand.",
        "Δ% is the method's relative change in the verdict's validation metric (lm_loss; bits "
        "per byte where the arms tokenize differently) against the baseline arm (negative is "
        "better), with its 95% paired t-interval where at least 2 seeds exist. "
        "Fewer than 3 seeds is a smoke result, not a claim.",
        "",
        "## Reproductions (L2)",
        "",
        "| method | arXiv | suite | seeds | formal | metric | baseline | method | Δ% [95% CI] | claim | artifact |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in reproductions:
        lines.append(
            f"| {_escape(row['name'])} | {_escape(row['arxiv'])} | {_escape(row['suite'])} | "
            f"{row['seeds']} | {'yes' if row['formal'] else 'no'} | "
            f"{_escape(row['metric'])} | "
            f"{_number(row['baseline_value'])} | {_number(row['method_value'])} | "
            f"{_change(row)} | {_escape(row['claim'])} | {link(row)} |"
        )
    if not reproductions:
        lines.append("| — | | | | | | | | | no reproduction artifacts found | |")
    lines += [
        "",
        "## Component diagnostics",
        "",
        "| component | arXiv | tier | seeds | status | claim | artifact |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in diagnostics:
        lines.append(
            f"| {_escape(row['name'])} | {_escape(row['arxiv'])} | {_escape(row['tier'])} | "
            f"{row['seeds']} | {_escape(row['status'])} | {_escape(row['claim'])} | {link(row)} |"
        )
    if not diagnostics:
        lines.append("| — | | | | | no diagnostic artifacts found | |")
    return "\n".join(lines) + "\n"


def write_leaderboard(rows: Sequence[Mapping], md_path: Path, json_path: Path) -> None:
    """Write the Markdown leaderboard and the same rows as JSON."""
    if Path(md_path).resolve() == Path(json_path).resolve():
        raise ConfigError(f"leaderboard Markdown and JSON paths must differ; both are {md_path}")
    write_text_atomic(Path(md_path), render_markdown(rows, Path(md_path)))
    payload = {"generated_by": "llmevo leaderboard", "rows": list(rows)}
    write_text_atomic(Path(json_path), json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
