"""Every pinned data file (LM corpora and benchmark suites), its sha256, and the checked reads.

Files are found under a data directory that the caller passes in (the CLI reads
``--data-dir`` or ``$LLMEVO_DATA``, else the default folder of ``store``, where a missing
pinned file is unpacked or downloaded when first read: ``store.provide``). The sums are
those recorded in each folder's ``SOURCE.md`` under the shared data directory; a missing or
altered file is a ``DataError`` naming the file and what was expected.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

from llmevo.data.sums import (
    ALPACA_FILE,
    GSM8K_TEST_FILE,
    HH_HARMLESS_TEST_FILE,
    HH_HELPFUL_TEST_FILE,
    LM_FILE_SHA256,
    SUITE_FILE_SHA256,
)
from llmevo.digests import sha256_file
from llmevo.errors import DataError

__all__ = [
    "ALPACA_FILE", "GSM8K_TEST_FILE", "HH_HARMLESS_TEST_FILE", "HH_HELPFUL_TEST_FILE",
    "LM_FILE_SHA256", "SUITE_FILE_SHA256", "jsonl_records", "read_checked", "read_pinned",
    "read_text", "verified_path",
]


def _provided(path: Path) -> bool:
    """Whether the default data folder placed the missing ``path`` (``store.provide``)."""
    from llmevo.data import store  # store reads the pins through fetch

    return store.provide(path)


def read_checked(path: Path, expected_sha256: str | None) -> bytes:
    """The bytes of ``path``; checked against ``expected_sha256`` unless it is None."""
    if not path.is_file() and not _provided(path):
        raise DataError(f"{path}: file not found; expected the benchmark data file here")
    raw = path.read_bytes()
    if expected_sha256 is not None:
        got = hashlib.sha256(raw).hexdigest()
        if got != expected_sha256:
            raise DataError(
                f"{path}: sha256 {got} does not match the pinned {expected_sha256}"
                " (the file is altered or a different release)"
            )
    return raw


def read_pinned(
    data_dir: Path, relative: str, pins: Mapping[str, str | None] = SUITE_FILE_SHA256
) -> bytes:
    """Read ``data_dir / relative``, checked against ``pins[relative]`` (None: unchecked)."""
    return read_checked(data_dir / relative, pins[relative])


def jsonl_records(raw: bytes, source: Path, fields: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """(line index, record) for each JSON line. Bytes that are not UTF-8, a bad line, a missing
    string field or one that is not text (a lone surrogate escape such as ``\\ud800``) are errors."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{source}: not UTF-8 text (byte 0x{raw[error.start]:02x} at offset "
                        f"{error.start}); expected JSON lines") from None
    for index, line in enumerate(text.splitlines()):
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{source}: line {index} is not valid JSON ({error})") from error
        if not isinstance(item, dict) or not all(isinstance(item.get(key), str) for key in fields):
            quoted = " and ".join(f"'{key}'" for key in fields)
            raise DataError(f"{source}: line {index} lacks string {quoted} fields")
        for key in fields:
            try:
                item[key].encode("utf-8")
            except UnicodeEncodeError as error:
                raise DataError(f"{source}: line {index}: '{key}' holds a lone surrogate "
                                f"(\\u{ord(item[key][error.start]):04x}), not text") from None
        yield index, item


def verified_path(data_dir: Path, relative: str, pins: dict[str, str] | None = None) -> Path:
    """The path of ``relative`` under ``data_dir`` after checking its pinned sha256."""
    pins = LM_FILE_SHA256 if pins is None else pins
    if relative not in pins:
        raise DataError(f"{relative}: no pinned sha256 for this file; add it to the pins first")
    path = data_dir / relative
    if not path.is_file() and not _provided(path):
        raise DataError(
            f"{path}: file not found; expected the public data set file {relative} "
            f"(sha256 {pins[relative][:16]}…) under the data directory {data_dir}"
        )
    actual = sha256_file(path)
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
