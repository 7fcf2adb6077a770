"""``llmevo verdict ARTIFACT...``: each comparison's answer as a versioned record (``--json``) or a table.

The record and its family reading live in ``llmevo.experiments.verdict``; this module parses
the options and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmevo.cli.common import app, console
from llmevo.errors import ConfigError


@app.command()
def verdict(
    artifacts: Annotated[list[Path], typer.Argument(
        help="Reproduction or --experiment artifacts (JSON), or ladder files (ladder.json: one row per rung).")],
    json_: Annotated[bool, typer.Option("--json", help="One JSON record (schema llmevo.verdict/1) per line.")] = False,
    budget_seconds: Annotated[float | None, typer.Option(
        metavar="SECONDS", help="A declared cap: the record says how much of it the comparison left.")] = None,
    docs: Annotated[Path | None, typer.Option(
        help="The folder of the published family Holm reads (default docs).")] = None,
    no_family: Annotated[bool, typer.Option("--no-family", help="Skip the family reading (no Holm).")] = False,
) -> None:
    """The protocol's answer for each comparison artifact (or each rung of a ladder): class, change
    with its interval, p alone and within the published family (Holm), noise floor, budget spent
    and left, the regime it was measured in, and how often its class held at scale."""
    from llmevo.experiments import VerdictService

    if no_family and docs is not None:  # silently ignored before
        raise ConfigError("--docs names the published family, and --no-family reads none; drop one of them")
    docs = Path("docs") if docs is None else docs

    service = VerdictService(None if no_family else docs)
    records = [record for path in artifacts for record in service.records(path, budget_seconds)]  # all checked first
    if json_:
        for record in records:
            print(record.to_json())
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Verdicts")
    capped = budget_seconds is not None  # the cap's column only when one is declared
    sized = any(record.size is not None for record in records)  # a ladder's rungs: labelled by their size
    for column in (*(("size",) if sized else ()), "comparison", "metric", "Δ% [95% CI]", "p", "class", "after Holm",
                   "held at scale", "measured at", "runs (cached)", "wall s", *(("left of cap s",) if capped else ())):
        table.add_column(column)
    for record in records:
        interval = "" if record.ci_low is None else f" [{record.ci_low:+.2f}, {record.ci_high:+.2f}]"
        change = "—" if record.change_percent is None else f"{record.change_percent:+.2f}{interval}"
        family = "—" if record.family is None else f"{record.family.classification} (p {record.family.p_value:.3g}, m={record.family.size})"
        transfer = record.transfer
        held = "—" if transfer is None else f"{transfer.held}/{transfer.of}" + (
            "" if transfer.decision else " (not a decision)")
        regime = "—" if record.regime is None else record.regime.short()
        table.add_row(*((escape(record.size or "—"),) if sized else ()),
                      escape(f"{record.method} vs {record.baseline}"), record.metric, change,
                      "—" if record.p_value is None else f"{record.p_value:.3g}",
                      record.classification or f"none: {record.no_verdict_reason}", family, held, escape(regime),
                      f"{record.budget.runs} ({record.budget.runs_cached})",
                      "—" if record.budget.wall_seconds is None else f"{record.budget.wall_seconds:.0f}",
                      *(("—" if record.budget.left_seconds is None else f"{record.budget.left_seconds:.0f}",)
                        if capped else ()))
    console.print(table)
    for record in records:  # each verdict's calibration, in words
        label = f"{record.method} vs {record.baseline}" + (f" at {record.size}" if record.size else "")
        console.print(escape(f"{label}: {record.calibration}"))
