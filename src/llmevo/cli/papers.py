"""``llmevo papers search|add|decide|status|render``: the paper ledger and arXiv intake.

The logic is ``llmevo.papers``; this module parses options and prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from llmevo.cli.common import app, console

papers_app = typer.Typer(help="Find papers on arXiv and keep the ledger of decisions on them.",
                         no_args_is_help=True)
app.add_typer(papers_app, name="papers")

DEFAULT_LEDGER = Path("docs/papers.json")
LedgerOption = Annotated[Path, typer.Option(
    help="The ledger (JSON, the source of truth); its table is written beside it as .md.")]
ApiUrlOption = Annotated[str, typer.Option(help="The arXiv API query endpoint (a mirror, a test server).")]
DelayOption = Annotated[float, typer.Option(
    help="Seconds between API requests (arXiv's terms of use ask for 3).")]
RetriesOption = Annotated[int, typer.Option(help="Retries of a failing API request.")]
TimeoutOption = Annotated[float, typer.Option(
    metavar="SECONDS", help="Give up on an API request that has not answered after this long.")]
WhyOption = Annotated[str, typer.Option(help="One line: why this decision (required).")]
TrackOption = Annotated[str, typer.Option(
    help="The ledger's topic group: attention, position, feedforward, norm, block, optimizer, "
         "schedule, objective, moe, post-training, architecture, ...")]


def _settings(api_url: str, delay: float, retries: int, timeout: float, page_size: int = 100):
    from llmevo.papers.intake import settings

    return settings(api_url=api_url, page_size=page_size, delay_seconds=delay, num_retries=retries,
                    timeout_seconds=timeout)


@papers_app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="Words (each searched in all fields) or arXiv query syntax (ti:, abs:, au:).")],
    category: Annotated[str | None, typer.Option(help="Comma-separated arXiv categories, e.g. cs.CL,cs.LG.")] = None,
    since: Annotated[str | None, typer.Option(help="Submitted on or after this date, YYYY-MM-DD.")] = None,
    max_results: Annotated[int, typer.Option("--max", help="At most this many papers.")] = 20,
    ledger: LedgerOption = DEFAULT_LEDGER,
    as_json: Annotated[bool, typer.Option("--json", help="Print the records as JSON.")] = False,
    api_url: ApiUrlOption = "https://export.arxiv.org/api/query",
    page_size: Annotated[int, typer.Option(help="Results per API request (at most 2000).")] = 100,
    delay: DelayOption = 3.0,
    retries: RetriesOption = 3,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Search arXiv; each result shows the ledger's decision on it, if any."""
    from rich.table import Table

    from llmevo.papers.intake import parse_categories, parse_since
    from llmevo.papers.intake import search as search_arxiv
    from llmevo.papers.ledger import describe_decision, load_ledger

    categories = parse_categories(category) if category is not None else []
    start = parse_since(since) if since is not None else None
    config = _settings(api_url, delay, retries, timeout, page_size)
    known = load_ledger(ledger)
    records = search_arxiv(query, categories=categories, since=start, max_results=max_results,
                           config=config)
    if as_json:
        typer.echo(json.dumps([record.model_dump(mode="json") for record in records], indent=2))
        return
    table = Table(title=f"{len(records)} papers for {query!r}")
    for column in ("arXiv", "date", "categories", "title", "ledger"):
        table.add_column(column, no_wrap=column != "title")
    for record in records:
        entry = known.get(record.arxiv_id)
        table.add_row(record.arxiv_id, str(record.published), ",".join(record.categories[:3]),
                      record.title, describe_decision(entry.decision) if entry else "—")
    console.print(table)


@papers_app.command("add")
def add(
    arxiv_id: Annotated[str, typer.Argument(help="The paper's arXiv id (2104.09864, arXiv:2104.09864v5 or its abs URL).")],
    why: WhyOption,
    decision: Annotated[str | None, typer.Option(
        help="queued (default for a new entry) | implemented:COMPONENT[,COMPONENT] | rejected:REASON; "
             "with --update, the entry's decision unless given.")] = None,
    track: TrackOption = "general",
    update: Annotated[bool, typer.Option(help="Replace an existing entry (its metadata fetched again).")] = False,
    ledger: LedgerOption = DEFAULT_LEDGER,
    api_url: ApiUrlOption = "https://export.arxiv.org/api/query",
    delay: DelayOption = 3.0,
    retries: RetriesOption = 3,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Fetch a paper's metadata from arXiv and add it to the ledger with a decision."""
    from llmevo.papers.intake import add_paper

    entry = add_paper(ledger, arxiv_id, decision=decision, why=why, track=track, update=update,
                      config=_settings(api_url, delay, retries, timeout))
    console.print(f"{'updated' if update else 'added'} {entry.arxiv_id} ({entry.title}): "
                  f"{entry.decision.status} — {ledger}", highlight=False, markup=False)


@papers_app.command("decide")
def decide(
    arxiv_id: Annotated[str, typer.Argument(help="An arXiv id already in the ledger.")],
    decision: Annotated[str, typer.Option(help="queued | implemented:COMPONENT[,COMPONENT] | rejected:REASON.")],
    why: WhyOption,
    ledger: LedgerOption = DEFAULT_LEDGER,
) -> None:
    """Change the decision on a paper of the ledger (no network)."""
    from llmevo.papers.ledger import decide_paper

    entry = decide_paper(ledger, arxiv_id, decision=decision, why=why)
    console.print(f"{entry.arxiv_id}: {entry.decision.status} — {ledger}", highlight=False, markup=False)


@papers_app.command("render")
def render(ledger: LedgerOption = DEFAULT_LEDGER) -> None:
    """Validate the ledger and write its table again (after editing the JSON by hand)."""
    from llmevo.papers.ledger import load_ledger, markdown_path, save_ledger

    if not ledger.is_file():
        from llmevo.errors import ConfigError

        raise ConfigError(f"--ledger {ledger}: no such file")
    loaded = load_ledger(ledger)
    save_ledger(loaded, ledger)
    console.print(f"{len(loaded.papers)} papers: {markdown_path(ledger)}", highlight=False, markup=False)


@papers_app.command("status")
def status(
    ledger: LedgerOption = DEFAULT_LEDGER,
    as_json: Annotated[bool, typer.Option("--json", help="Print the diff as JSON.")] = False,
) -> None:
    """The ledger against the registry: implemented and registered, implemented but missing,
    queued, rejected, registered without an entry, registered but not decided implemented."""
    from llmevo.catalog import full_registry
    from llmevo.papers.ledger import describe_decision, load_ledger
    from llmevo.papers.status import ledger_status, registered

    diff = ledger_status(load_ledger(ledger), registered(full_registry().all()))
    if as_json:
        typer.echo(json.dumps({
            "implemented": {e.arxiv_id: [f"{c.slot}/{c.name}" for c in cs] for e, cs in diff.implemented},
            "missing": {e.arxiv_id: names for e, names in diff.missing},
            "queued": [e.arxiv_id for e in diff.queued],
            "rejected": [e.arxiv_id for e in diff.rejected],
            "unledgered": [f"{c.slot}/{c.name}" for c in diff.unledgered],
            "undecided": {f"{c.slot}/{c.name}": describe_decision(e.decision) for c, e in diff.undecided},
            "without_paper": [f"{c.slot}/{c.name}" for c in diff.without_paper],
            "consistent": diff.consistent,
        }, indent=2))
        return
    def say(text: str, **options) -> None:
        console.print(text, soft_wrap=True, **options)

    say(f"[bold]implemented and registered[/] ({len(diff.implemented)})")
    for entry, components in diff.implemented:
        names = ", ".join(f"{c.name}" + (f" [{c.origin}]" if c.origin != "builtin" else "") for c in components)
        say(f"  {entry.arxiv_id}  {names}  — {entry.title}", highlight=False, markup=False)
    say(f"[bold]implemented but missing from the registry[/] ({len(diff.missing)})")
    for entry, names in diff.missing:
        say(f"  {entry.arxiv_id}  {', '.join(names)}  — {entry.title}", highlight=False, markup=False)
    say(f"[bold]queued[/] ({len(diff.queued)})")
    for entry in diff.queued:
        say(f"  {entry.arxiv_id}  [{entry.track}] {entry.title} — {entry.why}", highlight=False, markup=False)
    say(f"[bold]rejected[/] ({len(diff.rejected)})")
    for entry in diff.rejected:
        reason = entry.decision.reason  # type: ignore[union-attr]
        say(f"  {entry.arxiv_id}  {entry.title} — {reason}", highlight=False, markup=False)
    say(f"[bold]registered without a ledger entry[/] ({len(diff.unledgered)})")
    for component in diff.unledgered:
        say(f"  {component.slot}/{component.name}  paper {component.arxiv_id}", highlight=False, markup=False)
    say(f"[bold]registered but not decided implemented[/] ({len(diff.undecided)})")
    for component, entry in diff.undecided:
        say(f"  {component.slot}/{component.name}  {entry.arxiv_id} is "
            f"{describe_decision(entry.decision)}", highlight=False, markup=False)
    say(f"({len(diff.without_paper)} registered components cite no paper: "
        f"{', '.join(c.name for c in diff.without_paper) or 'none'})", highlight=False, markup=False)
