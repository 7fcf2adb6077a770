"""The leaderboard: one row per reproduction artifact, one per component diagnostic.

Every artifact is loaded through the validated schema (``llmevo.artifacts.schema``). JSON
files that do not claim to be artifacts (no ``schema_version`` and ``method``, e.g. an
evolution summary or the leaderboard itself) are skipped and counted; a file that claims to
be an artifact but does not validate is an error, never guessed at.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from llmevo.artifacts.io import write_text_atomic
from llmevo.artifacts.schema import (
    Artifact,
    DiagnosticArtifact,
    ReproductionArtifact,
    claims_to_be_artifact,
    read_json,
    validate_artifact,
)
from llmevo.errors import ArtifactError, ConfigError
from llmevo.eval.stats import claim_policy
from llmevo.promotion import verdict_class
from llmevo.reports.sections import format_decimals


def scan_artifacts(roots: Iterable[Path]) -> tuple[list[tuple[Path, Artifact]], list[Path]]:
    """``(artifacts, skipped)``: every ``*.json`` under the roots, sorted by path."""
    found: list[tuple[Path, Artifact]] = []
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
                data = read_json(path)
            except ArtifactError:
                skipped.append(path)
                continue
            if claims_to_be_artifact(data):
                found.append((path, validate_artifact(data, str(path))))
            else:
                skipped.append(path)
    return found, skipped


def _reproduction_row(path: Path, artifact: ReproductionArtifact) -> dict:
    protocol, verdict = artifact.evaluation_protocol, artifact.verdict
    # the protocol's seeds; a top-level seeds key (kept unknown) where the protocol lists none
    seeds = protocol.seeds or artifact.recorded("seeds") or []
    _, policy_default = claim_policy(len(seeds))
    metric, delta, ci_low, ci_high = artifact.headline_change
    return {
        "kind": "reproduction",
        "name": artifact.name,
        "paper": artifact.paper.title,
        "arxiv": artifact.arxiv,
        "suite": artifact.dataset.benchmark_suite,
        "tier": protocol.tier,
        "seeds": len(seeds),
        "formal": protocol.formal_comparison,
        "baseline": artifact.baseline.name,
        "against": artifact.against,  # the baseline's slot choice when not the declared ablation
        "metric": metric,
        "baseline_value": artifact.baseline.recorded(metric),
        "method_value": artifact.method.recorded(metric),
        "change_percent": delta,
        "ci_low": ci_low,
        "ci_high": ci_high,
        "significant": verdict.significant if verdict is not None else None,
        "tuned": artifact.tuning is not None,
        "classification": verdict_class(artifact) if protocol.formal_comparison else None,
        "claim": (verdict.summary if verdict is not None else None) or protocol.claim_policy
        or policy_default,
        "status": None,
        "source": str(path),
    }


def _diagnostic_row(path: Path, artifact: DiagnosticArtifact) -> dict:
    protocol = artifact.evaluation_protocol
    status = (
        f"{artifact.implementation_status}; full experiment {artifact.full_experiment.status}"
    )
    return {
        "kind": "diagnostic",
        "name": artifact.name,
        "paper": None,
        "arxiv": artifact.arxiv,
        "suite": None,
        "tier": artifact.evaluation_tier or protocol.tier,
        "seeds": len(protocol.seeds or artifact.seeds),
        "formal": protocol.formal_comparison,
        "baseline": None,
        "against": None,
        "metric": None,
        "baseline_value": None,
        "method_value": None,
        "change_percent": None,
        "ci_low": None,
        "ci_high": None,
        "significant": None,
        "claim": protocol.claim_policy,
        "status": status,
        "source": str(path),
    }


ROW_BUILDERS = {"reproduction": _reproduction_row, "diagnostic": _diagnostic_row}


def build_leaderboard(entries: Sequence[tuple[Path, Artifact]]) -> list[dict]:
    """Rows for the leaderboard: reproductions first (by arXiv id, name), then diagnostics."""
    rows = []
    for path, artifact in entries:
        if not isinstance(artifact, ReproductionArtifact | DiagnosticArtifact):
            raise ArtifactError(f"{path}: not a validated artifact (load it with load_artifact)")
        rows.append(ROW_BUILDERS[artifact.kind](path, artifact))
    order = {"reproduction": 0, "diagnostic": 1}
    return sorted(
        rows, key=lambda row: (order[row["kind"]], row["arxiv"] or "", row["name"], row["source"])
    )


def _change(row: Mapping) -> str:
    if row["change_percent"] is None:
        return "—"
    text = f"{row['change_percent']:+.2f}%"
    if row["ci_low"] is not None:
        text += f" [{row['ci_low']:+.2f}%, {row['ci_high']:+.2f}%]"
    return text


def _baseline_arm(row: Mapping) -> str:
    """The baseline arm's name, marked when ``--against`` chose it instead of the ablation."""
    name = _escape(row.get("baseline"))
    return f"{name} *(--against {_escape(row['against'])})*" if row.get("against") else name


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
        "Fewer than 3 seeds is a smoke result, not a claim. *Untuned*: both arms trained at "
        "one learning rate chosen for the baseline (no `tuning` block), so a method that "
        "needs another learning rate may lose for that reason; only tuned reproductions "
        "promote a component into the search space. *Baseline arm* is what the method was "
        "compared with: its declared ablation, or, marked *(--against)*, another choice "
        "for the same slot (llama_modern's own), which is extra evidence and never promotes.",
        "",
        "## Reproductions (L2)",
        "",
        "| method | arXiv | suite | seeds | formal | tuned | metric | baseline arm | baseline | method | Δ% [95% CI] | class | claim | artifact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in reproductions:
        lines.append(
            f"| {_escape(row['name'])} | {_escape(row['arxiv'])} | {_escape(row['suite'])} | "
            f"{row['seeds']} | {'yes' if row['formal'] else 'no'} | "
            f"{'yes' if row.get('tuned') else '*untuned*'} | {_escape(row['metric'])} | "
            f"{_baseline_arm(row)} | {format_decimals(row['baseline_value'])} | {format_decimals(row['method_value'])} | "
            f"{_change(row)} | {_escape(row.get('classification'))} | {_escape(row['claim'])} | {link(row)} |"
        )
    if not reproductions:
        lines.append("| — | | | | | | | | | | | | no reproduction artifacts found | |")
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
