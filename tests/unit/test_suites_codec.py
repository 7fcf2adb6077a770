"""Text codecs: byte ids, BPE special ids, byte counts for bits per byte."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from llmevo.data.codec import BPECodec, ByteCodec, TextCodec, bytes_to_unicode
from llmevo.errors import DataError

SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>"]


def train_small_bpe(data_dir: Path, specials: list[str] = SPECIALS) -> Tokenizer:
    """Byte-level BPE, 512 entries, on the first 100,000 characters of Tiny Shakespeare."""
    text = (data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:100_000]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        min_frequency=2,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(text.splitlines(), trainer=trainer)
    return tokenizer


@pytest.fixture(scope="module")
def bpe(data_dir: Path) -> BPECodec:
    return BPECodec(train_small_bpe(data_dir))


def test_byte_codec_ids_and_byte_lengths() -> None:
    codec = ByteCodec()
    assert (codec.pad_id, codec.bos_id, codec.eos_id, codec.vocab_size) == (256, 257, 258, 259)
    text = "naïve — ok"
    ids = codec.encode(text)
    assert bytes(ids) == text.encode("utf-8")
    assert codec.byte_length([codec.bos_id, *ids, codec.eos_id, codec.pad_id]) == 13
    assert isinstance(codec, TextCodec)


def test_bytes_to_unicode_is_the_byte_level_alphabet() -> None:
    mapping = bytes_to_unicode()
    assert len(set(mapping.values())) == 256
    assert set(mapping.values()) == set(pre_tokenizers.ByteLevel.alphabet())


def test_bpe_codec_specials_and_byte_counts(bpe: BPECodec) -> None:
    assert (bpe.pad_id, bpe.bos_id, bpe.eos_id, bpe.vocab_size) == (0, 2, 3, 512)
    text = " To be, or not — café\nnaïve 123"
    ids = bpe.encode(text)
    assert len(ids) < len(text.encode("utf-8"))  # merges happened
    assert not set(ids) & {0, 1, 2, 3}
    assert bpe.tokenizer.decode(ids) == text
    assert bpe.byte_length(ids) == len(text.encode("utf-8"))
    assert bpe.byte_length([bpe.bos_id, *ids, bpe.eos_id]) == len(text.encode("utf-8"))
    assert isinstance(bpe, TextCodec)
    assert bpe.identity.startswith("bpe:")


def test_bpe_codec_rejects_missing_or_moved_specials(data_dir: Path) -> None:
    with pytest.raises(DataError, match="<eos>"):
        BPECodec(train_small_bpe(data_dir, ["<pad>", "<unk>", "<bos>"]))
    with pytest.raises(DataError, match="<pad> has id 1, expected 0"):
        BPECodec(train_small_bpe(data_dir, ["<unk>", "<pad>", "<bos>", "<eos>"]))
