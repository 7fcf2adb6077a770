"""The leaderboard: one row per reproduction artifact, one per component diagnostic.

Which files are artifacts is a rule of location, never a guess from what parses: under a
root, the ``*.json`` files in its ``metrics/`` folders (the published layout
``docs/<kind>/<arxiv>-<name>/metrics/*.json``); every ``*.json`` directly in a reference
folder; a root that is a file. Each is loaded through the validated schema, and one that
does not load is an error naming it, so nothing is rewritten and no published row
disappears. Other JSON under a root (the leaderboard's own, an evolution summary) is not an
artifact because of where it is, and is counted as skipped.

The page's links stay inside the repository (a folder the caller names; the command line's
is the folder it runs in, where ``docs/`` is): an artifact outside it (the shared reference
artifacts) is named by its folder and file, not linked, so no machine's path reaches the
page. A leaderboard is never rewritten without a row the existing one lists (its artifact
deleted, or a reference folder this machine lacks) unless ``replace``.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llmevo.artifacts.io import guarded_write, write_text_atomic
from llmevo.artifacts.ladder import LadderFile, RungRecord
from llmevo.artifacts.schema import (
    Artifact,
    DiagnosticArtifact,
    ReproductionArtifact,
    load_artifact,
    read_json,
)
from llmevo.errors import ArtifactError, ConfigError
from llmevo.eval.concordance import Regime, calibration_sentence, regime_of
from llmevo.eval.decisions import DecisionAccuracy
from llmevo.eval.sensitivity import lr_sensitivity
from llmevo.eval.stats import claim_policy
from llmevo.eval.time_to_target import artifact_time_to_target
from llmevo.promotion import FamilyVerdict, family_members, family_verdicts, verdict_class
from llmevo.reports.concordance import concordance_lines, table_concordance
from llmevo.reports.decisions import accuracy_lines
from llmevo.reports.evidence import fragile_note
from llmevo.reports.ladder import ladder_row, ladder_section, same_runs
from llmevo.reports.sections import format_decimals, narrow_advantage, table_cell

ARTIFACT_FOLDER = "metrics"  # under a root, artifacts are the *.json files in folders of this name


def _artifact_files(root: Path, reference: bool) -> tuple[list[Path], list[Path]]:
    """``(artifacts, other JSON)`` of one root (or reference folder), by the location rule."""
    if not root.exists() and not root.is_symlink():
        raise ArtifactError(
            f"leaderboard root {root} does not exist; expected a folder of artifacts"
        )
    if not root.is_dir():
        return [root], []  # a file named as a root is an artifact (a pipe or device is refused)
    if reference:
        artifacts, others = sorted(root.glob("*.json")), []
        where = f"in {root}: a reference folder holds *.json artifact files"
    else:
        found = sorted(root.rglob("*.json"))
        artifacts = [path for path in found if path.parent.name == ARTIFACT_FOLDER]
        others = [path for path in found if path.parent.name != ARTIFACT_FOLDER]
        where = (f"under {root}: a root's artifacts are the *.json files in its "
                 f"{ARTIFACT_FOLDER}/ folders (a flat folder of artifacts is a --reference)")
    if not artifacts:
        raise ArtifactError(f"no artifacts {where}")
    return artifacts, others


def scan_artifacts(
    roots: Iterable[Path], references: Iterable[Path] = ()
) -> tuple[list[tuple[Path, Artifact]], list[Path]]:
    """``(artifacts, skipped)``, each sorted by path: the artifacts of ``roots`` (their
    ``metrics/`` folders) and ``references`` (flat folders of artifacts), each loaded and
    validated (one that does not load raises ``ArtifactError`` naming it), a file reached
    twice once; ``skipped``: the other JSON under the roots, not artifacts by location."""
    found: dict[Path, tuple[Path, Artifact]] = {}
    skipped: set[Path] = set()
    folders = [(Path(root), False) for root in roots]
    folders += [(Path(folder), True) for folder in references]
    for folder, reference in folders:
        artifacts, others = _artifact_files(folder, reference)
        for path in artifacts:
            if path.resolve() not in found:
                found[path.resolve()] = (path, load_artifact(path))
        skipped.update(others)
    return sorted(found.values(), key=lambda entry: str(entry[0])), sorted(skipped)


def _inside(path: Path, folder: Path) -> Path | None:
    """``path`` relative to ``folder`` when the file really lies in it (links resolved:
    a link inside the folder to a file outside it is outside), else None."""
    try:
        return Path(path).resolve().relative_to(Path(folder).resolve())
    except ValueError:
        return None


def _source(path: Path, repository: Path) -> dict:
    """Where a row's artifact is, as the published page may say it: its path in the
    repository, or, outside it, its folder and file name (no machine's path)."""
    inside = _inside(path, repository)
    if inside is not None:
        return {"source": inside.as_posix(), "in_repository": True}
    absolute = Path(path).absolute()
    return {"source": "/".join(part for part in (absolute.parent.name, absolute.name) if part),
            "in_repository": False}


def _holm_fields(family: FamilyVerdict | None) -> dict | None:
    if family is None:
        return None
    holm = family.holm
    return {"p_value": holm.p_value, "p_holm": holm.p_holm, "rejected": holm.rejected,
            "rank": holm.rank, "level": holm.level, "ci_low": holm.ci_low, "ci_high": holm.ci_high,
            "classification": family.classification, "family_size": holm.family_size,
            "alpha": holm.alpha}


def _sensitivity_fields(artifact: ReproductionArtifact) -> dict | None:
    if artifact.tuning is None:
        return None
    return {arm: {"best_lr": result.best_lr, "best": result.best, "spread": result.spread,
                  "relative_spread_percent": result.relative_spread_percent,
                  "band_low_lr": result.band_low_lr, "band_high_lr": result.band_high_lr,
                  "band_decades": result.band_decades, "diverged": list(result.diverged)}
            for arm, result in lr_sensitivity(artifact.tuning).items()}


def _chosen_fields(artifact: ReproductionArtifact) -> dict | None:
    """Each arm's chosen learning rate and how it was reached (grid edge, extension, confirmation)."""
    if artifact.tuning is None:
        return None
    return {arm: {"lr": block.chosen["lr"], "extended": block.extended, "on_edge": block.chosen_on_edge,
                  "confirmed": block.chosen["lr"] in block.confirmed}
            for arm, block in artifact.tuning.arms.items()}


def _rescoring_fields(artifact: ReproductionArtifact) -> dict | None:
    """Per arm, what the multi-seed re-scoring (``ArmTuning.rescoring``) did: ``settings``
    re-scored on ``seeds`` tuning seeds in all (the tuning seeds and the confirmation seeds),
    the tuning seeds' best (``before``: an lr, or a trial number under space tuning), the
    choice (``chosen``) and whether it ``changed``; None for an arm with a clear winner
    (nothing re-scored). None for the row when no arm has the record (artifacts from before
    it, or ``--tune-confirm 0``), so those rows are unchanged."""
    tuning = artifact.tuning
    if tuning is None or all(block.rescoring is None for block in tuning.arms.values()):
        return None
    fields: dict[str, dict | None] = {}
    for arm, block in tuning.arms.items():
        record = block.rescoring
        if record is None or not record.seeds or not record.settings:
            fields[arm] = None
            continue
        first = record.settings[0]  # the best on the tuning seeds (``runner.tuning.contenders``)
        before, chosen = ((first.trial, block.chosen_trial) if first.trial is not None
                          else (first.lr, block.chosen["lr"]))
        fields[arm] = {"settings": len(record.settings), "seeds": len(tuning.seeds) + len(record.seeds),
                       "key": "trial" if first.trial is not None else "lr",
                       "before": before, "chosen": chosen, "changed": chosen != before}
    return fields


def _budget_fields(artifact: ReproductionArtifact) -> dict | None:
    """Each arm's tuning budget as its artifact records it (``tuning.arms.<arm>.budget``):
    ``runs`` (every tuning run of the arm, the declared grid or trials and its adaptive
    extensions: edge extension, the probe's, re-scoring; cached runs included), ``trained``
    (of those, trained for this artifact), ``steps_per_run``, and ``cpu_seconds`` /
    ``wall_seconds`` of the tuning in this artifact's run (a cached run costs only its
    loading, so these count the trained runs). None for an untuned row, and for an arm
    whose artifact predates the record."""
    if artifact.tuning is None:
        return None
    fields: dict[str, dict | None] = {}
    for arm, block in artifact.tuning.arms.items():
        budget = block.budget
        fields[arm] = None if budget is None else {
            "runs": budget.runs, "trained": budget.trained, "steps_per_run": budget.steps_per_run,
            "cpu_seconds": budget.cpu_seconds, "wall_seconds": budget.wall_seconds}
    return fields


def _fragile_seeds(artifact: ReproductionArtifact, metric: str, classification: str | None) -> list[int] | None:
    """The report seeds whose leaving out changes the class (``eval.stats.fragile_seeds``);
    None where there is no class or fewer than 4 paired seeds."""
    from llmevo.eval.stats import fragile_seeds

    pairs = artifact.paired_values(metric)
    rows = artifact.per_seed or []
    verdict = artifact.verdict
    if classification is None or verdict is None or pairs is None or len(rows) < 4 or classification == "no-op":
        return None
    margin = float(verdict.margin_percent or 1.0)
    return fragile_seeds([row.seed for row in rows], *pairs, classification, margin, verdict.lower_is_better)


def _stalled_seeds(artifact: ReproductionArtifact, metric: str) -> dict[str, list[int]] | None:
    """Each arm's report seeds that stalled on ``metric`` (``eval.stats.stalled_seeds``: a
    paired change far off the other seeds', or a diverged run); None below 4 paired seeds."""
    from llmevo.eval.stats import stalled_seeds

    pairs = artifact.paired_values(metric)
    rows = artifact.per_seed or []
    if pairs is None or len(rows) < 4:
        return None
    lower = artifact.verdict.lower_is_better if artifact.verdict is not None else True
    return stalled_seeds([row.seed for row in rows], *pairs, lower)


def _reproduction_row(artifact: ReproductionArtifact, family: FamilyVerdict | None = None) -> dict:
    protocol, verdict = artifact.evaluation_protocol, artifact.verdict
    # the protocol's seeds; a top-level seeds key (kept unknown) where the protocol lists none
    seeds = protocol.seeds or artifact.recorded("seeds") or []
    _, policy_default = claim_policy(len(seeds))
    metric, delta, ci_low, ci_high = artifact.headline_change
    claim = ((verdict.summary if verdict is not None else None) or protocol.claim_policy
             or policy_default)
    narrow = narrow_advantage(artifact)
    classification = verdict_class(artifact) if protocol.formal_comparison else None
    fragile = _fragile_seeds(artifact, metric, classification)
    judged = artifact.tuning is not None and classification == "better"  # narrow is said of a better
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
        "classification": classification,
        "holm": _holm_fields(family),  # None: not in the family (untuned, smoke, superseded)
        "lr_sensitivity": _sensitivity_fields(artifact),
        "chosen_lr": _chosen_fields(artifact),
        "narrow_advantage": (narrow is not None) if judged else None,
        "fragile_seeds": fragile,  # None: not a formal comparison of 4+ seeds
        "stalled_seeds": _stalled_seeds(artifact, metric),  # per arm; None: fewer than 4 seeds
        "time_to_target": artifact_time_to_target(artifact),  # the method's share of the baseline's steps
        "tuning_budget": _budget_fields(artifact),  # each arm's tuning runs and CPU seconds; None: untuned
        "code_dirty": artifact.provenance.code_dirty,  # written from a tree with uncommitted changes
        "claim": f"{claim} {narrow}" if narrow else claim,
        "status": None,
        # compute-matched arms (--match flops): said on the row; absent for equal tokens (the default)
        **({"match": "flops", "flops_ratio_per_token": _flops_per_token_ratio(artifact)}
           if artifact.setup.match == "flops" else {}),
        # the multi-seed re-scoring per arm: absent where no arm recorded one (older artifacts)
        **({"rescoring": rescoring} if (rescoring := _rescoring_fields(artifact)) is not None else {}),
        # where the verdict was measured (eval.concordance.regime_of: read from the recorded config)
        "regime": regime_of(artifact).model_dump(mode="json"),
    }


def _flops_per_token_ratio(artifact: ReproductionArtifact) -> float | None:
    """The method's counted training FLOPs per token over the baseline's (``setup.flops``)."""
    block = artifact.setup.flops
    if block is None:
        return None
    per_token = block.flops_per_token
    return per_token["method"]["counted"] / per_token["baseline"]["counted"]


def _diagnostic_row(artifact: DiagnosticArtifact) -> dict:
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
        "code_dirty": artifact.provenance.code_dirty,  # written from a tree with uncommitted changes
    }


def build_leaderboard(entries: Sequence[tuple[Path, Artifact]], repository: Path) -> list[dict]:
    """Rows for the leaderboard: reproductions first (by arXiv id, name; the artifacts from
    outside the repository before its own, then by source), then diagnostics; each row's
    ``source`` is its artifact's path in ``repository`` (``in_repository``), or its folder
    and file name when it lies outside. The family for the Holm adjustment is the tuned
    formal rows among ``entries`` (``llmevo.promotion.family_members``: the newest per
    comparison), the same rule promotion applies to ``docs/``."""
    for path, artifact in entries:
        if not isinstance(artifact, ReproductionArtifact | DiagnosticArtifact):
            raise ArtifactError(f"{path}: not a validated artifact (load it with load_artifact)")
    family = family_verdicts(family_members(entries))
    rows = []
    for path, artifact in entries:
        row = (_reproduction_row(artifact, family.get(Path(path).resolve()))
               if isinstance(artifact, ReproductionArtifact) else _diagnostic_row(artifact))
        rows.append({**row, **_source(path, repository)})
    _calibrate(rows)
    order = {"reproduction": 0, "diagnostic": 1}
    return sorted(rows, key=lambda row: (order[row["kind"]], row["arxiv"] or "", row["name"],
                                         row["in_repository"], row["source"]))


def _calibrate(rows: list[dict]) -> None:
    """Each classed reproduction row's ``transfer`` (how often its class held at scale, from the
    concordance of the table's own family rows with the references) and ``calibration`` (the
    sentence that says it and the regime, ``eval.concordance.calibration_sentence``)."""
    found = table_concordance(rows)
    for row in rows:
        if row["kind"] != "reproduction" or not row.get("classification"):
            continue
        transfer = found.transfer(row["classification"])
        row["transfer"] = None if transfer is None else transfer.to_json()
        row["calibration"] = calibration_sentence(Regime.model_validate(row["regime"]), transfer)


def _change(row: Mapping) -> str:
    if row["change_percent"] is None:
        return "—"
    text = f"{row['change_percent']:+.2f}%"
    if row["ci_low"] is not None:
        text += f" [{row['ci_low']:+.2f}%, {row['ci_high']:+.2f}%]"
    return text


DIRTY_MARK = " *(dirty tree)*"  # after the link of an artifact whose provenance has code_dirty: true


def _class_cell(row: Mapping) -> str:
    """The class, marked *(fragile: seed 44)* where leaving out one report seed changes it."""
    return table_cell(row.get("classification")) + fragile_note(row, stalled=False)


def _holm_cell(row: Mapping) -> str:
    """``better [-16.90%, -7.21%]``: the Holm-adjusted class and interval; a dash outside
    the family."""
    holm = row.get("holm")
    if not holm:
        return "—"
    return f"{table_cell(holm['classification'])} [{holm['ci_low']:+.2f}%, {holm['ci_high']:+.2f}%]"


def _p(value: float) -> str:
    return f"{value:.2g}" if value < 0.01 else f"{value:.3f}"


def _sensitivity_cell(arm: Mapping | None) -> str:
    """``11.8%, band 0.003`` : relative spread over the grid and the lr band within 1% of the best."""
    if not arm:
        return "—"
    band = (f"{arm['band_low_lr']:.3g}–{arm['band_high_lr']:.3g}"
            if arm["band_high_lr"] > arm["band_low_lr"] else f"{arm['band_low_lr']:.3g} only")
    return f"{arm['relative_spread_percent']:.1f}%, ±1% band {band}"


def _family_section(rows: Sequence[Mapping], link) -> list[str]:
    family = [row for row in rows if row.get("holm")]
    if not family:
        return []
    size, alpha = family[0]["holm"]["family_size"], family[0]["holm"]["alpha"]
    lines = [
        "",
        "## Tuned evidence, family-wise (Holm)",
        "",
        f"The family is the {size} tuned formal comparisons above (the newest per component, "
        f"baseline choice and preset). *Holm p* is Holm's step-down adjustment of the paired "
        f"t-test p-values (statsmodels `multipletests`, family-wise α = {alpha:g}); the adjusted "
        "interval is the same paired t-interval at the comparison's Holm step-down level "
        "α/(m − rank + 1) (after the first comparison Holm does not reject: that one's level), so "
        "it excludes zero exactly when Holm rejects; its class uses the same rules and margin. "
        "Promotion into the evolution space reads the Holm class. *lr sensitivity*: each arm's "
        "spread of mean validation loss over the tuning grid (worst − best, % of the best) and "
        "the learning rates within 1% of its best (Wortsman et al. 2309.14322); *narrow*: a "
        "better whose advantage over the baseline arm's best holds at no two neighbouring grid "
        "points on the tuning seeds.",
        "",
        "| method | baseline arm | Δ% [95% CI] | class | p | Holm p | Holm-adjusted CI (level) | Holm class | lr sensitivity: baseline | lr sensitivity: method | narrow | artifact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in family:
        holm = row["holm"]
        sensitivity = row.get("lr_sensitivity") or {}
        lines.append(
            f"| {table_cell(row['name'])} | {_baseline_arm(row)} | {_change(row)} | "
            f"{_class_cell(row)} | {_p(holm['p_value'])} | {_p(holm['p_holm'])} | "
            f"[{holm['ci_low']:+.2f}%, {holm['ci_high']:+.2f}%] ({100 * (1 - holm['level']):.2f}%) | "
            f"{table_cell(holm['classification'])} | {_sensitivity_cell(sensitivity.get('baseline'))} | "
            f"{_sensitivity_cell(sensitivity.get('method'))} | "
            f"{ {True: 'yes', False: 'no', None: '—'}[row.get('narrow_advantage')]} | {link(row)} |")
    return lines


def _baseline_arm(row: Mapping) -> str:
    """The baseline arm's name, marked when ``--against`` chose it instead of the ablation."""
    name = table_cell(row.get("baseline"))
    name = f"{name} *(--against {table_cell(row['against'])})*" if row.get("against") else name
    if row.get("match") == "flops":  # the method trained the steps that spend the baseline's FLOPs
        ratio = row.get("flops_ratio_per_token")
        name += (" *(FLOP-matched" + (f": method at {ratio:.3f}x the FLOPs per token" if ratio else "")
                 + ", never promotes)*")
    return name


def render_markdown(rows: Sequence[Mapping], md_path: Path, repository: Path,
                    ladders: Sequence[dict] = (), accuracy: DecisionAccuracy | None = None) -> str:
    """The leaderboard as Markdown. A source in ``repository`` is linked relative to
    ``md_path`` when the page is in it too; any other source is named, not linked. With
    ``accuracy``, the ladders' decision accuracy follows their table."""
    page_folder = _inside(Path(md_path).parent, repository)

    def link(row: Mapping) -> str:
        source = table_cell(row["source"])
        dirty = DIRTY_MARK if row.get("code_dirty") else ""
        if not row["in_repository"]:
            return f"`{source}` (outside the repository){dirty}"
        if page_folder is None:
            return f"`{source}`{dirty}"
        target = posixpath.relpath(row["source"], page_folder.as_posix())
        return f"[{table_cell(Path(row['source']).name)}]({table_cell(target)}){dirty}"

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
        "for the same slot (llama_modern's own), which is extra evidence and never promotes. "
        "*Holm class*: the class once the whole table of tuned comparisons is counted (below). "
        "*(fragile: seed …)* after a class: leaving out that one report seed changes the class. "
        f"*{DIRTY_MARK.strip(' *()')}* after an artifact: its provenance records `code_dirty: true`, "
        "written from a tree with uncommitted changes, so its commit does not say what ran; "
        "no such artifact is in the Holm family.",
        "",
        "## Reproductions (L2)",
        "",
        "| method | arXiv | suite | seeds | formal | tuned | metric | baseline arm | baseline | method | Δ% [95% CI] | class | Holm class [adjusted CI] | claim | artifact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in reproductions:
        lines.append(
            f"| {table_cell(row['name'])} | {table_cell(row['arxiv'])} | {table_cell(row['suite'])} | "
            f"{row['seeds']} | {'yes' if row['formal'] else 'no'} | "
            f"{'yes' if row.get('tuned') else '*untuned*'} | {table_cell(row['metric'])} | "
            f"{_baseline_arm(row)} | {format_decimals(row['baseline_value'])} | {format_decimals(row['method_value'])} | "
            f"{_change(row)} | {_class_cell(row)} | {_holm_cell(row)} | "
            f"{table_cell(' '.join(filter(None, (row['claim'], row.get('calibration')))))} | {link(row)} |"
        )
    if not reproductions:
        lines.append("| — | | | | | | | | | | | | | no reproduction artifacts found | |")
    lines += _family_section(reproductions, link)
    lines += ladder_section(list(ladders), link)
    if accuracy is not None:
        lines += ["", "## Decision accuracy", "",
                  "Does a ladder's verdict at one rung predict the next rung's, and the top rung's? "
                  "(`llmevo ladder --accuracy`; `eval/decisions.py` says what counts.)", "",
                  *accuracy_lines(accuracy)]
    if any(row.get("holm") for row in reproductions):
        lines += ["", "## Concordance at scale", "",
                  "Do the table's verdicts hold in careful studies at 100M+ parameters? "
                  "(`eval/concordance.py` says what counts.)", "", *concordance_lines(reproductions)]
    lines += [
        "",
        "## Component diagnostics",
        "",
        "| component | arXiv | tier | seeds | status | claim | artifact |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in diagnostics:
        lines.append(
            f"| {table_cell(row['name'])} | {table_cell(row['arxiv'])} | {table_cell(row['tier'])} | "
            f"{row['seeds']} | {table_cell(row['status'])} | {table_cell(row['claim'])} | {link(row)} |"
        )
    if not diagnostics:
        lines.append("| — | | | | | no diagnostic artifacts found | |")
    return "\n".join(lines) + "\n"


def _listed_sources(json_path: Path) -> set[str]:
    data = read_json(json_path)
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not all(
            isinstance(row, dict) and isinstance(row.get("source"), str) for row in rows):
        raise ArtifactError(f"{json_path}: not a leaderboard (expected rows with a source)")
    return {row["source"] for row in rows}


def _check_rows_kept(json_path: Path, rows: Sequence[Mapping], *, replace: bool) -> None:
    """Refuse to rewrite the leaderboard at ``json_path`` without a row it lists, or over a
    file there that is not a leaderboard, unless ``replace``."""
    json_path = Path(json_path)
    if replace or not (json_path.exists() or json_path.is_symlink()):
        return
    try:
        listed = _listed_sources(json_path)
    except ArtifactError as error:
        raise ArtifactError(f"{error}; pass --replace to overwrite it") from None
    dropped = sorted(listed - {row["source"] for row in rows})
    if dropped:
        named = ", ".join(dropped[:3]) + (f" and {len(dropped) - 3} more" if len(dropped) > 3 else "")
        raise ConfigError(
            f"{json_path} lists {len(dropped)} artifact(s) this leaderboard would drop ({named}): "
            "deleted, or in a folder not scanned here (a reference folder: --reference DIR); "
            "nothing was written (pass --replace to drop them)")


def ladder_rows(entries: Sequence[tuple[Path, LadderFile]], repository: Path,
                artifacts: Sequence[tuple[Path, Artifact]] = ()) -> list[dict]:
    """The ladders' leaderboard rows, their sources located as the artifacts' are. With the
    scanned ``artifacts``, each row's ``quick_row`` says what its rung 0 is to its comparison's
    row in the evidence table (the Holm family member at the quick preset of the same
    component and baseline choice): ``same runs`` (``reports.ladder.same_runs``), ``same
    figures`` (other runs whose change and interval print the same to two decimals, e.g. a
    rerun under another commit) or ``other figures``; None where it has no such row or no
    rung 0."""
    members = {(artifact.name, artifact.against): artifact for _, artifact in family_members(artifacts)
               if artifact.setup.preset == "quick" and not artifact.setup.rung}
    rows = []
    for path, ladder in entries:
        row = ladder_row(path, ladder, "") | _source(path, repository)
        if artifacts:
            member = members.get((ladder.name, ladder.against))
            rung0 = next((record for record in ladder.rungs if record.rung == 0), None)
            row["quick_row"] = None if member is None or rung0 is None else _rung_zero(rung0, member)
        rows.append(row)
    return rows


def _rung_zero(record: RungRecord, artifact: ReproductionArtifact) -> str:
    """``same runs``, ``same figures`` or ``other figures``: a ladder's rung 0 against its row."""
    if same_runs(record, artifact):
        return "same runs"
    change = artifact.headline_change
    printed = [None if value is None else round(value, 2)
               for value in (record.delta_percent, record.ci_low, record.ci_high)]
    row = [None if value is None else round(value, 2) for value in (change.percent, change.ci_low, change.ci_high)]
    return "same figures" if printed == row else "other figures"


def write_leaderboard(rows: Sequence[Mapping], md_path: Path, json_path: Path,
                      repository: Path, *, replace: bool = False, ladders: Sequence[dict] = (),
                      accuracy: DecisionAccuracy | None = None) -> None:
    """Write the Markdown leaderboard and the same rows as JSON (with the ladders' rows and,
    given, their decision accuracy), in ``repository`` (see ``render_markdown``); never without
    a row the existing JSON lists unless ``replace``."""
    if Path(md_path).resolve() == Path(json_path).resolve():
        raise ConfigError(f"leaderboard Markdown and JSON paths must differ; both are {md_path}")
    _check_rows_kept(json_path, rows, replace=replace)
    markdown = render_markdown(rows, Path(md_path), repository, ladders, accuracy)
    payload = {"generated_by": "llmevo leaderboard",
               "markdown_sha256": hashlib.sha256(markdown.encode("utf-8")).hexdigest(),
               "rows": list(rows), "ladders": list(ladders),
               **({"decision_accuracy": accuracy.to_json()} if accuracy is not None else {}),
               **({"concordance": table_concordance(rows).to_json()}
                  if any(row.get("holm") for row in rows) else {})}
    write_pair(Path(md_path), markdown, Path(json_path), json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def write_pair(md_path: Path, markdown: str, json_path: Path, text: str) -> None:
    """The Markdown page and its JSON as a pair: both written in full (and synced) under
    temporary names beside them first, then renamed, the JSON last. A failure before the
    renames leaves both files as they were; the JSON's ``markdown_sha256`` lets a reader tell
    a pair torn between the two renames (``check_pair``)."""
    staged: list[tuple[Path, Path]] = []
    try:
        for target, content in ((md_path, markdown), (json_path, text)):
            temporary = target.with_name(f".{target.name}.pair.tmp")
            write_text_atomic(temporary, content)
            staged.append((temporary, target))
        for temporary, target in staged:
            with guarded_write(target):
                os.replace(temporary, target)
    except BaseException:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
        raise


def check_pair(md_path: Path, json_path: Path) -> None:
    """Refuse a leaderboard pair whose Markdown is not the one its JSON was written with (a
    write torn between the two renames, or a page edited by hand); a JSON from before the
    digest was recorded is taken as it is."""
    data = read_json(json_path)
    recorded = data.get("markdown_sha256") if isinstance(data, dict) else None
    if recorded is None:
        return
    try:
        actual = hashlib.sha256(Path(md_path).read_bytes()).hexdigest()
    except OSError as error:
        raise ArtifactError(f"{md_path}: cannot read the leaderboard page ({error.strerror or error})") from None
    if actual != recorded:
        raise ArtifactError(f"{md_path} is not the page {json_path} was written with (a torn or edited "
                            "pair); run 'llmevo leaderboard' again")


RESULTS_PAGE = Path("docs") / "results" / "index.md"  # the site's page with the full evidence table
LADDERS_PAGE = Path("docs") / "results" / "ladders.md"  # the site's ladders page: the decision accuracy


@dataclass(frozen=True)
class Regenerated:
    rows: list[dict]
    skipped: list[Path]
    readme: Path | None  # the README whose generated table was rewritten, if any
    pages: tuple[Path, ...] = ()  # every file whose generated tables were rewritten (README first)
    accuracy: DecisionAccuracy | None = None  # the decision accuracy over the ladders


def regenerate(repository: Path, roots: Sequence[Path] | None = None, references: Sequence[Path] = (),
               out: Path | None = None, readme: Path | None = None, *, replace: bool = False) -> Regenerated:
    """``llmevo leaderboard``: the artifacts under ``roots`` (default ``<repository>/docs``) and
    ``references`` into ``out`` (default ``docs/LEADERBOARD.md``, + .json), with the ladders, and
    the generated tables (``reports.evidence``: the headline table, the full evidence table, the
    decision accuracy) between their markers in ``readme`` (default ``README.md``) and in the
    site's results pages (``docs/results/index.md``, ``docs/results/ladders.md``). Defaults are rewritten only when they have markers and
    ``roots`` is the default, the repository's own docs; a ``readme`` given explicitly must
    have markers. Paths are relative to ``repository``; every check happens before anything
    is written."""
    from llmevo.artifacts.io import check_output_file
    from llmevo.reports.decisions import accuracy_of
    from llmevo.reports.evidence import (
        EVIDENCE_END,
        EVIDENCE_START,
        HEADLINE_END,
        HEADLINE_START,
        replace_generated,
    )
    from llmevo.reports.ladder import scan_ladders

    repository = Path(repository)
    roots = list(roots) if roots is not None else [repository / "docs"]
    out = out if out is not None else repository / "docs" / "LEADERBOARD.md"
    json_path = out.with_suffix(".json")
    check_output_file(out)
    check_output_file(json_path)
    entries, skipped = scan_artifacts(roots, references=references)
    rows = build_leaderboard(entries, repository)
    found = scan_ladders(roots)
    ladders = ladder_rows(found, repository, entries)
    accuracy = accuracy_of(found, repository)
    # the repository's own pages are rewritten only from the repository's own docs: a
    # leaderboard of other roots (``--root``) must not replace their tables (a test once
    # emptied the README's that way)
    own_docs = [Path(root).resolve() for root in roots] == [(repository / "docs").resolve()]
    targets = [readme] if readme is not None else (
        [repository / "README.md", repository / RESULTS_PAGE, repository / LADDERS_PAGE] if own_docs else [])
    rewritten: list[tuple[Path, str]] = []
    for target in targets:
        if not target.is_file():
            if target is readme:
                raise ConfigError(f"--readme {target}: no such file")
            continue
        text = replace_generated(target.read_text(encoding="utf-8"), rows, ladders, accuracy)
        if text is None and target is readme:
            raise ConfigError(f"--readme {target}: no generated-table markers ({EVIDENCE_START!r} … "
                              f"{EVIDENCE_END!r}, or {HEADLINE_START!r} … {HEADLINE_END!r}); add them "
                              "where the table goes")
        if text is not None:
            rewritten.append((target, text))
    write_leaderboard(rows, out, json_path, repository, replace=replace, ladders=ladders, accuracy=accuracy)
    for target, text in rewritten:
        write_text_atomic(target, text)
    pages = tuple(target for target, _ in rewritten)
    readme_written = next((page for page in pages if page.name == "README.md" or page == readme), None)
    return Regenerated(rows, list(skipped), readme_written, pages, accuracy)
