"""``llmevo components``: every registered component with its paper, ablation, status and
origin (``builtin`` or the plugin distribution that registered it); ``llmevo components
check [--plugin DIST]``: the contract suite over the registry, or over one plugin's components."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from llmevo.cli.common import app, console
from llmevo.errors import ConfigError


def component_records(docs: Path) -> list[dict[str, Any]]:
    """One JSON-ready manifest per registered component (by slot, then name), plus
    the evidence-based ``tier_reached``, ``has_artifact`` (a published reproduction) and
    ``promoted`` flag with its reason."""
    from llmevo.catalog import full_registry
    from llmevo.promotion import (
        batched_replicas,
        family_entries,
        family_verdicts,
        promotion,
        published_artifacts,
        tier_reached,
    )
    from llmevo.registry import SLOTS

    specs = sorted(full_registry().all(), key=lambda spec: (SLOTS.index(spec.slot), spec.name))
    family = family_verdicts(family_entries(docs))  # the published family, read once
    records = []
    for spec in specs:
        decision = promotion(spec, docs, family)
        records.append({
            **spec.manifest.model_dump(mode="json"),
            "origin": spec.origin,
            "has_artifact": bool(published_artifacts(spec, docs, "reproductions")),
            "tier_reached": tier_reached(spec, docs),
            "promoted": decision.promoted,
            "promotion_reason": decision.reason,
            "batched_replicas": batched_replicas(spec),
        })
    return records


def _short(text: str, width: int = 28) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _yes_no(value: bool) -> str:
    return "[green]yes[/]" if value else "[dim]no[/]"


components_app = typer.Typer(
    help="List every registered component (builtin and plugins'); 'check' runs the contract suite.",
    invoke_without_command=True)
app.add_typer(components_app, name="components")


WIDE_TABLE = 150  # terminal columns from which every column is shown
MEDIUM_TABLE = 100  # ... the arXiv id and the ablation


@components_app.callback()
def components(
    context: typer.Context,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON list of manifests with has_artifact.")
    ] = False,
    docs: Annotated[
        Path,
        typer.Option(
            help="The docs folder searched for reproductions/<arxiv>-<name>/metrics/*.json."
        ),
    ] = Path("docs"),
) -> None:
    """List every registered component: slot, paper, ablation, status, tier, artifact, origin."""
    from rich import box
    from rich.table import Table

    if context.invoked_subcommand is not None:
        return

    if not docs.is_dir():  # else every component would silently show no evidence
        raise ConfigError(f"--docs {docs} is not a folder; expected the docs folder that holds "
                          "reproductions/ and foundation-models/")
    records = component_records(docs)
    if as_json:
        typer.echo(json.dumps(records, indent=2))
        return
    slots = sorted({record["slot"] for record in records})
    # every column where the terminal has room; on a narrow one the columns that say what a
    # component is and what evidence it has, so that none is cut off (--json has everything)
    wide = console.width >= WIDE_TABLE
    columns = (["slot", "name", "arXiv", "paper", "ablation", "status", "tier", "promoted", "artifact",
                "batched", "origin"] if wide else
               ["slot", "name", "arXiv", "ablation", "tier", "promoted", "artifact"]
               if console.width >= MEDIUM_TABLE else ["slot", "name", "tier", "promoted", "artifact"])
    table = Table(title=f"{len(records)} registered components in {len(slots)} slots", show_lines=False,
                  box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD, pad_edge=wide)
    longest = max(len(record["name"]) for record in records)
    for column in columns:  # the name is never cut; on a very narrow terminal the others fold
        table.add_column(column, no_wrap=column == "name", overflow="fold",
                         min_width=longest if column == "name" else None)
    for record in records:
        paper = record["paper"] or {}
        cells = {
            "slot": record["slot"],
            "name": f"[bold]{record['name']}[/]",
            "arXiv": paper.get("arxiv_id", "—"),
            "paper": _short(paper.get("title", "—")),
            "ablation": record["ablation"] or "—",
            "status": record["implementation_status"],
            "tier": record["tier_reached"],
            "promoted": _yes_no(record["promoted"]),
            "artifact": _yes_no(record["has_artifact"]),
            "batched": "—" if record["batched_replicas"] is None else _yes_no(record["batched_replicas"]),
            "origin": record["origin"],
        }
        table.add_row(*(cells[column] for column in columns))
    console.print(table)


@components_app.command("check")
def check(
    plugin: Annotated[str | None, typer.Option(
        help="Only the components this plugin distribution registered (its name, as pip knows it).")] = None,
) -> None:
    """Run the contract suite (tests/contract, from the source tree) over every registered
    component, or over one plugin's; the exit status is pytest's."""
    from llmevo.contract import run_contract_suite

    code = run_contract_suite(plugin)
    if code:
        raise typer.Exit(code)
