"""WikiText-2 / Tiny Shakespeare loading: pins, exact spans, chunked encoding, fingerprints."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llmevo.data.lm import LMBudgets, encode_prefix, load_lm_corpus
from llmevo.data.pins import LM_FILE_SHA256, read_text, verified_path
from llmevo.errors import DataError


def test_smoke_budgets_and_exact_text_spans(smoke_corpus):
    corpus = smoke_corpus
    assert {s: corpus.n_tokens(s) for s in ("train", "validation", "test", "narrative")} == {
        "train": 120_000, "validation": 8_000, "test": 8_000, "narrative": 120_000}
    assert corpus.tokenizer.vocab_size == 512
    for split in ("validation", "test"):
        again = corpus.tokenizer.tokenizer.encode(corpus.texts[split]).ids
        assert again == corpus.tokens[split].tolist()
    assert [corpus.tokenizer.tokenizer.token_to_id(t) for t in ("<pad>", "<unk>", "<bos>", "<eos>")] == [0, 1, 2, 3]


def test_chunked_encoding_equals_whole_text_encoding(smoke_corpus, data_dir):
    text = read_text(data_dir / "wikitext-2/wiki.valid.tokens")[:300_000]
    whole = smoke_corpus.tokenizer.tokenizer.encode(text).ids
    chunked, end = encode_prefix(smoke_corpus.tokenizer, text, None)
    assert chunked == whole and end == len(text)
    prefix, prefix_end = encode_prefix(smoke_corpus.tokenizer, text, 5_000)
    assert prefix == whole[:5_000]
    assert smoke_corpus.tokenizer.tokenizer.encode(text[:prefix_end]).ids[:5_000] == prefix


def test_token_bytes_sum_to_the_text_bytes(smoke_corpus):
    tokens = smoke_corpus.tokens["validation"]
    n_bytes = int(smoke_corpus.token_bytes[tokens].sum())
    unk = int((tokens == 1).sum())  # "<unk>" in the tokenized release is a special token: 0 bytes
    assert n_bytes + 5 * unk == smoke_corpus.n_bytes("validation")


def test_fingerprint_comes_from_content_and_budget(data_dir, cache_dir, smoke_corpus):
    smaller = load_lm_corpus(data_dir, "tokens", LMBudgets(100_000, 8_000, 8_000, 120_000), cache_dir)
    assert smaller.fingerprint != smoke_corpus.fingerprint
    same = load_lm_corpus(data_dir, "tokens", LMBudgets(120_000, 8_000, 8_000, 120_000), cache_dir)
    assert same.fingerprint == smoke_corpus.fingerprint


def _mirror(data_dir: Path, tmp_path: Path) -> Path:
    mirror = tmp_path / "data"
    for relative in LM_FILE_SHA256:
        target = mirror / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(data_dir / relative)
    return mirror


def test_altered_file_is_an_error_naming_it(data_dir, tmp_path):
    mirror = _mirror(data_dir, tmp_path)
    altered = mirror / "wikitext-2/wiki.valid.tokens"
    altered.unlink()
    shutil.copy(data_dir / "wikitext-2/wiki.valid.tokens", altered)
    with altered.open("ab") as handle:
        handle.write(b"x")
    with pytest.raises(DataError, match=r"wiki\.valid\.tokens: sha256 .* does not match the pinned"):
        verified_path(mirror, "wikitext-2/wiki.valid.tokens")


def test_missing_file_is_an_error_naming_it(data_dir, tmp_path):
    mirror = _mirror(data_dir, tmp_path)
    (mirror / "tinyshakespeare/input.txt").unlink()
    with pytest.raises(DataError, match=r"input\.txt: file not found"):
        load_lm_corpus(mirror, "tokens", LMBudgets(1000, 1000, 1000, 1000), tmp_path / "cache")


def test_invalid_utf8_names_the_offset(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"abc\xffdef")
    with pytest.raises(DataError, match="invalid UTF-8 at byte offset 3"):
        read_text(bad)
