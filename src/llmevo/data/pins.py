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

from llmevo.digests import sha256_file
from llmevo.errors import DataError

LM_FILE_SHA256: dict[str, str] = {
    "wikitext-2/wiki.train.tokens": "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
    "wikitext-2/wiki.valid.tokens": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "wikitext-2/wiki.test.tokens": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
    "wikitext-2-raw/wiki.train.raw": "6707892fa3788b5ab9ed78ab5ff37d9fe825f6011a2ad4fcd6a6d467f0e7da57",
    "wikitext-2-raw/wiki.valid.raw": "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7",
    "wikitext-2-raw/wiki.test.raw": "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08",
    "tinyshakespeare/input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
}

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
