"""Attention components added together, each against formulas written out head by head:
grouped-query (2305.13245) and multi-query (1911.02150) attention, gated attention
(2505.06708), differential attention (2410.05258) and multi-head latent attention
(DeepSeek-V2, 2405.04434).

Every reference slices the layer's own weight matrices per head, multiplies them out with
explicit matmuls, builds the causal mask entry by entry and applies the paper's formula with
plain tensor ops (``exp`` for sigmoids, a written-out RMSNorm, ``math.exp`` for lambda),
never the component's helpers. Each also has a textbook limit: group size 1 is ``mha``; a
zero gate halves ``mha``; lambda 0 leaves one normalised softmax attention; full-rank MLA
without a rotary part is ``mha``.
"""

from __future__ import annotations

import math

import pytest
import torch

from llmevo.catalog import build_model
from llmevo.components.attention.diff_attn import DiffAttention, DiffAttentionConfig
from llmevo.components.attention.gated_attn import GatedAttention, GatedAttentionConfig
from llmevo.components.attention.gqa import GroupedQueryAttention, GroupedQueryConfig
from llmevo.components.attention.mha import MultiHeadAttention, MultiHeadConfig
from llmevo.components.attention.mla import LatentAttention, LatentAttentionConfig
from llmevo.components.attention.mqa import MultiQueryAttention
from llmevo.components.base import AttentionContext, ModelDims, PositionEncoding
from llmevo.components.position.alibi import AlibiConfig, AlibiPosition
from llmevo.components.position.rope import RopeConfig, RotaryPosition
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import EmptyConfig
from llmevo.runner.size import RUNGS, resize_model

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


def _rms(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain


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
        grouped = build_model(resize_model(ModelConfig().with_slot("attention", "gqa"), RUNGS[rung]))
        single = build_model(resize_model(ModelConfig().with_slot("attention", "mqa"), RUNGS[rung]))
        assert grouped.blocks[0].attention.kv_heads == heads // 2, rung
        assert single.blocks[0].attention.kv_heads == 1, rung
    with pytest.raises(ConfigError, match="gqa.group_size=2 does not divide the 3 head"):
        resize_model(ModelConfig().with_slot("attention", "gqa"), RUNGS[-1])


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


# --- differential attention -------------------------------------------------------------

def test_diff_attn_lambda_init_follows_the_papers_schedule() -> None:
    for layer in range(6):  # the paper's l = layer + 1 in 1..L
        expected = 0.8 - 0.6 * math.exp(-0.3 * ((layer + 1) - 1))
        assert DiffAttention(DiffAttentionConfig(), DIMS, layer).lambda_init == pytest.approx(expected)
    assert DiffAttention(DiffAttentionConfig(), DIMS, 0).lambda_init == pytest.approx(0.2)
    assert DiffAttention(DiffAttentionConfig(), DIMS, 100).lambda_init == pytest.approx(0.8)
    assert DiffAttention(DiffAttentionConfig(lambda_init=0.5), DIMS, 3).lambda_init == 0.5


def _diff_reference(attention: DiffAttention, x: torch.Tensor, position, lam: float,
                    lambda_init: float) -> torch.Tensor:
    """H/2 heads: (A1 - lam A2) V_i, RMS-normalised with the gain, times (1 - lambda_init)."""
    positions = torch.arange(T)
    bias = position.attention_bias(positions, positions)  # (H, T, T) or None
    outs = []
    for i in range(H // 2):
        maps = []
        for sub in (2 * i, 2 * i + 1):  # Q1/K1, then Q2/K2
            q = position.rotate(x @ _rows(attention.query.weight, sub, DH).T, positions)
            k = position.rotate(x @ _rows(attention.key.weight, sub, DH).T, positions)
            scores = q @ k.transpose(-1, -2) / math.sqrt(DH)
            maps.append(_softmax_rows(scores if bias is None else scores + bias[sub]))
        v = x @ _rows(attention.value.weight, i, 2 * DH).T  # (B, T, 2 Dh)
        head = (maps[0] - lam * maps[1]) @ v
        outs.append(_rms(head, attention.head_norm, 1e-5) * (1.0 - lambda_init))
    return _merge(outs, attention.output)


@pytest.mark.parametrize(("layer", "position_name"), [(0, "rope"), (1, "rope"), (3, "alibi")])
def test_diff_attn_matches_the_formula_head_by_head(layer: int, position_name: str) -> None:
    torch.manual_seed(layer)
    attention = DiffAttention(DiffAttentionConfig(), DIMS, layer)
    with torch.no_grad():  # a lambda well away from lambda_init and a non-trivial gain
        attention.lambda_q1.uniform_(0.1, 0.3)  # q1 . k1 about 0.64
        attention.lambda_k1.uniform_(0.1, 0.3)
        attention.lambda_q2.normal_(0.0, 0.2)
        attention.lambda_k2.normal_(0.0, 0.2)
        attention.head_norm.uniform_(0.5, 2.0)
    position = RotaryPosition(RopeConfig(), DIMS) if position_name == "rope" else AlibiPosition(AlibiConfig(), DIMS)
    context = AttentionContext(positions=torch.arange(T), position=position)
    x = torch.randn(B, T, D)
    lambda_init = 0.8 - 0.6 * math.exp(-0.3 * layer)
    q1, k1 = attention.lambda_q1.tolist(), attention.lambda_k1.tolist()
    q2, k2 = attention.lambda_q2.tolist(), attention.lambda_k2.tolist()
    lam = (math.exp(sum(a * b for a, b in zip(q1, k1, strict=True)))
           - math.exp(sum(a * b for a, b in zip(q2, k2, strict=True))) + lambda_init)
    assert abs(lam - lambda_init) > 0.3
    assert attention.lambda_full().item() == pytest.approx(lam, rel=1e-5)
    expected = _diff_reference(attention, x, position, lam, lambda_init)
    torch.testing.assert_close(attention(x, context), expected, atol=ATOL, rtol=RTOL)


def test_diff_attn_with_lambda_zero_is_a_scaled_normalised_softmax_attention() -> None:
    """lambda = exp(q1.k1) - exp(q2.k2) + lambda_init = 0 when q2.k2 = 0 and
    exp(q1.k1) = 1 - lambda_init: only the first map is left."""
    torch.manual_seed(3)
    attention = DiffAttention(DiffAttentionConfig(), DIMS, 1)
    lambda_init = attention.lambda_init
    with torch.no_grad():
        for vector in (attention.lambda_q1, attention.lambda_k1, attention.lambda_q2, attention.lambda_k2):
            vector.zero_()
        attention.lambda_q1[0] = math.log(1.0 - lambda_init)
        attention.lambda_k1[0] = 1.0
    assert attention.lambda_full().item() == pytest.approx(0.0, abs=1e-6)
    rope, context = _rope()
    x = torch.randn(B, T, D)
    positions = torch.arange(T)
    outs = []
    for i in range(H // 2):  # softmax(Q1 K1^T / sqrt(Dh)) V, nothing subtracted
        q = rope.rotate(x @ _rows(attention.query.weight, 2 * i, DH).T, positions)
        k = rope.rotate(x @ _rows(attention.key.weight, 2 * i, DH).T, positions)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(DH)).masked_fill(~_hand_mask(T), float("-inf"))
        head = scores.softmax(-1) @ (x @ _rows(attention.value.weight, i, 2 * DH).T)
        outs.append((1.0 - lambda_init) * head / head.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt())
    torch.testing.assert_close(attention(x, context), _merge(outs, attention.output), atol=ATOL, rtol=RTOL)


def test_diff_attn_keeps_mha_projection_sizes_and_needs_even_heads() -> None:
    attention = DiffAttention(DiffAttentionConfig(), DIMS, 0)
    plain = MultiHeadAttention(MultiHeadConfig(), DIMS, 0)
    extra = sum(p.numel() for p in attention.parameters()) - sum(p.numel() for p in plain.parameters())
    assert extra == 4 * DH + 2 * DH  # four lambda vectors and the norm's gain
    with pytest.raises(ConfigError, match="heads 3 must be even"):
        DiffAttention(DiffAttentionConfig(), ModelDims(16, 48, 2, 3, 32), 0)


# --- multi-head latent attention --------------------------------------------------------

def _mla_reference(attention: LatentAttention, x: torch.Tensor, position, q_rank: int | None,
                   eps: float) -> torch.Tensor:
    """DeepSeek-V2's MLA written per head (the rotary part before the content part)."""
    positions = torch.arange(T)
    latent = _rms(x @ attention.kv_down.weight.T, attention.kv_norm, eps)  # c^KV
    key_rope = position.rotate(x @ attention.key_rope.weight.T, positions)  # k^R, shared
    query_latent = x if q_rank is None else _rms(x @ attention.query_down.weight.T, attention.query_norm, eps)
    bias = position.attention_bias(positions, positions)
    outs = []
    for h in range(H):
        k_content = latent @ _rows(attention.key_up.weight, h, DH).T
        v = latent @ _rows(attention.value_up.weight, h, DH).T
        q_content = query_latent @ _rows(attention.query_up.weight, h, DH).T
        q_rope = position.rotate(query_latent @ _rows(attention.query_rope.weight, h, DH).T, positions)
        scores = (q_content @ k_content.transpose(-1, -2) + q_rope @ key_rope.transpose(-1, -2))
        scores = scores / math.sqrt(DH + DH)  # sqrt(d_h + d_h^R)
        if bias is not None:
            scores = scores + bias[h]
        outs.append(_softmax_rows(scores) @ v)
    return _merge(outs, attention.output)


@pytest.mark.parametrize(("q_rank", "kv_rank", "position_name"), [(None, 16, "rope"), (32, 8, "rope"),
                                                                  (None, 16, "alibi")])
def test_mla_matches_the_formulas_head_by_head(q_rank: int | None, kv_rank: int, position_name: str) -> None:
    torch.manual_seed(kv_rank)
    attention = LatentAttention(LatentAttentionConfig(kv_rank=kv_rank, q_rank=q_rank), DIMS, 0)
    with torch.no_grad():  # non-trivial latent gains
        attention.kv_norm.uniform_(0.5, 2.0)
        if attention.query_norm is not None:
            attention.query_norm.uniform_(0.5, 2.0)
    position = RotaryPosition(RopeConfig(), DIMS) if position_name == "rope" else AlibiPosition(AlibiConfig(), DIMS)
    context = AttentionContext(positions=torch.arange(T), position=position)
    x = torch.randn(B, T, D)
    expected = _mla_reference(attention, x, position, q_rank, 1e-6)
    torch.testing.assert_close(attention(x, context), expected, atol=ATOL, rtol=RTOL)
    assert attention.kv_down.weight.shape == (kv_rank, D)


def test_mla_at_full_rank_without_a_rotary_part_is_mha() -> None:
    """kv_rank = d_model with W^DKV = I on unit-RMS inputs: c^KV = x, so k = W^UK x and
    v = W^UV x; with W^QR = W^KR = 0 the scores are q^C k^C / sqrt(Dh + Dr): ``mha`` with
    W^Q = W^UQ sqrt(Dh / (Dh + Dr)) and no positions."""
    torch.manual_seed(4)
    latent = LatentAttention(LatentAttentionConfig(kv_rank=D, eps=1e-12), DIMS, 0)
    plain = MultiHeadAttention(MultiHeadConfig(), DIMS, 0)
    with torch.no_grad():
        latent.kv_down.weight.copy_(torch.eye(D))
        latent.key_rope.weight.zero_()
        latent.query_rope.weight.zero_()
        plain.query.weight.copy_(latent.query_up.weight * math.sqrt(DH / (DH + DH)))
        plain.key.weight.copy_(latent.key_up.weight)
        plain.value.weight.copy_(latent.value_up.weight)
        plain.output.weight.copy_(latent.output.weight)
    x = torch.randn(B, T, D)
    x = x / x.pow(2).mean(-1, keepdim=True).sqrt()  # unit RMS: the latent's RMSNorm is the identity
    context = AttentionContext(positions=torch.arange(T), position=PositionEncoding())
    torch.testing.assert_close(latent(x, context), plain(x, context), atol=ATOL, rtol=RTOL)


def test_mla_positions_enter_only_through_the_decoupled_rotary_part() -> None:
    """RoPE on k^R/q^R only: with them zeroed the output ignores positions entirely (the
    content part is not rotated); with them it depends on positions, but only relatively."""
    torch.manual_seed(5)
    attention = LatentAttention(LatentAttentionConfig(), DIMS, 0)
    rope = RotaryPosition(RopeConfig(), DIMS)
    x = torch.randn(B, T, D)

    def run(positions: torch.Tensor) -> torch.Tensor:
        return attention(x, AttentionContext(positions=positions, position=rope))

    with torch.no_grad():
        base, shifted, stretched = run(torch.arange(T)), run(torch.arange(T) + 7), run(torch.arange(T) * 3)
        torch.testing.assert_close(shifted, base, atol=ATOL, rtol=RTOL)  # relative positions only
        assert not torch.allclose(stretched, base, atol=1e-4)
        attention.key_rope.weight.zero_()
        attention.query_rope.weight.zero_()
        torch.testing.assert_close(run(torch.arange(T) * 3), run(torch.arange(T)), atol=ATOL, rtol=RTOL)


def test_mla_matches_mha_parameter_count_at_quick() -> None:
    attention = LatentAttention(LatentAttentionConfig(), DIMS, 0)
    kv_rank = 16
    by_hand = D * kv_rank + kv_rank + 2 * kv_rank * D + D * DH + D * 2 * D + D * D
    assert sum(p.numel() for p in attention.parameters()) == by_hand == 4 * D * D + 16


def test_the_size_dial_scales_mla_latents_with_the_width() -> None:
    latent = resize_model(ModelConfig().with_slot("attention", "mla:q_rank=32"), RUNGS[1])  # d 64 -> 96
    assert latent.attention.config == {"kv_rank": 24, "q_rank": 48}
    assert build_model(latent).blocks[0].attention.kv_down.weight.shape == (24, 96)
