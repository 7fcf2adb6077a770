"""``llmevo new component NAME --slot SLOT --paper ARXIV_ID``: start a component from the ledger.

The logic is ``llmevo.papers.scaffold``; this module parses options and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmevo.cli.common import app, console

new_app = typer.Typer(help="Start new code from the paper ledger.", no_args_is_help=True)
app.add_typer(new_app, name="new")


@new_app.command("component")
def component(
    name: Annotated[str, typer.Argument(help="The component's registered name (a lowercase identifier).")],
    slot: Annotated[str, typer.Option(help="position, attention, feedforward, norm, block or optimizer.")],
    paper: Annotated[str, typer.Option(help="The paper's arXiv id; it must be in the ledger (llmevo papers add).")],
    ledger: Annotated[Path, typer.Option(help="The paper ledger.")] = Path("docs/papers.json"),
    root: Annotated[Path, typer.Option(help="The source tree to write into (holds src/llmevo and tests).")] = Path("."),
) -> None:
    """Write a component module (manifest from the ledger), a failing reference test and its line in the components table."""
    from llmevo.catalog import full_registry
    from llmevo.papers.ledger import load_ledger
    from llmevo.papers.scaffold import plan_component, write_plan

    registered = {spec.name for spec in full_registry().all()}
    plan = plan_component(root, name, slot, paper, load_ledger(ledger), registered)
    for path in write_plan(plan):
        console.print(f"{'wrote' if path in plan.created else 'updated'} {path}", highlight=False, markup=False)
    console.print(f"next: write the reference test and the component, then run "
                  f"pytest tests/reference/test_{name}_reference.py tests/contract -k {name}",
                  highlight=False, markup=False)
