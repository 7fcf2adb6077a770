"""``llmevo data fetch`` / ``llmevo data check``: the data sets, from their public sources."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from llmevo.artifacts.io import check_output_dir
from llmevo.cli.common import DATA_ENV, app, console
from llmevo.data.fetch import DEFAULT_BASE_URL, DEFAULT_TIMEOUT, check_data, fetch_data
from llmevo.errors import DataError

DATA_URL_ENV = "LLMEVO_DATA_URL"

data_app = typer.Typer(help="Download and verify the data sets the presets use.", no_args_is_help=True)
app.add_typer(data_app, name="data")


def _default_dir() -> Path:
    return Path(os.environ.get(DATA_ENV) or "../shared/data")


@data_app.command("fetch")
def fetch(
    to: Annotated[Path | None, typer.Option("--to", help="Directory to fill (else $LLMEVO_DATA, else ../shared/data).")] = None,
    base_url: Annotated[str | None, typer.Option(help=f"Mirror of the raw-file host, http(s) (else ${DATA_URL_ENV}, else GitHub).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds a server may send nothing before the download counts as stalled.")] = DEFAULT_TIMEOUT,
) -> None:
    """Download every data file at its pinned revision, check its sha256, place it atomically."""
    dest = to if to is not None else _default_dir()
    url = base_url if base_url is not None else os.environ.get(DATA_URL_ENV) or DEFAULT_BASE_URL
    check_output_dir(dest, "--to")

    def report(remote, downloaded: bool) -> None:
        console.print(f"{'fetched' if downloaded else 'present'}  {remote.target}", highlight=False)

    statuses = fetch_data(dest, url, timeout=timeout, on_file=report)
    console.print(f"{len(statuses)} files checked against their pinned sha256 in {dest}", highlight=False)


@data_app.command("check")
def check(
    directory: Annotated[Path, typer.Argument(help="Data directory to verify.")],
) -> None:
    """Verify every data file against its pinned sha256; name any missing or altered file."""
    statuses = check_data(directory)
    bad = [s for s in statuses if s.state != "ok"]
    if bad:
        listed = "; ".join(f"{s.state}: {s.target}" + (f" ({s.detail})" if s.detail else "") for s in bad)
        raise DataError(
            f"{directory}: {len(bad)} of {len(statuses)} data files are not as pinned — {listed}; "
            f"run: llmevo data fetch --to {directory}"
        )
    console.print(f"{directory}: all {len(statuses)} files match their pinned sha256", highlight=False)
