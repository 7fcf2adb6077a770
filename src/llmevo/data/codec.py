"""Text codecs: the one interface the benchmark suites need from a tokenizer.

A codec turns text into token ids, names its special ids, says how many UTF-8 bytes a run
of token ids stands for (for bits-per-byte; special tokens count 0 bytes) and carries an
``identity`` string that goes into data fingerprints.

Two codecs:

- ``ByteCodec``: ids 0..255 are the UTF-8 bytes, then ``<pad>`` 256, ``<bos>`` 257,
  ``<eos>`` 258 (vocabulary 259). The byte-level baseline for BLT (arXiv 2412.09871).
- ``BPECodec``: wraps a byte-level BPE ``tokenizers.Tokenizer`` whose special tokens are
  ``<pad>`` 0, ``<unk>`` 1, ``<bos>`` 2, ``<eos>`` 3 (llmevo's own), or those a checkpoint
  names (``SpecialIds``, e.g. SmolLM2's ``<|endoftext|>`` 0 as BOS, EOS and padding).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tokenizers import Tokenizer

from llmevo.errors import DataError


@runtime_checkable
class TextCodec(Protocol):
    """What the suites need from a tokenizer."""

    vocab_size: int
    pad_id: int
    bos_id: int
    eos_id: int
    identity: str

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        ...

    def byte_length(self, ids: Sequence[int]) -> int:
        """UTF-8 bytes that ``ids`` stand for; special tokens count 0."""
        ...


class ByteCodec:
    """UTF-8 bytes as tokens: ids 0..255, then ``<pad>``, ``<bos>``, ``<eos>``."""

    BYTE_COUNT = 256
    PAD_ID = 256
    BOS_ID = 257
    EOS_ID = 258
    VOCAB_SIZE = 259

    def __init__(self) -> None:
        self.vocab_size = self.VOCAB_SIZE
        self.pad_id = self.PAD_ID
        self.bos_id = self.BOS_ID
        self.eos_id = self.EOS_ID
        self.identity = "bytes-utf8:pad256-bos257-eos258"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def byte_length(self, ids: Sequence[int]) -> int:
        return sum(1 for token in ids if token < self.BYTE_COUNT)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE.

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to code points
    256.. in byte order (Radford et al. 2019, ``encoder.py``).
    """
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


BPE_SPECIAL_TOKENS: dict[str, int] = {"<pad>": 0, "<unk>": 1, "<bos>": 2, "<eos>": 3}


@dataclass(frozen=True)
class SpecialIds:
    """The special ids of a tokenizer that is not llmevo's own (a checkpoint's, read from its
    ``config.json``); ``pad`` may equal ``eos`` (padding is masked out either way)."""

    pad: int
    bos: int
    eos: int


class BPECodec:
    """A byte-level BPE ``tokenizers.Tokenizer``: llmevo's own with ``<pad> <unk> <bos> <eos>``
    = 0..3 (``special`` None), or another with the ids ``special`` names.

    Raises ``DataError`` when a special token is missing or has another id (a special id
    outside the vocabulary), or when a non-special vocabulary entry is not written in the
    byte-level alphabet (then byte counts, and so bits per byte, would be undefined). Added
    tokens marked special count 0 bytes.
    """

    def __init__(self, tokenizer: Tokenizer, special: SpecialIds | None = None) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        if special is None:
            for token, expected in BPE_SPECIAL_TOKENS.items():
                found = tokenizer.token_to_id(token)
                if found != expected:
                    raise DataError(
                        f"tokenizer: special token {token} has id {found}, expected {expected}"
                    )
            special = SpecialIds(pad=BPE_SPECIAL_TOKENS["<pad>"], bos=BPE_SPECIAL_TOKENS["<bos>"],
                                 eos=BPE_SPECIAL_TOKENS["<eos>"])
            self.identity = "bpe:" + hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()
        else:
            for role in ("pad", "bos", "eos"):
                value = getattr(special, role)
                if not 0 <= value < self.vocab_size:
                    raise DataError(f"tokenizer: {role} id {value} is outside its vocabulary "
                                    f"of {self.vocab_size}")
            self.identity = ("bpe:" + hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()
                             + f":pad{special.pad}-bos{special.bos}-eos{special.eos}")
        self.pad_id, self.bos_id, self.eos_id = special.pad, special.bos, special.eos
        self._token_bytes = self._byte_lengths(tokenizer, {special.pad, special.bos, special.eos})

    def _byte_lengths(self, tokenizer: Tokenizer, special_ids: set[int]) -> list[int]:
        alphabet = set(bytes_to_unicode().values())
        special_ids = special_ids | special_token_ids(tokenizer)
        lengths = [0] * self.vocab_size
        for token, token_id in tokenizer.get_vocab(with_added_tokens=True).items():
            if token_id in special_ids:
                continue
            if any(char not in alphabet for char in token):
                raise DataError(
                    f"tokenizer: entry {token!r} (id {token_id}) is not byte-level BPE;"
                    " expected every character in the byte-level alphabet"
                )
            lengths[token_id] = len(token)  # one alphabet character per byte
        return lengths

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def byte_length(self, ids: Sequence[int]) -> int:
        return sum(self._token_bytes[token] for token in ids)


def special_token_ids(tokenizer: Tokenizer) -> set[int]:
    """The ids of the tokenizer's added tokens that are marked special (text they never stand for)."""
    return {index for index, token in tokenizer.get_added_tokens_decoder().items() if token.special}
