"""BLT pieces against independent references: scipy entropy, a direct polynomial hash,
an explicit unigram cross-entropy, and an explicit masked attention for patch pooling."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from llmevo.model.blt.core import HASH_BASE, HASH_PRIME, CrossAttention, ngram_hashes
from llmevo.model.blt.entropy import entropy_from_logits, unigram_bits_per_byte


def test_entropy_matches_scipy() -> None:
    logits = torch.randn(5, 259, generator=torch.Generator().manual_seed(0)) * 3
    probs = torch.softmax(logits.double(), dim=-1).numpy()
    expected = scipy.stats.entropy(probs, axis=-1)  # natural log: nats
    np.testing.assert_allclose(entropy_from_logits(logits).numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_ngram_hash_is_the_polynomial_hash_of_the_preceding_n_bytes(n: int) -> None:
    units = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(n))
    buckets, pad = 128, 256
    hashes = ngram_hashes(units, n, buckets, pad)
    for row in range(2):
        for t in range(20):
            gram = [pad] * max(0, n - 1 - t) + units[row, max(0, t - n + 1) : t + 1].tolist()
            value = 0
            for unit in gram:
                value = (value * HASH_BASE + unit) % HASH_PRIME
            assert hashes[row, t].item() == value % buckets


def test_unigram_bits_per_byte_is_the_add_one_cross_entropy() -> None:
    train = torch.tensor(list(b"abracadabra"))
    validation = torch.tensor(list(b"cab"))
    counts = {byte: list(b"abracadabra").count(byte) + 1 for byte in range(256)}
    total = sum(counts.values())
    expected = -sum(math.log2(counts[b] / total) for b in b"cab") / 3
    assert unigram_bits_per_byte(train, validation) == pytest.approx(expected)


def test_cross_attention_matches_an_explicit_masked_softmax() -> None:
    torch.manual_seed(0)
    attention = CrossAttention(d_query=8, d_key=6, d_out=5, heads=2)
    queries, keys = torch.randn(1, 3, 8), torch.randn(1, 4, 6)
    allowed = torch.tensor([[[1, 1, 0, 0], [0, 0, 1, 0], [1, 1, 1, 1]]], dtype=torch.bool)
    out = attention(queries, keys, allowed)
    q = attention.query(queries)[0].view(3, 2, 4)
    k = attention.key(keys)[0].view(4, 2, 4)
    v = attention.value(keys)[0].view(4, 2, 4)
    heads = []
    for h in range(2):
        scores = q[:, h] @ k[:, h].T / 2.0  # sqrt(head_dim = 4)
        scores = scores.masked_fill(~allowed[0], float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ v[:, h])
    expected = attention.output(torch.cat(heads, dim=-1))
    torch.testing.assert_close(out[0], expected, atol=1e-6, rtol=1e-5)
