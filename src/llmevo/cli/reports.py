"""``llmevo report`` and ``llmevo leaderboard``: Markdown reports and plots from artifacts."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from llmevo.artifacts.io import check_output_dir
from llmevo.cli.common import DATA_ENV, app, console
from llmevo.errors import ConfigError


@app.command()
def report(
    artifact: Path = typer.Argument(..., help="A reproduction or diagnostic artifact, or a ladder file (JSON)."),
    out: Path | None = typer.Option(
        None,
        "--out",
        metavar="DIR",
        help="Folder for README.md and plots/ (default: runs/reproductions/<arxiv>-<name>/, "
             "or runs/foundation-models/...; with --publish the same under docs/).",
    ),
    publish: bool = typer.Option(
        False, help="Write the report where the published one is (under docs/, not runs/)."),
    refit: bool = typer.Option(
        False, help="A ladder file: recompute its across-rung statistics from its stored per-seed values "
                    "under the current rule (rung-level trend, leave-one-rung-out, degenerate rungs) and "
                    "write them back into it; nothing retrains."),
    include_degenerate: bool = typer.Option(
        False, help="With --refit: keep a one-head rung in the fits of a position or attention ladder."),
) -> None:
    """Write a README.md with tables, verdict, plots and provenance for one artifact
    (under runs/ unless --publish); a ladder file's README and plots go beside it (or --out)."""
    from llmevo.artifacts.ladder import is_ladder, load_ladder
    from llmevo.artifacts.schema import load_artifact
    from llmevo.reports.ladder import write_ladder_report
    from llmevo.reports.readme import default_report_dir, write_report

    if publish and out is not None:
        raise ConfigError("--publish chooses the report folder under docs/; with --out it "
                          "cannot apply (give one of them)")
    check_output_dir(out)
    if (refit or include_degenerate) and not is_ladder(artifact):
        raise ConfigError("--refit and --include-degenerate apply to a ladder file only")
    if include_degenerate and not refit:
        raise ConfigError("--include-degenerate applies with --refit only")
    if is_ladder(artifact):
        ladder = load_ladder(artifact)
        if refit:
            import shlex
            import sys

            from llmevo.artifacts.io import write_json_atomic
            from llmevo.experiments import refit_ladder

            ladder = refit_ladder(ladder, artifact.parent, include_degenerate,
                                  command=" ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]]))
            write_json_atomic(artifact, ladder.to_json_dict())
            console.print(f"refit {artifact}: trend {ladder.trend}, class {ladder.ladder_class}")
        written = write_ladder_report(ladder, out or artifact.parent)
        console.print(f"wrote {written[-1]}")
        return
    typed = load_artifact(artifact)  # validated: refuses what `llmevo show` refuses
    published = default_report_dir(typed)  # docs/<kind>/<arxiv>-<name>[/vs-<other>]
    out_dir = out or (published if publish else Path("runs") / published.relative_to("docs"))
    check_output_dir(out_dir)
    readme = write_report(typed, artifact, out_dir)
    console.print(f"wrote {readme}")


def default_reference_dir() -> Path | None:
    """``$LLMEVO_REFERENCE_ARTIFACTS``, else ``<data dir>/../reference-artifacts``, if present."""
    if os.environ.get("LLMEVO_REFERENCE_ARTIFACTS"):
        return Path(os.environ["LLMEVO_REFERENCE_ARTIFACTS"])
    data = Path(os.environ.get(DATA_ENV, "../shared/data"))
    candidate = data.parent / "reference-artifacts"
    return candidate if candidate.is_dir() else None


@app.command()
def leaderboard(
    root: list[Path] = typer.Option(
        [Path("docs")], "--root", help="Folder searched for artifacts (*.json); repeatable."
    ),
    reference: Path | None = typer.Option(
        None, "--reference",
        help="Also include the artifacts in this folder (default: $LLMEVO_REFERENCE_ARTIFACTS, "
             "else the reference-artifacts folder beside the data directory, when it exists).",
    ),
    out: Path = typer.Option(
        Path("docs/LEADERBOARD.md"), "--out", metavar="FILE", help="Markdown output; the JSON goes beside it."
    ),
    replace: bool = typer.Option(
        False, help="Rewrite the leaderboard even without rows the existing one lists (their "
                    "artifacts deleted or not scanned here), or over a file that is not one."),
    readme: Path | None = typer.Option(
        None, "--readme", metavar="FILE",
        help="Regenerate the generated tables between their markers in this file only (default: "
             "README.md and docs/results/index.md here, those that have the markers)."),
) -> None:
    """Collect the artifacts (the *.json in each root's metrics/ folders, every *.json in the
    reference folder) into docs/LEADERBOARD.md (+ .json) and print the table."""
    from rich.table import Table

    from llmevo.reports.leaderboard import regenerate

    if reference is None:
        reference = default_reference_dir()
    outcome = regenerate(Path.cwd(), roots=root, references=[reference] if reference is not None else [],
                         out=out, readme=readme, replace=replace)
    rows, skipped = outcome.rows, outcome.skipped
    for page in outcome.pages:
        console.print(f"wrote the generated tables in {page}")
    table = Table(title=f"Leaderboard ({len(rows)} artifacts; {len(skipped)} other JSON outside "
                        "metrics/ folders, not artifacts)")
    for column in ("kind", "name", "arXiv", "seeds", "formal", "metric Δ%"):
        table.add_column(column, no_wrap=True)
    table.add_column("claim / status", overflow="fold", ratio=1)
    for row in rows:
        change = row["change_percent"]
        interval = (
            f" [{row['ci_low']:+.2f}, {row['ci_high']:+.2f}]" if row["ci_low"] is not None else ""
        )
        table.add_row(
            row["kind"],
            row["name"],
            row["arxiv"] or "—",
            str(row["seeds"]),
            "yes" if row["formal"] else "no",
            "—" if change is None else f"{change:+.2f}{interval}",
            row["claim"] if row["kind"] == "reproduction" else f"{row['status']}",
        )
    console.print(table)
    console.print(f"wrote {out} and {out.with_suffix('.json')}")
