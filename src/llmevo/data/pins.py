"""Pinned sha256 sums of the benchmark-suite files, and the checked read.

The sums are those recorded in each folder's ``SOURCE.md`` under the shared data
directory; a missing or altered file is a ``DataError`` that names it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

from llmevo.errors import DataError

ALPACA_FILE = "alpaca/alpaca_5000.json"
GSM8K_TEST_FILE = "gsm8k/test.jsonl"
HH_HELPFUL_TEST_FILE = "hh-rlhf/helpful-base/test.jsonl"
HH_HARMLESS_TEST_FILE = "hh-rlhf/harmless-base/test.jsonl"

SUITE_FILE_SHA256: dict[str, str] = {
    ALPACA_FILE: "fc1add24c93c9fbbe585a64a6c9bf6165eb110225f4470efbff382a913558ec0",
    GSM8K_TEST_FILE: "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
    HH_HELPFUL_TEST_FILE: "41c3a32fe45a7075f7e32b11bd29383f9fe650287354a95568f61295a8e694da",
    HH_HARMLESS_TEST_FILE: "14d765196c9f18d84f9bb3a78bac608c8f2915110ebcbd74ec95db7b7198b008",
}


def read_checked(path: Path, expected_sha256: str | None) -> bytes:
    """The bytes of ``path``; checked against ``expected_sha256`` unless it is None."""
    if not path.is_file():
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
    """(line index, record) for each JSON line; a bad line or a missing string field is an error."""
    for index, line in enumerate(raw.decode("utf-8").splitlines()):
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{source}: line {index} is not valid JSON ({error})") from error
        if not isinstance(item, dict) or not all(isinstance(item.get(key), str) for key in fields):
            quoted = " and ".join(f"'{key}'" for key in fields)
            raise DataError(f"{source}: line {index} lacks string {quoted} fields")
        yield index, item
