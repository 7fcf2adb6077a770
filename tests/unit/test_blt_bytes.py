"""The UTF-8 byte data path: exact round trip, strict decoding with the failing offset."""

from __future__ import annotations

import pytest
import torch

from llmevo.data.bytes import (
    BOS_ID,
    BYTE_VOCAB_SIZE,
    EOS_ID,
    PAD_ID,
    byte_stream,
    encode_utf8_bytes,
)
from llmevo.data.pins import read_text
from llmevo.errors import DataError


def test_encode_is_the_utf8_bytes_and_round_trips() -> None:
    text = "Ünïcode — 日本 = ok\n"
    ids = encode_utf8_bytes(text)
    assert ids.dtype == torch.long
    assert ids.tolist() == list(text.encode("utf-8"))
    assert len(ids) == len(text.encode("utf-8")) > len(text)
    assert bytes(ids.tolist()).decode("utf-8") == text
    assert torch.equal(byte_stream(text), ids)


def test_special_ids_follow_the_byte_codec() -> None:
    assert (PAD_ID, BOS_ID, EOS_ID, BYTE_VOCAB_SIZE) == (256, 257, 258, 259)


def test_read_strict_reports_the_offset_of_invalid_utf8(tmp_path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes("abc é".encode() + b"\xff\xfe tail")
    with pytest.raises(DataError, match=r"bad\.txt: invalid UTF-8 at byte offset 6"):
        read_text(path)


def test_read_strict_returns_valid_text(tmp_path) -> None:
    path = tmp_path / "good.txt"
    path.write_text("line one\nzwei — drei\n", encoding="utf-8")
    assert read_text(path) == "line one\nzwei — drei\n"

