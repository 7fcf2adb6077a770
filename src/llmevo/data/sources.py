"""Where the public data sets live, and their pinned sha256 sums.

Files are found under a data directory that the caller passes in (the CLI reads
``--data-dir`` or ``$LLMEVO_DATA``). Every file is checked against the sha256 sum recorded
in its ``SOURCE.md`` before use; a missing or altered file is a ``DataError`` naming the
file and what was expected.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from llmevo.errors import DataError

PINNED_SHA256: dict[str, str] = {
    "wikitext-2/wiki.train.tokens": "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
    "wikitext-2/wiki.valid.tokens": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "wikitext-2/wiki.test.tokens": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
    "wikitext-2-raw/wiki.train.raw": "6707892fa3788b5ab9ed78ab5ff37d9fe825f6011a2ad4fcd6a6d467f0e7da57",
    "wikitext-2-raw/wiki.valid.raw": "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7",
    "wikitext-2-raw/wiki.test.raw": "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08",
    "tinyshakespeare/input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@lru_cache(maxsize=64)
def _file_sha256(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file (memoised per path, size and modification time within a process)."""
    stat = path.stat()
    return _file_sha256(path.resolve(), stat.st_size, stat.st_mtime_ns)


def verified_path(data_dir: Path, relative: str, pins: dict[str, str] | None = None) -> Path:
    """The path of ``relative`` under ``data_dir`` after checking its pinned sha256."""
    pins = PINNED_SHA256 if pins is None else pins
    if relative not in pins:
        raise DataError(f"{relative}: no pinned sha256 for this file; add it to the pins first")
    path = data_dir / relative
    if not path.is_file():
        raise DataError(
            f"{path}: file not found; expected the public data set file {relative} "
            f"(sha256 {pins[relative][:16]}…) under the data directory {data_dir}"
        )
    actual = file_sha256(path)
    if actual != pins[relative]:
        raise DataError(
            f"{path}: sha256 {actual[:16]}… does not match the pinned {pins[relative][:16]}…; "
            "the file is altered or a different release — restore the original"
        )
    return path


def read_text(path: Path) -> str:
    """Read a data file as strict UTF-8; invalid bytes are an error naming the offset."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{path}: invalid UTF-8 at byte offset {error.start} ({error.reason})"
        ) from None
