"""``digests.sha256_file``: hashlib's answer, read again only when a file may have changed."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from llmevo import digests
from llmevo.digests import sha256_file

HOUR_AGO_NS = time.time_ns() - 3600 * 10**9


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files ``sha256_file`` actually read, in order (the memo starts empty)."""
    monkeypatch.setattr(digests, "_memo", {})
    seen: list[Path] = []
    real = digests._sha256_of

    def counting(path: Path) -> str:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(digests, "_sha256_of", counting)
    return seen


def aged(path: Path, payload: bytes) -> Path:
    path.write_bytes(payload)
    os.utime(path, ns=(HOUR_AGO_NS, HOUR_AGO_NS))
    return path


def test_an_aged_file_is_read_once(tmp_path: Path, reads: list[Path]) -> None:
    path = aged(tmp_path / "a.py", b"x = 1\n")
    assert sha256_file(path) == sha256_file(path) == hashlib.sha256(b"x = 1\n").hexdigest()
    assert len(reads) == 1


def test_a_changed_file_is_read_again(tmp_path: Path, reads: list[Path]) -> None:
    path = aged(tmp_path / "a.py", b"x = 1\n")
    sha256_file(path)
    aged(path, b"x = 22\n")  # another size
    assert sha256_file(path) == hashlib.sha256(b"x = 22\n").hexdigest()
    path.write_bytes(b"x = 33\n")  # the same size, a new modification time
    assert sha256_file(path) == hashlib.sha256(b"x = 33\n").hexdigest()
    replaced = tmp_path / "b.py"  # the same size and time, another inode (an atomic replace)
    aged(replaced, b"x = 44\n")
    os.replace(replaced, path)
    assert sha256_file(path) == hashlib.sha256(b"x = 44\n").hexdigest()
    assert len(reads) == 4


def test_a_fresh_file_is_read_every_time(tmp_path: Path, reads: list[Path]) -> None:
    """Written within RACY_SECONDS: a second write in the same timestamp tick could keep its
    size and time, so it is not memoised; the same bytes rewritten in place are seen."""
    path = tmp_path / "a.py"
    path.write_bytes(b"x = 1\n")
    stat = path.stat()
    sha256_file(path)
    path.write_bytes(b"x = 2\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same size and time as before
    assert sha256_file(path) == hashlib.sha256(b"x = 2\n").hexdigest()
    assert len(reads) == 2


def test_a_package_sweep_twice_reads_each_file_once(tmp_path: Path, reads: list[Path]) -> None:
    """The publish-time check sweeps ~450 sources at the start and at each write; the old
    256-entry LRU evicted the whole sweep, so the second one read every file again."""
    files = [aged(tmp_path / f"m{index}.py", f"v = {index}\n".encode()) for index in range(600)]
    first = [sha256_file(path) for path in files]
    second = [sha256_file(path) for path in files]
    assert first == second
    assert len(reads) == 600
