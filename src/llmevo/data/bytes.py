"""The UTF-8 byte data path for byte-level models (BLT, arXiv 2412.09871).

Bytes are ids 0..255; the special ids are those of ``ByteCodec`` (``<pad>`` 256, ``<bos>``
257, ``<eos>`` 258, vocabulary 259). Text files are read strictly (``data.pins.read_text``):
an invalid UTF-8 sequence is a ``DataError`` naming the byte offset, never silently replaced, so that the
byte stream of a byte-level arm is exactly the text the token-level arm was trained on.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import Tensor

from llmevo.data.codec import ByteCodec
from llmevo.errors import DataError

PAD_ID = ByteCodec.PAD_ID
BOS_ID = ByteCodec.BOS_ID
EOS_ID = ByteCodec.EOS_ID
BYTE_VOCAB_SIZE = ByteCodec.VOCAB_SIZE


def encode_utf8_bytes(text: str) -> Tensor:
    """The UTF-8 bytes of ``text`` as a LongTensor of ids 0..255, shape (N,)."""
    raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    return torch.from_numpy(raw.astype(np.int64))


def byte_stream(text: str) -> Tensor:
    """The training/evaluation stream of a byte-level arm: ``encode_utf8_bytes(text)``.

    No BOS/EOS is inserted: the stream is cut into windows like a token stream, and each
    window's first prediction is made from ``<bos>`` by the model itself.
    """
    return encode_utf8_bytes(text)


def bytes_fingerprint(ids: Tensor) -> str:
    """sha256 of a byte-id stream (ids 0..255), for cache keys and provenance."""
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) > 255):
        raise DataError("byte ids: expected values 0..255 only")
    return hashlib.sha256(ids.to(torch.uint8).numpy().tobytes()).hexdigest()
