"""Sinusoidal (1706.03762), ALiBi (2108.12409) and NoPE (2305.19466) against their formulas."""

from __future__ import annotations

import math

import pytest
import torch

from llmevo.catalog import build_model
from llmevo.components.attention.mha import MultiHeadAttention, MultiHeadConfig
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.components.position.alibi import AlibiConfig, AlibiPosition, alibi_bias, alibi_slopes
from llmevo.components.position.nope import NoPosition
from llmevo.components.position.sinusoidal import (
    SinusoidalConfig,
    SinusoidalPosition,
    sinusoidal_table,
)
from llmevo.model.config import ModelConfig
from llmevo.registry import EmptyConfig

DIMS = ModelDims(vocab_size=16, d_model=64, n_layers=1, n_heads=4, max_seq_len=32)


def test_sinusoidal_table_matches_the_formula() -> None:
    d_model, positions = 10, [0, 1, 7, 50]
    table = sinusoidal_table(torch.tensor(positions), d_model, 10_000.0)
    for row, pos in enumerate(positions):
        for i in range(d_model):
            angle = pos / 10_000.0 ** ((i - i % 2) / d_model)
            expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert table[row, i].item() == pytest.approx(expected, abs=1e-5)


def test_sinusoidal_embed_scales_tokens_and_adds_the_table() -> None:
    encoding = SinusoidalPosition(SinusoidalConfig(), DIMS)
    x = torch.randn(2, 5, 64)
    positions = torch.arange(3, 8)
    expected = x * 8.0 + sinusoidal_table(positions, 64, 10_000.0)
    torch.testing.assert_close(encoding.embed(x, positions), expected)
    unscaled = SinusoidalPosition(SinusoidalConfig(scale_embeddings=False), DIMS)
    torch.testing.assert_close(unscaled.embed(x, positions), expected - x * 7.0)


@pytest.mark.parametrize(
    ("heads", "expected"),
    [
        (8, [2.0**-k for k in range(1, 9)]),  # the paper's example: 1/2, 1/4, ..., 1/256
        (4, [2.0**-k for k in (2, 4, 6, 8)]),
        # 6 heads: the 4-head slopes, then every other slope of the 8-head sequence (ALiBi code)
        (6, [2.0**-k for k in (2, 4, 6, 8)] + [2.0**-1, 2.0**-3]),
    ],
)
def test_alibi_slopes(heads: int, expected: list[float]) -> None:
    torch.testing.assert_close(alibi_slopes(heads), torch.tensor(expected))


def test_alibi_bias_is_minus_slope_times_distance() -> None:
    slopes = torch.tensor([0.5, 0.25])
    bias = alibi_bias(slopes, torch.arange(4), torch.arange(4))
    for h, m in enumerate([0.5, 0.25]):
        for i in range(4):
            for j in range(i + 1):
                assert bias[h, i, j].item() == pytest.approx(-m * (i - j))


def test_attention_with_alibi_matches_explicit_softmax() -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(MultiHeadConfig(), DIMS, 0)
    alibi = AlibiPosition(AlibiConfig(), DIMS)
    x = torch.randn(2, 6, 64)
    got = attention(x, AttentionContext(positions=torch.arange(6), position=alibi))

    slopes = alibi_slopes(4)
    q = attention.query(x).view(2, 6, 4, 16).transpose(1, 2)
    k = attention.key(x).view(2, 6, 4, 16).transpose(1, 2)
    v = attention.value(x).view(2, 6, 4, 16).transpose(1, 2)
    heads = []
    for h in range(4):
        scores = q[:, h] @ k[:, h].transpose(-1, -2) / 4.0  # (B, T, T)
        i, j = torch.meshgrid(torch.arange(6), torch.arange(6), indexing="ij")
        scores = scores - slopes[h] * (i - j)
        scores = scores.masked_fill(j > i, float("-inf"))
        heads.append(scores.softmax(-1) @ v[:, h])  # (B, T, Dh)
    expected = attention.output(torch.stack(heads, dim=2).reshape(2, 6, 64))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["nope", "alibi"])
def test_relative_encodings_ignore_a_global_position_shift(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(max_seq_len=64).with_slot("position", name)).eval()
    tokens = torch.randint(0, 512, (1, 10))
    with torch.no_grad():
        torch.testing.assert_close(
            model(tokens), model(tokens, positions=torch.arange(30, 40)), atol=1e-5, rtol=1e-5
        )


def test_nope_hooks_are_identities() -> None:
    nope = NoPosition(EmptyConfig(), DIMS)
    x = torch.randn(2, 4, 5, 16)
    assert nope.embed(x, torch.arange(5)) is x
    assert nope.rotate(x, torch.arange(5)) is x
    assert nope.attention_bias(torch.arange(5), torch.arange(5)) is None
    assert sum(p.numel() for p in nope.parameters()) == 0


def test_learned_positions_add_the_table_row_of_each_position() -> None:
    """RoPE's comparison arm: ``x + E[pos]``, computed here as a one-hot matrix product."""
    from llmevo.components.position.learned import LearnedPosition
    from llmevo.errors import ConfigError

    torch.manual_seed(0)
    encoding = LearnedPosition(EmptyConfig(), DIMS)
    x = torch.randn(2, 5, 64)
    positions = torch.tensor([0, 3, 4, 9, 31])
    one_hot = torch.nn.functional.one_hot(positions, DIMS.max_seq_len).float()  # (T, max_seq_len)
    expected = x + one_hot @ encoding.table.weight  # (B, T, D) + (T, D)
    torch.testing.assert_close(encoding.embed(x, positions), expected)
    assert encoding.rotate(x, positions) is x and encoding.attention_bias(positions, positions) is None
    # only the rows of the positions used receive gradient
    encoding.embed(x, positions).sum().backward()
    used = encoding.table.weight.grad.abs().sum(-1) > 0
    assert used.nonzero().flatten().tolist() == positions.tolist()
    with pytest.raises(ConfigError, match="beyond the table"):
        encoding.embed(x[:, :1], torch.tensor([32]))
