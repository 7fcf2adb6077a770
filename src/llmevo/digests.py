"""The one sha256-of-a-file helper (data pins, provenance and checkpoints all use it)."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

_CHUNK = 1 << 20


@lru_cache(maxsize=256)
def _sha256_of(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of a file's bytes (memoised per path, size and modification time)."""
    path = Path(path).resolve()
    stat = path.stat()
    return _sha256_of(path, stat.st_size, stat.st_mtime_ns)
