"""Attention variants that change the scores or the mask, against formulas written head by head:
soft-capping (Gemma 2, 2408.00118), sliding-window attention (Longformer 2004.05150 / Mistral
2310.06825) and sigmoid attention (2409.04431).

Every reference computes ``q_h k_h^T / sqrt(Dh)`` for one head at a time from the layer's own
projections (explicit matmuls; each key/value head shared by its group of query heads), then
applies the paper's formula with plain tensor ops (or Python floats) under a mask built entry
by entry, never the component's helpers.
"""

from __future__ import annotations

import math

import pytest
import torch

from llmevo.catalog import build_model
from llmevo.components.attention.sigmoid_attn import SigmoidAttention, SigmoidAttentionConfig
from llmevo.components.attention.sliding_window import (
    SlidingWindowAttention,
    SlidingWindowConfig,
)
from llmevo.components.attention.softcap import SoftcapAttention, SoftcapConfig
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.components.position.alibi import AlibiConfig, AlibiPosition
from llmevo.components.position.rope import RopeConfig, RotaryPosition
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig

DIMS = ModelDims(vocab_size=16, d_model=64, n_layers=2, n_heads=4, max_seq_len=32)
B, T, H, DH = 2, 9, 4, 16


def _heads(linear: torch.nn.Linear, x: torch.Tensor, n: int) -> list[torch.Tensor]:
    projected = x @ linear.weight.T  # (B, T, n * Dh)
    return [projected[..., h * DH : (h + 1) * DH] for h in range(n)]


def _hand_mask(n_queries: int, n_keys: int, window: int | None) -> torch.Tensor:
    """(Tq, Tk) bool, entry by entry: query i sits at position n_keys - n_queries + i."""
    mask = torch.zeros(n_queries, n_keys, dtype=torch.bool)
    for i in range(n_queries):
        position = n_keys - n_queries + i
        for j in range(n_keys):
            visible = j <= position and (window is None or position - j < window)
            mask[i, j] = visible
    return mask


def _per_head_scores(attention, x: torch.Tensor, position, kv_heads: int) -> list[tuple]:
    """[(scores (B, T, T), v)] per query head, with q and k rotated by ``position``."""
    positions = torch.arange(T)
    q = [position.rotate(h, positions) for h in _heads(attention.query, x, H)]
    k = [position.rotate(h, positions) for h in _heads(attention.key, x, kv_heads)]
    v = _heads(attention.value, x, kv_heads)
    group = H // kv_heads
    return [((qh @ k[h // group].transpose(-1, -2)) / math.sqrt(DH), v[h // group])
            for h, qh in enumerate(q)]


def _merge(outs: list[torch.Tensor], attention) -> torch.Tensor:
    return torch.cat(outs, dim=-1) @ attention.output.weight.T  # (B, T, D)


def _rope_context() -> tuple[RotaryPosition, AttentionContext]:
    rope = RotaryPosition(RopeConfig(), DIMS)
    return rope, AttentionContext(positions=torch.arange(T), position=rope)


# --- soft-capping -----------------------------------------------------------------------

@pytest.mark.parametrize(("kv_heads", "cap"), [(4, 0.7), (2, 2.0), (1, 50.0)])
def test_softcap_matches_the_formula_head_by_head(kv_heads: int, cap: float) -> None:
    torch.manual_seed(kv_heads)
    attention = SoftcapAttention(SoftcapConfig(kv_heads=kv_heads, cap=cap), DIMS, 0)
    rope, context = _rope_context()
    x = torch.randn(B, T, 64) * 4.0  # large logits, so that a small cap binds
    mask = _hand_mask(T, T, None)
    outs = []
    for scores, v in _per_head_scores(attention, x, rope, kv_heads):
        capped = cap * torch.tanh(scores / cap)
        outs.append(capped.masked_fill(~mask, float("-inf")).softmax(-1) @ v)
    torch.testing.assert_close(attention(x, context), _merge(outs, attention), atol=1e-5, rtol=1e-4)


def test_softcap_bounds_the_logits_and_has_plain_attention_as_its_limit() -> None:
    torch.manual_seed(0)
    x = torch.randn(B, T, 64)
    rope, context = _rope_context()
    capped = SoftcapAttention(SoftcapConfig(cap=1.5), DIMS, 0)
    q, k, _ = capped.project(x * 50.0, context)
    logits = capped.logits(q, k, context, context.positions)
    assert logits.abs().max() > 10.0  # the raw scores exceed the cap ...
    bounded = 1.5 * torch.tanh(logits / 1.5)
    assert bounded.abs().max() <= 1.5  # ... the capped ones never do

    huge = SoftcapAttention(SoftcapConfig(cap=1e6), DIMS, 0)
    plain = build_model(ModelConfig()).blocks[0].attention  # mha with the same shapes
    plain.load_state_dict(huge.state_dict())
    torch.testing.assert_close(huge(x, context), plain(x, context), atol=1e-5, rtol=1e-4)


def test_softcap_at_50_is_nearly_the_identity_at_our_scale() -> None:
    """The docstring's claim: at initialisation llama_modern's logits have a std of about 0.03,
    so cap 50 changes them by less than x^3 / (3 cap^2)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig().with_slot("attention", "softcap"))
    tokens = torch.randint(0, 512, (4, 64), generator=torch.Generator().manual_seed(0))
    block = model.blocks[0]
    x = block.attention_norm(model.embedding(tokens))
    context = AttentionContext(positions=torch.arange(64), position=model.position)
    q, k, _ = block.attention.project(x, context)
    logits = block.attention.logits(q, k, context, context.positions)
    assert 0.01 < logits.std().item() < 0.1
    change = (50.0 * torch.tanh(logits / 50.0) - logits).abs().max().item()
    assert change <= logits.abs().max().item() ** 3 / (3 * 50.0**2) + 1e-6
    assert change < 1e-3


# --- sliding window ---------------------------------------------------------------------

def test_sliding_window_mask_is_the_hand_mask() -> None:
    from llmevo.components.attention.sliding_window import sliding_window_mask

    for window in (1, 3, 9, 20):
        got = sliding_window_mask(torch.arange(T), torch.arange(T), window)
        assert torch.equal(got, _hand_mask(T, T, window)), window
    # cached decoding: 2 new queries at positions 7, 8 over keys 0..8
    got = sliding_window_mask(torch.arange(7, 9), torch.arange(9), 3)
    assert got.tolist() == [[False] * 5 + [True] * 3 + [False], [False] * 6 + [True] * 3]


@pytest.mark.parametrize(("kv_heads", "window"), [(4, 3), (2, 1), (1, 5)])
def test_sliding_window_matches_softmax_under_the_hand_mask(kv_heads: int, window: int) -> None:
    torch.manual_seed(window)
    attention = SlidingWindowAttention(SlidingWindowConfig(kv_heads=kv_heads, window=window), DIMS, 0)
    rope, context = _rope_context()
    x = torch.randn(B, T, 64)
    mask = _hand_mask(T, T, window)
    outs = [scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
            for scores, v in _per_head_scores(attention, x, rope, kv_heads)]
    torch.testing.assert_close(attention(x, context), _merge(outs, attention), atol=1e-5, rtol=1e-4)
    if window == 1:  # each query sees only itself: the output is its own value, projected
        v = _heads(attention.value, x, kv_heads)
        own = _merge([v[h // (H // kv_heads)] for h in range(H)], attention)
        torch.testing.assert_close(attention(x, context), own, atol=1e-5, rtol=1e-4)


def test_sliding_window_adds_a_position_bias_inside_the_window() -> None:
    torch.manual_seed(1)
    attention = SlidingWindowAttention(SlidingWindowConfig(window=4), DIMS, 0)
    alibi = AlibiPosition(AlibiConfig(), DIMS)
    context = AttentionContext(positions=torch.arange(T), position=alibi)
    x = torch.randn(B, T, 64)
    bias = alibi.attention_bias(torch.arange(T), torch.arange(T))  # (H, T, T)
    mask = _hand_mask(T, T, 4)
    outs = [(scores + bias[h]).masked_fill(~mask, float("-inf")).softmax(-1) @ v
            for h, (scores, v) in enumerate(_per_head_scores(attention, x, alibi, 4))]
    torch.testing.assert_close(attention(x, context), _merge(outs, attention), atol=1e-5, rtol=1e-4)


def test_sliding_window_covering_the_sequence_is_full_causal_attention() -> None:
    torch.manual_seed(0)
    windowed = build_model(ModelConfig().with_slot("attention", "sliding_window:window=64")).eval()
    full = build_model(ModelConfig()).eval()
    full.load_state_dict(windowed.state_dict())
    tokens = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(windowed(tokens), full(tokens), atol=1e-5, rtol=1e-4)
        narrow = build_model(ModelConfig().with_slot("attention", "sliding_window:window=8")).eval()
        narrow.load_state_dict(windowed.state_dict())
        # the first 8 positions see their whole prefix either way; later ones do not
        torch.testing.assert_close(narrow(tokens)[:, :8], full(tokens)[:, :8], atol=1e-5, rtol=1e-4)
        assert not torch.allclose(narrow(tokens)[:, 20:], full(tokens)[:, 20:])


def test_sliding_window_cached_decoding_past_the_window_matches_the_full_forward() -> None:
    """The contract suite decodes 12 tokens (inside the default window); here window 3."""
    torch.manual_seed(0)
    model = build_model(ModelConfig().with_slot("attention", "sliding_window:window=3")).eval()
    tokens = torch.randint(0, 512, (2, 14), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        caches = model.new_caches()
        prefix = model(tokens[:, :6], caches=caches)
        steps = [model(tokens[:, t : t + 1], caches=caches) for t in range(6, 14)]
    torch.testing.assert_close(torch.cat([prefix, *steps], dim=1), full, rtol=1e-4, atol=1e-5)


# --- sigmoid attention ------------------------------------------------------------------

@pytest.mark.parametrize("kv_heads", [4, 2])
def test_sigmoid_attention_matches_the_formula_head_by_head(kv_heads: int) -> None:
    torch.manual_seed(kv_heads)
    attention = SigmoidAttention(SigmoidAttentionConfig(kv_heads=kv_heads), DIMS, 0)
    assert attention.bias == pytest.approx(-math.log(32))  # b = -log(n), n = max_seq_len
    rope, context = _rope_context()
    x = torch.randn(B, T, 64)
    mask = _hand_mask(T, T, None)
    outs = []
    for scores, v in _per_head_scores(attention, x, rope, kv_heads):
        weights = 1.0 / (1.0 + torch.exp(-(scores - math.log(32))))
        outs.append(torch.where(mask, weights, torch.zeros(())) @ v)
    torch.testing.assert_close(attention(x, context), _merge(outs, attention), atol=1e-5, rtol=1e-4)


def test_sigmoid_attention_weights_are_not_normalised_and_follow_the_bias() -> None:
    """One query, two visible keys with scores 0 and log 2, bias b: the weights are the two
    sigmoids in Python floats (they need not sum to 1, unlike softmax's 1/3 and 2/3)."""
    from llmevo.components.attention.sigmoid_attn import sigmoid_attention_weights

    logits = torch.tensor([[[[0.0, math.log(2.0), 5.0]]]])  # (1, 1, 1, 3): the third is masked
    allowed = torch.tensor([[True, True, False]])
    for b in (0.0, -math.log(64)):
        got = sigmoid_attention_weights(logits, allowed, b).flatten().tolist()
        expected = [1 / (1 + math.exp(-b)), 1 / (1 + math.exp(-(math.log(2.0) + b))), 0.0]
        assert got == pytest.approx(expected, abs=1e-7)
    explicit = SigmoidAttention(SigmoidAttentionConfig(bias=-1.5), DIMS, 0)
    assert explicit.bias == -1.5


def test_sigmoid_attention_bias_is_fixed_by_the_context_length_not_the_prompt() -> None:
    """Cached decoding equals the full forward only because b does not depend on the number
    of keys: the full 14-token forward and a 6 + 1 + ... cached run agree."""
    torch.manual_seed(0)
    model = build_model(ModelConfig().with_slot("attention", "sigmoid_attn")).eval()
    assert model.blocks[0].attention.bias == pytest.approx(-math.log(64))
    tokens = torch.randint(0, 512, (2, 14), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        caches = model.new_caches()
        steps = [model(tokens[:, :6], caches=caches)]
        steps += [model(tokens[:, t : t + 1], caches=caches) for t in range(6, 14)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("choice", "message"), [
    ("sliding_window:window=0", "attention component 'sliding_window': window: Input should be greater than 0"),
    ("softcap:cap=0", "attention component 'softcap': cap: Input should be greater than 0"),
    ("sigmoid_attn:bias=NaN", "attention component 'sigmoid_attn': bias"),
    ("softcap:kv_heads=3", "kv_heads 3 does not divide heads 4"),
])
def test_bad_settings_are_one_line_config_errors(choice: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_model(ModelConfig().with_slot("attention", choice))


def test_the_default_cap_binds_on_the_logits_training_grows() -> None:
    """The default cap (10) changes the measured tail of trained quick logits (99.9th
    percentile 10-14, max 15-22; docs/LOG.md 2026-12-04) by a fifth or more and the typical
    ones (|x| ~ 2) by under 5%; Gemma 2's 50 changes it by under 6%."""
    from llmevo.components.attention.softcap import soft_cap

    cap = SoftcapConfig().cap
    tail, typical = torch.tensor([14.0, 21.5]), torch.tensor(2.0)
    assert torch.allclose(soft_cap(tail, cap), cap * torch.tanh(tail / cap))
    assert ((tail - soft_cap(tail, cap)) / tail).min() > 0.2
    assert (typical - soft_cap(typical, cap)) / typical < 0.05
    assert ((tail - soft_cap(tail, 50.0)) / tail).max() < 0.06
