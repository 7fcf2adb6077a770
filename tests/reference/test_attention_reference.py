"""Attention components against an independent head-by-head softmax reference.

mha with kv_heads 4/2/1 (MHA, GQA 2305.13245, MQA 1911.02150), qk_norm (2302.05442) and
value_residual (ResFormer, 2410.17897).
"""

from __future__ import annotations

import pytest
import torch

from llmevo.catalog import build_model
from llmevo.components.attention.mha import MultiHeadAttention, MultiHeadConfig
from llmevo.components.attention.qk_norm import QKNormAttention, QKNormConfig
from llmevo.components.attention.value_residual import (
    ValueResidualAttention,
    ValueResidualConfig,
)
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.components.position.rope import RopeConfig, RotaryPosition
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig

DIMS = ModelDims(vocab_size=16, d_model=64, n_layers=2, n_heads=4, max_seq_len=32)
B, T, H, DH = 2, 7, 4, 16


def _heads(linear: torch.nn.Linear, x: torch.Tensor, n: int) -> list[torch.Tensor]:
    """Per-head (B, T, Dh) slices of a projection, computed with an explicit matmul."""
    projected = x @ linear.weight.T  # (B, T, n * Dh)
    return [projected[..., h * DH : (h + 1) * DH] for h in range(n)]


def _reference(q_heads, k_heads, v_heads, output: torch.nn.Linear) -> torch.Tensor:
    """softmax(q k^T / sqrt(Dh), causal) v per query head; head h uses KV head h // group."""
    group = len(q_heads) // len(k_heads)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    outs = []
    for h, q in enumerate(q_heads):
        k, v = k_heads[h // group], v_heads[h // group]
        scores = (q @ k.transpose(-1, -2)) / DH**0.5
        outs.append(scores.masked_fill(mask, float("-inf")).softmax(-1) @ v)
    return torch.cat(outs, dim=-1) @ output.weight.T  # (B, T, D)


def _rope_context() -> tuple[RotaryPosition, AttentionContext]:
    rope = RotaryPosition(RopeConfig(), DIMS)
    return rope, AttentionContext(positions=torch.arange(T), position=rope)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_mha_grouped_heads_match_reference(kv_heads: int) -> None:
    torch.manual_seed(kv_heads)
    attention = MultiHeadAttention(MultiHeadConfig(kv_heads=kv_heads), DIMS, 0)
    rope, context = _rope_context()
    x = torch.randn(B, T, 64)
    positions = torch.arange(T)
    q = [rope.rotate(h, positions) for h in _heads(attention.query, x, H)]
    k = [rope.rotate(h, positions) for h in _heads(attention.key, x, kv_heads)]
    v = _heads(attention.value, x, kv_heads)
    expected = _reference(q, k, v, attention.output)
    torch.testing.assert_close(attention(x, context), expected, atol=1e-5, rtol=1e-4)
    assert attention.key.weight.shape == (kv_heads * DH, 64)


def test_kv_heads_must_divide_heads() -> None:
    with pytest.raises(ConfigError, match="kv_heads 3 does not divide heads 4"):
        build_model(ModelConfig().with_slot("attention", "mha:kv_heads=3"))


def _rms(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_qk_norm_matches_reference(kv_heads: int) -> None:
    torch.manual_seed(0)
    attention = QKNormAttention(QKNormConfig(kv_heads=kv_heads), DIMS, 0)
    with torch.no_grad():  # non-trivial gains
        attention.query_gain.uniform_(0.5, 2.0)
        attention.key_gain.uniform_(0.5, 2.0)
    rope, context = _rope_context()
    x = torch.randn(B, T, 64) * 3.0
    positions = torch.arange(T)
    q = [rope.rotate(_rms(h, attention.query_gain, 1e-6), positions) for h in _heads(attention.query, x, H)]
    k = [rope.rotate(_rms(h, attention.key_gain, 1e-6), positions) for h in _heads(attention.key, x, kv_heads)]
    v = _heads(attention.value, x, kv_heads)
    expected = _reference(q, k, v, attention.output)
    torch.testing.assert_close(attention(x, context), expected, atol=1e-5, rtol=1e-4)


def test_qk_norm_bounds_logits_when_inputs_grow() -> None:
    torch.manual_seed(0)
    attention = QKNormAttention(QKNormConfig(), DIMS, 0)
    rope, context = _rope_context()
    x = torch.randn(B, T, 64)
    q1, k1, _ = attention.project(x, context)
    q2, k2, _ = attention.project(x * 100.0, context)
    torch.testing.assert_close(q1 @ k1.mT, q2 @ k2.mT, atol=1e-3, rtol=1e-3)


def test_value_residual_second_layer_mixes_first_layer_values() -> None:
    torch.manual_seed(0)
    config = ValueResidualConfig(lambda_current=0.3, lambda_first=0.9)
    first, second = ValueResidualAttention(config, DIMS, 0), ValueResidualAttention(config, DIMS, 1)
    rope = RotaryPosition(RopeConfig(), DIMS)
    shared: dict = {}
    x1, x2 = torch.randn(2, B, T, 64)
    ctx = dict(positions=torch.arange(T), position=rope, shared=shared)
    out1 = first(x1, AttentionContext(**ctx))
    out2 = second(x2, AttentionContext(**ctx))

    positions = torch.arange(T)
    v1 = _heads(first.value, x1, H)
    q1 = [rope.rotate(h, positions) for h in _heads(first.query, x1, H)]
    k1 = [rope.rotate(h, positions) for h in _heads(first.key, x1, H)]
    torch.testing.assert_close(out1, _reference(q1, k1, v1, first.output), atol=1e-5, rtol=1e-4)

    q2 = [rope.rotate(h, positions) for h in _heads(second.query, x2, H)]
    k2 = [rope.rotate(h, positions) for h in _heads(second.key, x2, H)]
    v2 = [0.3 * own + 0.9 * base for own, base in zip(_heads(second.value, x2, H), v1, strict=True)]
    torch.testing.assert_close(out2, _reference(q2, k2, v2, second.output), atol=1e-5, rtol=1e-4)


def test_value_residual_gradient_reaches_first_layer_values_from_later_layers() -> None:
    torch.manual_seed(0)
    config = ValueResidualConfig()
    first, second = ValueResidualAttention(config, DIMS, 0), ValueResidualAttention(config, DIMS, 1)
    rope = RotaryPosition(RopeConfig(), DIMS)
    shared: dict = {}
    ctx = dict(positions=torch.arange(T), position=rope, shared=shared)
    x = torch.randn(B, T, 64)
    first(x, AttentionContext(**ctx))  # output unused: only the shared values
    second(x, AttentionContext(**ctx)).sum().backward()
    assert first.value.weight.grad is not None and first.value.weight.grad.abs().sum() > 0
    assert first.query.weight.grad is None  # only V_1 travels between layers


def test_value_residual_without_a_first_layer_is_an_error() -> None:
    attention = ValueResidualAttention(ValueResidualConfig(), DIMS, layer_index=1)
    rope, context = _rope_context()
    with pytest.raises(ConfigError, match="found no first-layer values"):
        attention(torch.randn(B, T, 64), context)
