"""``llmevo show`` and ``llmevo compare``: read artifacts and print them."""

from __future__ import annotations

from pathlib import Path

import typer

from llmevo.cli.common import app, console


@app.command()
def show(
    file: Path = typer.Argument(..., help="An artifact JSON file (reproduction or diagnostic)."),
) -> None:
    """Validate an artifact and print its header, metrics, verdict and provenance."""
    from llmevo.artifacts.schema import load_artifact
    from llmevo.reports.terminal import artifact_view

    for renderable in artifact_view(load_artifact(file)):
        console.print(renderable)


@app.command()
def compare(
    a: Path = typer.Argument(..., help="Artifact A (the reference side)."),
    b: Path = typer.Argument(..., help="Artifact B (changes are B relative to A)."),
) -> None:
    """Print two artifacts of the same kind side by side with B's relative change."""
    from llmevo.artifacts.schema import load_artifact
    from llmevo.reports.terminal import comparison_view

    for renderable in comparison_view(
        load_artifact(a), load_artifact(b), labels=(str(a), str(b))
    ):
        console.print(renderable)
