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
    artifacts: Annotated[list[Path], typer.Argument(help="Reproduction or --experiment artifacts (JSON).")],
    json_: Annotated[bool, typer.Option("--json", help="One JSON record (schema llmevo.verdict/1) per line.")] = False,
    budget_seconds: Annotated[float | None, typer.Option(
        metavar="SECONDS", help="A declared cap: the record says how much of it the comparison left.")] = None,
    docs: Annotated[Path | None, typer.Option(
        help="The folder of the published family Holm reads (default docs).")] = None,
    no_family: Annotated[bool, typer.Option("--no-family", help="Skip the family reading (no Holm).")] = False,
) -> None:
    """The protocol's answer for each comparison artifact: class, change with its interval, p
    alone and within the published family (Holm), noise floor, budget spent and left."""
    from llmevo.experiments import VerdictService

    if no_family and docs is not None:  # silently ignored before
        raise ConfigError("--docs names the published family, and --no-family reads none; drop one of them")
    docs = Path("docs") if docs is None else docs

    service = VerdictService(None if no_family else docs)
    records = [service.verdict(path, budget_seconds) for path in artifacts]  # all checked before printing
    if json_:
        for record in records:
            print(record.to_json())
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Verdicts")
    capped = budget_seconds is not None  # the cap's column only when one is declared
    for column in ("comparison", "metric", "Δ% [95% CI]", "p", "class", "after Holm", "runs (cached)", "wall s",
                   *(("left of cap s",) if capped else ())):
        table.add_column(column)
    for record in records:
        interval = "" if record.ci_low is None else f" [{record.ci_low:+.2f}, {record.ci_high:+.2f}]"
        change = "—" if record.change_percent is None else f"{record.change_percent:+.2f}{interval}"
        family = "—" if record.family is None else f"{record.family.classification} (p {record.family.p_value:.3g}, m={record.family.size})"
        table.add_row(escape(f"{record.method} vs {record.baseline}"), record.metric, change,
                      "—" if record.p_value is None else f"{record.p_value:.3g}",
                      record.classification or f"none: {record.no_verdict_reason}", family,
                      f"{record.budget.runs} ({record.budget.runs_cached})",
                      "—" if record.budget.wall_seconds is None else f"{record.budget.wall_seconds:.0f}",
                      *(("—" if record.budget.left_seconds is None else f"{record.budget.left_seconds:.0f}",)
                        if capped else ()))
    console.print(table)
