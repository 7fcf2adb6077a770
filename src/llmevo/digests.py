"""The one sha256-of-a-file helper (data pins, provenance and checkpoints all use it)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

_CHUNK = 1 << 20

# A file's digest is kept per (path, size, mtime, inode) so that reading the same unchanged
# file again costs one stat: the publish-time code check reads every .py file of the package
# (about 450) once at a run's start and once at each write, and the arm cache's code closure
# reads most of them again. The table held 256 entries (an LRU) before, which a 450-file
# sweep evicts completely, so the second sweep hashed every file again (docs/LOG.md,
# 2026-12-06). Entries are few and small (a path and 64 characters each).
MEMO_LIMIT = 8192
# A file modified less than this long before it was hashed is not memoised: a second write
# within the file system's timestamp granularity could keep size and mtime (git's "racy"
# case), so such a file is read again every time until it has aged.
RACY_SECONDS = 2.0

_memo: dict[tuple[Path, int, int, int], str] = {}


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of a file's bytes, memoised per path, size, modification time and inode
    (a file younger than ``RACY_SECONDS`` is read every time)."""
    path = Path(path).resolve()
    stat = path.stat()
    key = (path, stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key in _memo:
        return _memo[key]
    value = _sha256_of(path)
    if time.time_ns() - stat.st_mtime_ns >= RACY_SECONDS * 1e9:
        if len(_memo) >= MEMO_LIMIT:
            _memo.clear()
        _memo[key] = value
    return value
