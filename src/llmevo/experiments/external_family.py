"""The published family of an external experiment: Holm over its own comparisons.

``llmevo reproduce --experiment FILE --publish`` writes a comparison into
``docs/external/<name>/`` (``<method>-vs-<baseline>[_<shared>].json`` + ``.md``). The
published comparisons of **one experiment** form one family, adjusted by Holm's step-down
procedure (``eval.multiplicity.holm``, the statsmodels-equivalent arithmetic the built-in
table uses), and classed by the same rules (``eval.stats.classify_change``) from the
interval widened to each comparison's step-down level. They do not join llmevo's own family
(``promotion.family_entries``, the built-in reproductions): that family's adjusted classes
decide which components evolution may use, and a user's claims about their own script are
a separate set of claims; pooled, every comparison a user published would make each of
llmevo's rows stricter (and the reverse), so what promotes a component would depend on
unrelated work. Each experiment is the unit a person publishes claims about.

**Members** (``family_members``): the ``llmevo.external/1`` artifacts directly in the
experiment's folder (a ladder's rungs, in its subfolders, are not members, as the built-in
ladders' rungs are not) with a four-class verdict (3 or more paired seeds) and an interval,
the newest (``created``) per comparison (``external.artifact_key``: a rerun supersedes).

**Where it shows.** A published artifact's ``family`` block is the reading when it was
published, this comparison in it (``publish_reading``); ``FAMILY.md`` and ``family.json``
beside it are rewritten at each publication with every member's current reading
(``write_family_index``); ``llmevo verdict`` reads the family of an external artifact's
experiment (``family_reading``: the same comparison published before is replaced by it).

Public API: ``FAMILY_SCHEMA``, ``Member``, ``member``, ``family_members``, ``holm_readings``,
``family_reading``, ``publish_reading``, ``write_family_index``, ``run_comparison`` (a
comparison, published or not: the entry point the commands use).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmevo.artifacts.io import write_json_atomic, write_text_atomic
from llmevo.errors import ArtifactError, ConfigError
from llmevo.eval.multiplicity import DEFAULT_ALPHA, PairedT, from_interval, holm
from llmevo.eval.stats import classify_change
from llmevo.experiments.external import (
    ExternalPlan,
    RunEvent,
    artifact_key,
    compare_external,
    read_external,
)

FAMILY_SCHEMA = "llmevo.external-family/1"
FAMILY_JSON, FAMILY_MD = "family.json", "FAMILY.md"


@dataclass(frozen=True)
class Member:
    """One comparison as Holm reads it."""

    path: Path
    key: str
    created: str
    label: str  # "<method> vs <baseline>"
    estimate: PairedT
    margin: float
    lower_is_better: bool
    alone: str | None  # the class of the 95% interval


def member(path: Path, data: Mapping[str, Any]) -> Member | None:
    """``data`` (an external artifact at ``path``) as a family member, or None when it has no
    four-class verdict with an interval (fewer than 3 paired seeds, or withheld)."""
    verdict = data.get("verdict") or {}
    metric = data["experiment"]["metric"]
    change = ((data.get("statistics") or {}).get(metric) or {}).get("paired_relative_change_percent") or {}
    if verdict.get("classification") is None or None in (change.get("mean"), change.get("ci_low"),
                                                          change.get("ci_high")) or (change.get("n") or 0) < 3:
        return None
    try:
        estimate = from_interval(change["mean"], change["ci_low"], change["ci_high"], int(change["n"]))
    except ConfigError as error:
        raise ArtifactError(f"{path}: {error}") from None
    return Member(path=Path(path), key=artifact_key(data), created=str(data.get("created") or ""),
                  label=f"{data['method']['label']} vs {data['baseline']['label']}", estimate=estimate,
                  margin=float(data["protocol"]["margin_percent"]),
                  lower_is_better=data["experiment"]["direction"] == "lower",
                  alone=verdict.get("classification"))


def family_members(folder: Path) -> list[Member]:
    """The members of the family in ``folder`` (``docs/external/<name>``): the newest per
    comparison, in path order. A JSON file there that is not an external artifact (the
    index, anything else) is not a member."""
    newest: dict[str, Member] = {}
    for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
        try:
            data = read_external(path)
        except ArtifactError:
            continue
        found = member(path, data)
        if found is not None and (found.key not in newest or found.created > newest[found.key].created):
            newest[found.key] = found
    return sorted(newest.values(), key=lambda m: str(m.path))


def holm_readings(members: Sequence[Member], alpha: float = DEFAULT_ALPHA) -> list[dict[str, Any]]:
    """Each member's reading, in order: p alone and Holm-adjusted, rejected, the step-down
    level, the widened interval and its class (``classify_change`` at the member's margin)."""
    readings = []
    for one, result in zip(members, holm([m.estimate for m in members], alpha), strict=True):
        readings.append({
            "comparison": one.key, "label": one.label, "artifact": one.path.name, "class": one.alone,
            "p_value": result.p_value, "p_holm": result.p_holm, "rejected": result.rejected,
            "level": result.level, "ci_low": result.ci_low, "ci_high": result.ci_high,
            "classification": classify_change(result.ci_low, result.ci_high, one.margin, one.lower_is_better),
        })
    return readings


def family_reading(folder: Path, path: Path, data: Mapping[str, Any],
                   members: Sequence[Member] | None = None) -> dict[str, Any] | None:
    """The reading of the artifact ``data`` (at ``path``) within the family in ``folder``,
    with it in: a member of the same comparison is replaced by it. None when it has no
    interval to adjust. ``members``: the family read before (a warm reader's)."""
    this = member(path, data)
    if this is None:
        return None
    published = family_members(folder) if members is None else members
    others = [m for m in published if m.key != this.key]
    replaced = [m for m in published if m.key == this.key and m.path.resolve() != Path(path).resolve()]
    readings = holm_readings([*others, this])
    mine = readings[-1]
    return {"scope": f"the published comparisons of experiment {data['name']!r} ({folder})",
            "size": len(readings), "alpha": DEFAULT_ALPHA,
            **{key: mine[key] for key in ("p_value", "p_holm", "rejected", "level", "ci_low", "ci_high",
                                          "classification")},
            "replaces": str(replaced[0].path) if replaced else None,
            "members": [{key: r[key] for key in ("comparison", "artifact", "class", "p_holm", "classification")}
                        for r in readings]}


def publish_reading(path: Path, data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``family`` block of an artifact about to be published at ``path``: its reading in
    the family of its folder (``family_reading``)."""
    return family_reading(Path(path).parent, path, data)


def write_family_index(folder: Path) -> dict[str, Any]:
    """``family.json`` and ``FAMILY.md`` in ``folder``: every member's current reading."""
    members = family_members(folder)
    readings = holm_readings(members)
    index = {"schema": FAMILY_SCHEMA, "folder": str(folder), "alpha": DEFAULT_ALPHA,
             "members": readings,
             "note": "Holm over this experiment's published comparisons only (not llmevo's own table)"}
    write_json_atomic(Path(folder) / FAMILY_JSON, index)
    lines = [f"# {Path(folder).name}: the published family", "",
             f"Holm's step-down over the {len(readings)} published comparison(s) of this experiment "
             "(their own family, not llmevo's table); generated by `llmevo reproduce --experiment ... "
             "--publish`, do not edit.", "",
             "| comparison | class | p | p (Holm) | interval at its level | after Holm |",
             "|---|---|---|---|---|---|"]
    for r in readings:
        lines.append(f"| [{r['label']}]({Path(r['artifact']).with_suffix('.md').name}) | {r['class']} | "
                     f"{r['p_value']:.3g} | {r['p_holm']:.3g} | [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}] "
                     f"(level {r['level']:.3g}) | {r['classification']} |")
    write_text_atomic(Path(folder) / FAMILY_MD, "\n".join(lines) + "\n")
    return index


def run_comparison(plan: ExternalPlan, base_env: Mapping[str, str],
                   on_run: RunEvent = lambda record: None, created: str | None = None) -> dict:
    """``external.compare_external`` with publishing: a published comparison's artifact gets its
    ``family`` block (``publish_reading``) and its folder's index is rewritten
    (``write_family_index``); an unpublished one is ``compare_external`` alone."""
    if not plan.request.run.publish:
        return compare_external(plan, base_env, on_run, created)
    artifact = compare_external(plan, base_env, on_run, created, family=publish_reading)
    write_family_index(plan.artifact.parent)
    return artifact
