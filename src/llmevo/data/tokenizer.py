"""The byte-level BPE tokenizer (512 entries) shared by every BPE model.

Trained with Hugging Face ``tokenizers`` on the LM train split plus the narrative corpus:
byte-level pre-tokenizer without prefix space, minimum pair frequency 2, special tokens
``<pad>``=0, ``<unk>``=1, ``<bos>``=2, ``<eos>``=3. Saved as its JSON and cached under a
key made of the inputs' sha256 sums and the training settings, so a changed input
retrains it and an unchanged one never does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from llmevo.data.codec import SpecialIds, special_token_ids

SPECIAL_TOKENS = ("<pad>", "<unk>", "<bos>", "<eos>")
TOKENIZER_NAME = "wikitext-narrative-bpe-512.json"


@dataclass(frozen=True)
class TokenizerInfo:
    tokenizer: Tokenizer
    path: Path
    sha256: str
    special: SpecialIds | None = None  # None: llmevo's own <pad> <unk> <bos> <eos> = 0..3

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()


def train_bpe(texts: list[str], vocab_size: int = 512, min_frequency: int = 2) -> Tokenizer:
    """Train a byte-level BPE tokenizer on ``texts`` (deterministic for the same input)."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def load_or_train_bpe(
    inputs: dict[str, str],
    texts: list[str],
    cache_dir: Path,
    vocab_size: int = 512,
    min_frequency: int = 2,
) -> TokenizerInfo:
    """The cached tokenizer for these inputs (``{name: sha256}``), training it if needed."""
    key_source = json.dumps(
        {"inputs": inputs, "vocab_size": vocab_size, "min_frequency": min_frequency, "v": 1},
        sort_keys=True,
    )
    key = hashlib.sha256(key_source.encode()).hexdigest()[:16]
    path = cache_dir / "tokenizers" / key / TOKENIZER_NAME
    digest_path = path.with_name(TOKENIZER_NAME + ".sha256")
    cached = _read_cached_tokenizer(path, digest_path, vocab_size)
    if cached is not None:
        return cached
    from llmevo.artifacts.io import one_builder, write_text_atomic

    with one_builder(path):  # a process that trained it while this one waited: read its file
        cached = _read_cached_tokenizer(path, digest_path, vocab_size)
        if cached is not None:
            return cached
        tokenizer = train_bpe(texts, vocab_size, min_frequency)
        text = tokenizer.to_str(pretty=True)
        write_text_atomic(path, text)
        write_text_atomic(digest_path, hashlib.sha256(text.encode()).hexdigest() + "\n")
    return TokenizerInfo(tokenizer=Tokenizer.from_str(text), path=path,
                         sha256=hashlib.sha256(text.encode()).hexdigest())


def _read_cached_tokenizer(path: Path, digest_path: Path, vocab_size: int) -> TokenizerInfo | None:
    """The cached tokenizer, or None (rebuild) when it is missing, unreadable, altered (its
    sha256 differs from the one written beside it) or of another vocabulary size."""
    try:
        text = path.read_text(encoding="utf-8")
        recorded = digest_path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest != recorded:
        return None
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception:  # noqa: BLE001 - the tokenizers library raises plain Exception
        return None
    if tokenizer.get_vocab_size() > vocab_size:
        return None
    return TokenizerInfo(tokenizer=tokenizer, path=path, sha256=digest)


def token_byte_lengths(tokenizer: Tokenizer) -> list[int]:
    """UTF-8 bytes each token id stands for; special tokens (llmevo's four, or any added
    token marked special) count 0 bytes.

    In a byte-level vocabulary every character of a token's string is one byte.
    """
    special = special_token_ids(tokenizer)
    lengths = [0] * tokenizer.get_vocab_size()
    for token, index in tokenizer.get_vocab().items():
        lengths[index] = 0 if token in SPECIAL_TOKENS or index in special else len(token)
    return lengths
