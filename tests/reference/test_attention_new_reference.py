"""Attention components added together, each against formulas written out head by head:
grouped-query (2305.13245) and multi-query (1911.02150) attention and gated attention
(2505.06708).

Every reference slices the layer's own weight matrices per head, multiplies them out with
explicit matmuls, builds the causal mask entry by entry and applies the paper's formula with
plain tensor ops (``exp`` for sigmoids), never the component's helpers. Each also has a
textbook limit: group size 1 is ``mha``; a zero gate halves ``mha``.
"""

from __future__ import annotations

import math

import pytest
import torch

from llmevo.catalog import build_model
from llmevo.components.attention.gated_attn import GatedAttention, GatedAttentionConfig
from llmevo.components.attention.gqa import GroupedQueryAttention, GroupedQueryConfig
from llmevo.components.attention.mha import MultiHeadAttention, MultiHeadConfig
from llmevo.components.attention.mqa import MultiQueryAttention
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.components.position.rope import RopeConfig, RotaryPosition
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import EmptyConfig
from llmevo.runner.scale import RUNGS, scale_model

DIMS = ModelDims(vocab_size=16, d_model=64, n_layers=2, n_heads=4, max_seq_len=32)
B, T, D, H, DH = 2, 9, 64, 4, 16
ATOL, RTOL = 1e-5, 1e-4


def _rows(weight: torch.Tensor, index: int, width: int) -> torch.Tensor:
    """Rows ``index * width .. (index + 1) * width`` of a (out, in) weight: one head's slice."""
    return weight[index * width : (index + 1) * width]


def _hand_mask(n: int) -> torch.Tensor:
    """(n, n) bool, entry by entry: query i sees key j iff j <= i."""
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(i + 1):
            mask[i, j] = True
    return mask


def _softmax_rows(scores: torch.Tensor) -> torch.Tensor:
    """Causal softmax over the last dim written out: exp(s - max) / sum, zero where masked."""
    mask = _hand_mask(scores.shape[-1])
    shifted = scores.masked_fill(~mask, -1e30)
    shifted = shifted - shifted.max(-1, keepdim=True).values
    weights = torch.exp(shifted) * mask
    return weights / weights.sum(-1, keepdim=True)


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


def _rope() -> tuple[RotaryPosition, AttentionContext]:
    rope = RotaryPosition(RopeConfig(), DIMS)
    return rope, AttentionContext(positions=torch.arange(T), position=rope)


def _grouped_heads(attention, x: torch.Tensor, kv_heads: int, rope: RotaryPosition) -> list[torch.Tensor]:
    """softmax(q_h k_g^T / sqrt(Dh)) v_g per query head h, with g = h // (H / kv_heads)."""
    positions = torch.arange(T)
    group = H // kv_heads
    outs = []
    for h in range(H):
        g = h // group
        q = rope.rotate(x @ _rows(attention.query.weight, h, DH).T, positions)  # (B, T, Dh)
        k = rope.rotate(x @ _rows(attention.key.weight, g, DH).T, positions)
        v = x @ _rows(attention.value.weight, g, DH).T
        outs.append(_softmax_rows(q @ k.transpose(-1, -2) / math.sqrt(DH)) @ v)
    return outs


def _merge(outs: list[torch.Tensor], output: torch.nn.Linear) -> torch.Tensor:
    return torch.cat(outs, dim=-1) @ output.weight.T  # (B, T, D)


# --- grouped-query and multi-query attention --------------------------------------------

@pytest.mark.parametrize(("name", "kv_heads"), [("gqa", 2), ("gqa:group_size=4", 1), ("mqa", 1)])
def test_gqa_and_mqa_match_the_formula_head_by_head(name: str, kv_heads: int) -> None:
    torch.manual_seed(kv_heads)
    model = build_model(ModelConfig().with_slot("attention", name))
    attention = model.blocks[0].attention
    assert attention.kv_heads == kv_heads and attention.key.weight.shape == (kv_heads * DH, D)
    rope, context = _rope()
    x = torch.randn(B, T, D)
    expected = _merge(_grouped_heads(attention, x, kv_heads, rope), attention.output)
    torch.testing.assert_close(attention(x, context), expected, atol=ATOL, rtol=RTOL)


def test_gqa_with_group_one_and_mqa_are_mha_with_the_same_weights() -> None:
    torch.manual_seed(6)
    _, context = _rope()
    x = torch.randn(B, T, D)
    ungrouped = GroupedQueryAttention(GroupedQueryConfig(group_size=1), DIMS, 0)
    plain = MultiHeadAttention(MultiHeadConfig(), DIMS, 0)
    plain.load_state_dict(ungrouped.state_dict())
    torch.testing.assert_close(ungrouped(x, context), plain(x, context), atol=0.0, rtol=0.0)
    single = MultiQueryAttention(EmptyConfig(), DIMS, 0)
    one_kv = MultiHeadAttention(MultiHeadConfig(kv_heads=1), DIMS, 0)
    one_kv.load_state_dict(single.state_dict())
    torch.testing.assert_close(single(x, context), one_kv(x, context), atol=0.0, rtol=0.0)
    with pytest.raises(ConfigError, match="group_size 3 does not divide heads 4"):
        GroupedQueryAttention(GroupedQueryConfig(group_size=3), DIMS, 0)


def test_the_size_dial_keeps_gqa_at_half_the_heads_and_mqa_at_one() -> None:
    for rung in (-2, 0, 1, 2, 4):
        heads = RUNGS[rung].n_heads
        grouped = build_model(scale_model(ModelConfig().with_slot("attention", "gqa"), RUNGS[rung]))
        single = build_model(scale_model(ModelConfig().with_slot("attention", "mqa"), RUNGS[rung]))
        assert grouped.blocks[0].attention.kv_heads == heads // 2, rung
        assert single.blocks[0].attention.kv_heads == 1, rung
    with pytest.raises(ConfigError, match="gqa.group_size=2 does not divide 3 heads"):
        scale_model(ModelConfig().with_slot("attention", "gqa"), RUNGS[-1])


# --- gated attention --------------------------------------------------------------------

@pytest.mark.parametrize(("granularity", "kv_heads"), [("elementwise", 4), ("elementwise", 2),
                                                       ("headwise", 4)])
def test_gated_attn_matches_the_formula_head_by_head(granularity: str, kv_heads: int) -> None:
    torch.manual_seed(0)
    config = GatedAttentionConfig(granularity=granularity, kv_heads=kv_heads)
    attention = GatedAttention(config, DIMS, 0)
    with torch.no_grad():  # gates far from 0.5, so that a wrong gate shows
        attention.gate.weight.normal_(0.0, 0.5)
    rope, context = _rope()
    x = torch.randn(B, T, D)
    width = DH if granularity == "elementwise" else 1
    outs = []
    for h, y in enumerate(_grouped_heads(attention, x, kv_heads, rope)):
        gate = _sigmoid(x @ _rows(attention.gate.weight, h, width).T)  # (B, T, Dh or 1)
        outs.append(y * gate)
    torch.testing.assert_close(attention(x, context), _merge(outs, attention.output), atol=ATOL, rtol=RTOL)
    assert attention.gate.weight.shape == (H * width, D)


def test_gated_attn_with_a_zero_gate_is_half_of_mha() -> None:
    torch.manual_seed(1)
    gated = GatedAttention(GatedAttentionConfig(), DIMS, 0)
    plain = MultiHeadAttention(MultiHeadConfig(), DIMS, 0)
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if k != "gate.weight"})
    with torch.no_grad():
        gated.gate.weight.zero_()  # sigmoid(0) = 1/2 everywhere
    _, context = _rope()
    x = torch.randn(B, T, D)
    torch.testing.assert_close(gated(x, context), 0.5 * plain(x, context), atol=ATOL, rtol=RTOL)


def test_gated_attn_a_shut_headwise_gate_removes_its_head_per_token() -> None:
    """Head 0's gate sigmoid(1e4 x_0) is 0 where x_0 < 0 and 1 where x_0 > 0 (query-dependent):
    where it is shut, the output equals the layer with head 0's columns of W^O zeroed."""
    torch.manual_seed(2)
    gated = GatedAttention(GatedAttentionConfig(granularity="headwise"), DIMS, 0)
    _, context = _rope()
    x = torch.randn(B, T, D)
    with torch.no_grad():
        gated.gate.weight.zero_()
        gated.gate.weight[0, 0] = 1e4
        out = gated(x, context)
        gated.output.weight[:, :DH] = 0.0  # head 0's columns of W^O
        without_head0 = gated(x, context)
    shut, open_ = x[..., 0] < -0.01, x[..., 0] > 0.01
    assert shut.any() and open_.any()
    torch.testing.assert_close(out[shut], without_head0[shut], atol=ATOL, rtol=RTOL)
    assert not torch.allclose(out[open_], without_head0[open_], atol=1e-4)
