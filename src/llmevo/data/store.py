"""The default data folder, and how it fills itself on first use.

A folder given with ``--data-dir`` or ``$LLMEVO_DATA`` is read as it is. Without one, llmevo
reads ``<user cache folder>/llmevo/data`` (``platformdirs``: ``~/.cache/llmevo/data`` on Linux),
a *managed* folder: it holds a marker file (``MARKER``, recording the mirror its files come
from), and a pinned file missing there is provided when a reader first asks for it
(``pins.read_checked`` and ``pins.verified_path`` call ``provide``):

* the files the main job reads (``EMBEDDED_FILES``: tokenized WikiText-2, Tiny Shakespeare,
  the Alpaca subset) are unpacked from the xz copies inside the package (``embedded/``, each
  set with its ``SOURCE.md``: licence, source and sha256), with no network;
* every other pinned file is downloaded from its public source (``fetch.fetch_file``), with a
  progress bar on stderr.

Either way the bytes must match the pin before they are written, atomically, under a lock (two
processes asking at once do the work once). A download that fails leaves no target file and
is a one-line ``DataError`` that says what to do instead.
"""

from __future__ import annotations

import json
import lzma
from collections.abc import Iterator
from contextlib import contextmanager
from hashlib import sha256
from importlib import resources
from pathlib import Path

import platformdirs
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from llmevo.artifacts.io import make_folder, one_builder, write_bytes_atomic, write_text_atomic
from llmevo.data.fetch import (
    ALL_PINS,
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT,
    check_base_url,
    fetch_file,
    select,
)
from llmevo.errors import DataError

MARKER = ".llmevo-data.json"
EMBEDDED_FILES: tuple[str, ...] = (
    "wikitext-2/wiki.train.tokens",
    "wikitext-2/wiki.valid.tokens",
    "wikitext-2/wiki.test.tokens",
    "tinyshakespeare/input.txt",
    "alpaca/alpaca_5000.json",
)


def default_data_dir() -> Path:
    """``<user cache folder>/llmevo/data``: the data folder when none is given."""
    return platformdirs.user_cache_path("llmevo", appauthor=False) / "data"


def prepare_managed(folder: Path, base_url: str = DEFAULT_BASE_URL) -> Path:
    """``folder`` (created if missing) as a managed data folder whose missing files are
    fetched from ``base_url``; the URL is checked before anything is written."""
    check_base_url(base_url)
    make_folder(folder)
    marker = folder / MARKER
    text = json.dumps({"base_url": base_url}) + "\n"
    if not marker.is_file() or marker.read_text(encoding="utf-8") != text:
        write_text_atomic(marker, text)
    return folder.resolve()


def managed_root(path: Path) -> Path | None:
    """The managed data folder that ``path`` lies in, or None."""
    for parent in Path(path).absolute().parents:
        if (parent / MARKER).is_file():
            return parent
    return None


def embedded_bytes(relative: str) -> bytes:
    """The embedded copy of ``relative``, unpacked and checked against its pin."""
    if relative not in EMBEDDED_FILES:
        raise DataError(f"{relative}: not embedded in the package; embedded: {', '.join(EMBEDDED_FILES)}")
    resource = resources.files("llmevo.data").joinpath("embedded", *f"{relative}.xz".split("/"))
    try:
        data = lzma.decompress(resource.read_bytes())
    except (OSError, lzma.LZMAError) as error:
        raise DataError(f"the package's copy of {relative} cannot be read ({error}); "
                        "reinstall llmevo") from None
    if sha256(data).hexdigest() != ALL_PINS[relative]:
        raise DataError(f"the package's copy of {relative} does not match its pinned sha256; "
                        "reinstall llmevo")
    return data


def unpack_embedded(folder: Path) -> list[str]:
    """Write every embedded file missing under ``folder``; the files written."""
    written = []
    for relative in EMBEDDED_FILES:
        target = folder / relative
        with one_builder(target):
            if not target.is_file():
                write_bytes_atomic(target, embedded_bytes(relative))
                written.append(relative)
    return written


def download_bar(console: Console) -> Progress:
    """Download progress bars on ``console`` (drawn on a terminal only), gone when done."""
    return Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), console=console, transient=True)


@contextmanager
def _progress_bar(relative: str) -> Iterator:
    """A bar on stderr for one file's download, then one line saying it arrived."""
    console = Console(stderr=True)
    with download_bar(console) as bar:
        task = bar.add_task(f"fetching {relative}", total=None)

        def update(index: int, count: int, held: int, size: int | None) -> None:
            piece = f" (piece {index + 1}/{count})" if count > 1 else ""
            bar.update(task, description=f"fetching {relative}{piece}", completed=held, total=size)

        yield update
    console.print(f"llmevo: fetched {relative}", highlight=False)


def provide(path: Path, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Place the pinned file ``path`` if it is missing from a managed data folder: unpacked
    from the package, else downloaded. False where ``path`` is not such a file."""
    root = managed_root(path)
    if root is None:
        return False
    relative = Path(path).absolute().relative_to(root).as_posix()
    if relative not in ALL_PINS:
        return False
    target = root / relative
    try:
        with one_builder(target):  # a process that placed it while this one waited: done
            if not target.is_file():
                _place(root, relative, timeout)
    except BaseException:
        for folder in target.parents:  # the set's folder, if this left it empty
            if folder == root or not _remove_if_empty(folder):
                break
        raise
    return True


def _remove_if_empty(folder: Path) -> bool:
    """Remove ``folder`` if it is empty; whether it was."""
    try:
        folder.rmdir()
    except OSError:
        return False
    return True


def _place(root: Path, relative: str, timeout: float) -> None:
    """Unpack or download ``relative`` into ``root`` (the caller holds its lock)."""
    if relative in EMBEDDED_FILES:
        write_bytes_atomic(root / relative, embedded_bytes(relative))
        return
    try:
        base_url = json.loads((root / MARKER).read_text(encoding="utf-8"))["base_url"]
    except (OSError, ValueError, KeyError, TypeError):
        base_url = DEFAULT_BASE_URL
    try:
        with _progress_bar(relative) as update:
            fetch_file(select([relative])[0], root, base_url, timeout, update)
    except DataError as error:
        raise DataError(
            f"{relative} is not in the package and could not be downloaded into {root} "
            f"({error}); connect to the network and run again, or run `llmevo data fetch "
            "--to DIR` where there is one and pass --data-dir DIR (or set LLMEVO_DATA), or "
            "set LLMEVO_DATA_URL to a mirror"
        ) from None
