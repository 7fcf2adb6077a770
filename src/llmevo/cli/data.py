"""``llmevo data fetch`` / ``llmevo data check``: the data sets, from their public sources."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Annotated

import typer

from llmevo.artifacts.io import check_output_dir
from llmevo.cli.common import DATA_ENV, DATA_URL_ENV, app, console
from llmevo.data import store
from llmevo.data.fetch import (
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT,
    check_base_url,
    check_data,
    check_timeout,
    fetch_data,
)
from llmevo.errors import DataError

data_app = typer.Typer(help="Download and verify the data sets the presets use.", no_args_is_help=True)
app.add_typer(data_app, name="data")


def _given_dir() -> Path | None:
    return Path(os.environ[DATA_ENV]) if os.environ.get(DATA_ENV) else None


@data_app.command("fetch")
def fetch(
    to: Annotated[Path | None, typer.Option("--to", help="Directory to fill (else $LLMEVO_DATA, else the default data folder).")] = None,
    base_url: Annotated[str | None, typer.Option(help=f"Mirror of the raw-file host, http(s) (else ${DATA_URL_ENV}, else GitHub).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds a server may send nothing before the download counts as stalled.")] = DEFAULT_TIMEOUT,
) -> None:
    """Place every data file: the sets embedded in the package are unpacked, the others
    downloaded at their pinned revisions; each is checked against its sha256 and placed atomically."""
    dest = to if to is not None else _given_dir()
    url = base_url if base_url is not None else os.environ.get(DATA_URL_ENV) or DEFAULT_BASE_URL
    check_base_url(url)
    managed = dest is None  # the default data folder: the sets it unpacks stay there whatever follows
    if managed:
        dest = store.prepare_managed(store.default_data_dir(), url)
    check_output_dir(dest, "--to")
    check_timeout(timeout)  # before anything is written
    created, unpacked = not dest.exists(), []
    try:
        for target in store.unpack_embedded(dest):
            unpacked.append(Path(target))
            console.print(f"unpacked {target}", highlight=False)
        _fetch_into(dest, url, timeout)
    except BaseException:  # a failed fetch into a folder given leaves nothing: not even the sets it unpacked
        if managed:
            raise
        if created:
            shutil.rmtree(dest, ignore_errors=True)
        for path in unpacked:
            path = path if path.is_absolute() else dest / path
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # its folder, when this left it empty
                path.parent.rmdir()
        raise


def _fetch_into(dest: Path, url: str, timeout: float) -> None:
    """``fetch_data`` into ``dest`` with a progress bar per file."""

    def report(remote, downloaded: bool) -> None:
        console.print(f"{'fetched' if downloaded else 'present'}  {remote.target}", highlight=False)

    with store.download_bar(console) as bar:
        tasks: dict[str, object] = {}

        def progress(remote, index: int, count: int, held: int, size: int | None) -> None:
            if remote.target not in tasks:
                tasks[remote.target] = bar.add_task(remote.target, total=None)
            piece = f" (piece {index + 1}/{count})" if count > 1 else ""
            bar.update(tasks[remote.target], description=f"{remote.target}{piece}",
                       completed=held, total=size)

        statuses = fetch_data(dest, url, timeout=timeout, on_file=report, progress=progress)
    console.print(f"{len(statuses)} files checked against their pinned sha256 in {dest}", highlight=False)


@data_app.command("check")
def check(
    directory: Annotated[Path | None, typer.Argument(help="Data directory to verify (default: $LLMEVO_DATA, else the default data folder).")] = None,
) -> None:
    """Verify every data file against its pinned sha256; name any missing or altered file."""
    directory = directory or _given_dir() or store.default_data_dir()
    statuses = check_data(directory)
    bad = [s for s in statuses if s.state != "ok"]
    if bad:
        listed = "; ".join(f"{s.state}: {s.target}" + (f" ({s.detail})" if s.detail else "") for s in bad)
        raise DataError(
            f"{directory}: {len(bad)} of {len(statuses)} data files are not as pinned — {listed}; "
            f"run: llmevo data fetch --to {directory}"
        )
    console.print(f"{directory}: all {len(statuses)} files match their pinned sha256", highlight=False)
