"""Language-modelling corpora: WikiText-2 (tokenized or raw) and Tiny Shakespeare.

``load_lm_corpus`` returns, for each split, the token ids within its budget and the exact
text span they cover (``texts``), so that a byte-level model can be trained and evaluated
on the very same text. Token arrays are cached under a key made of the file's sha256, the
tokenizer's sha256 and the budget; the corpus fingerprint is computed from the bytes
actually used, the budgets and the tokenizer — never from file times.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from llmevo.artifacts.io import one_builder, write_bytes_atomic
from llmevo.data.pins import read_text, verified_path
from llmevo.data.tokenizer import TokenizerInfo, load_or_train_bpe, token_byte_lengths
from llmevo.digests import sha256_file
from llmevo.errors import ConfigError

SPLITS = ("train", "validation", "test", "narrative")
VARIANT_FILES: dict[str, dict[str, str]] = {
    "tokens": {
        "train": "wikitext-2/wiki.train.tokens",
        "validation": "wikitext-2/wiki.valid.tokens",
        "test": "wikitext-2/wiki.test.tokens",
        "narrative": "tinyshakespeare/input.txt",
    },
    "raw": {
        "train": "wikitext-2-raw/wiki.train.raw",
        "validation": "wikitext-2-raw/wiki.valid.raw",
        "test": "wikitext-2-raw/wiki.test.raw",
        "narrative": "tinyshakespeare/input.txt",
    },
}
# A newline followed by a non-space character is always a pre-token boundary of the
# byte-level pre-tokenizer, so chunks cut there encode exactly as the whole text would.
_CHUNK_BOUNDARY = re.compile(r"\n(?=\S)")
_CHUNK_CHARS = 1 << 16


@dataclass(frozen=True)
class LMBudgets:
    """Tokens per split; ``None`` takes the whole split."""

    train: int | None = None
    validation: int | None = None
    test: int | None = None
    narrative: int | None = None

    def get(self, split: str) -> int | None:
        return getattr(self, split)


@dataclass(frozen=True)
class LMCorpus:
    variant: str
    tokenizer: TokenizerInfo
    tokens: dict[str, Tensor]  # split -> (N,) int64 token ids
    texts: dict[str, str]  # split -> the exact text those tokens cover
    files: dict[str, str]  # split -> relative path of the source file
    fingerprint: str
    token_bytes: Tensor  # (V,) UTF-8 bytes per token id, specials 0

    def n_tokens(self, split: str) -> int:
        return int(self.tokens[split].numel())

    def n_bytes(self, split: str) -> int:
        return len(self.texts[split].encode("utf-8"))

    def bytes_per_token(self, split: str = "train") -> float:
        return self.n_bytes(split) / max(1, self.n_tokens(split))


def _chunks(text: str) -> list[tuple[int, str]]:
    """(start offset, chunk) pieces of about ``_CHUNK_CHARS`` characters at safe boundaries."""
    pieces: list[tuple[int, str]] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + _CHUNK_CHARS)
        if end < len(text):
            match = _CHUNK_BOUNDARY.search(text, end)
            end = match.end() if match else len(text)
        pieces.append((start, text[start:end]))
        start = end
    return pieces


def encode_prefix(info: TokenizerInfo, text: str, budget: int | None) -> tuple[list[int], int]:
    """Token ids of the longest token prefix within ``budget`` and its end offset in ``text``."""
    ids: list[int] = []
    end_char = 0
    pieces = _chunks(text)
    batch = 16
    for first in range(0, len(pieces), batch):
        group = pieces[first : first + batch]
        encodings = info.tokenizer.encode_batch([chunk for _, chunk in group])
        for (offset, chunk), encoding in zip(group, encodings, strict=True):
            room = None if budget is None else budget - len(ids)
            if room is not None and len(encoding.ids) >= room:
                ids.extend(encoding.ids[:room])
                return ids, offset + (encoding.offsets[room - 1][1] if room else 0)
            ids.extend(encoding.ids)
            end_char = offset + len(chunk)
    if budget is not None and len(ids) < budget:
        raise ConfigError(f"a budget of {budget:,} tokens exceeds the split's {len(ids):,} tokens")
    return ids, end_char


def _id_dtype(vocab_size: int) -> type[np.unsignedinteger]:
    """uint16 for vocabularies up to 65,536 (llmevo's 512, SmolLM2's 49,152), else uint32."""
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def _read_token_cache(path: Path, claim: str, text_length: int, vocab_size: int,
                      budget: int | None) -> tuple[Tensor, int] | None:
    """A cached token array, or None when the entry is corrupted, altered or not the one it
    claims to be: it must name the same (file, tokenizer, budget), its ids must hash to the
    recorded digest and lie in the vocabulary, its end within the text."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            ids, end = stored["ids"], int(stored["end"])
            recorded_claim, digest = str(stored["claim"]), str(stored["ids_sha256"])
    except Exception:  # noqa: BLE001 - any unreadable entry is rebuilt, whatever numpy raises
        return None
    if (recorded_claim != claim or ids.dtype != _id_dtype(vocab_size) or ids.ndim != 1
            or hashlib.sha256(ids.tobytes()).hexdigest() != digest
            or not 0 <= end <= text_length or (budget is not None and len(ids) != budget)
            or (len(ids) and int(ids.max()) >= vocab_size)):
        return None
    return torch.from_numpy(ids.astype(np.int64)), end


def _cached_encode(
    info: TokenizerInfo, text: str, file_sha: str, budget: int | None, cache_dir: Path
) -> tuple[Tensor, int]:
    claim = f"{file_sha}:{info.sha256}:{budget}"
    key = hashlib.sha256(claim.encode()).hexdigest()[:20]
    path = cache_dir / "tokens" / f"{key}.npz"
    vocab_size = info.tokenizer.get_vocab_size()
    if path.is_file():
        cached = _read_token_cache(path, claim, len(text), vocab_size, budget)
        if cached is not None:
            return cached
    with one_builder(path):  # a process that encoded it while this one waited: read its file
        if path.is_file():
            cached = _read_token_cache(path, claim, len(text), vocab_size, budget)
            if cached is not None:
                return cached
        ids, end = encode_prefix(info, text, budget)
        array = np.asarray(ids, dtype=_id_dtype(vocab_size))
        entry = io.BytesIO()
        np.savez(entry, ids=array, end=np.int64(end), claim=np.str_(claim),
                 ids_sha256=np.str_(hashlib.sha256(array.tobytes()).hexdigest()))
        write_bytes_atomic(path, entry.getvalue())
    return torch.from_numpy(array.astype(np.int64)), end


def load_lm_corpus(
    data_dir: Path, variant: str, budgets: LMBudgets, cache_dir: Path,
    tokenizer: TokenizerInfo | None = None,
) -> LMCorpus:
    """Verify, read and tokenize the LM splits of ``variant`` (``tokens`` or ``raw``) with
    ``tokenizer`` (a checkpoint's own), or by default llmevo's BPE-512 trained on them."""
    if variant not in VARIANT_FILES:
        raise ConfigError(f"unknown WikiText-2 variant '{variant}'; known: tokens, raw")
    files = VARIANT_FILES[variant]
    paths = {split: verified_path(data_dir, files[split]) for split in SPLITS}
    raw_texts = {split: read_text(paths[split]) for split in SPLITS}
    shas = {split: sha256_file(paths[split]) for split in SPLITS}
    if tokenizer is None:
        tokenizer = load_or_train_bpe(
            inputs={files["train"]: shas["train"], files["narrative"]: shas["narrative"]},
            texts=[raw_texts["train"], raw_texts["narrative"]],
            cache_dir=cache_dir,
        )
    tokens: dict[str, Tensor] = {}
    texts: dict[str, str] = {}
    fingerprint = hashlib.sha256()
    fingerprint.update(json.dumps({"variant": variant, "tokenizer": tokenizer.sha256}).encode())
    for split in SPLITS:
        budget = budgets.get(split)
        ids, end = _cached_encode(tokenizer, raw_texts[split], shas[split], budget, cache_dir)
        tokens[split] = ids
        texts[split] = raw_texts[split][:end]
        fingerprint.update(f"{split}:{budget}:{ids.numel()}:".encode())
        fingerprint.update(hashlib.sha256(texts[split].encode("utf-8")).digest())
    return LMCorpus(
        variant=variant,
        tokenizer=tokenizer,
        tokens=tokens,
        texts=texts,
        files=files,
        fingerprint=fingerprint.hexdigest(),
        token_bytes=torch.tensor(token_byte_lengths(tokenizer.tokenizer), dtype=torch.int64),
    )
