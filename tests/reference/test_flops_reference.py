"""The counted training FLOPs per token (``runner.flops``) against hand counts.

References: a matrix product of an (n, k) input by a (k, m) weight costs 2·n·k·m FLOPs
forward and twice that backward (the gradients of the input and of the weight), so a weight
matrix of N entries costs 6·N per token in training (Kaplan et al., arXiv 2001.08361, section
2.1); attention over a window of T adds the scores (Q·Kᵀ) and their use (A·V), 2·T·d each
forward per layer and token, so 12·L·T·d in training (PaLM, arXiv 2204.02311, appendix B:
6N + 12·L·H·Q·T). The weight counts below are written from the model's sizes by hand, not
read from the model, so a count off by a factor (forward only, a missed backward, attention
not counted on the CPU's fused kernel, all experts counted as active) fails.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from llmevo.catalog import build_model
from llmevo.model.config import ModelConfig
from llmevo.runner.flops import count_flops_per_token, flops_ratio, matched_steps


def _batch(vocab: int, batch: int, window: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, window + 1), generator=generator)  # (B, T + 1)


class _TinyMLPLM(nn.Module):
    """Embedding -> Linear(d, h) -> ReLU -> Linear(h, V): two weight matrices."""

    def __init__(self, vocab: int, d: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.up = nn.Linear(d, hidden, bias=False)
        self.out = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, V)
        return self.out(torch.relu(self.up(self.embed(tokens))))


def test_a_plain_mlp_costs_six_flops_per_weight_per_token():
    vocab, d, hidden = 40, 12, 20
    count = count_flops_per_token(_TinyMLPLM(vocab, d, hidden), _batch(vocab, 3, 7))
    weights = d * hidden + hidden * vocab  # the embedding is a lookup, not a product
    assert count.computed == count.counted == 6 * weights


def _transformer_flops(d: int, layers: int, hidden: int, vocab: int, window: int, kv_dim: int | None = None) -> int:
    """6·N + 12·L·T·d for llama_modern: per layer Q and O (d x d), K and V (d x kv_dim), a
    SwiGLU's three d x hidden matrices; the tied output head V x d."""
    kv_dim = d if kv_dim is None else kv_dim
    per_layer = 2 * d * d + 2 * d * kv_dim + 3 * d * hidden
    weights = layers * per_layer + vocab * d
    return 6 * weights + 12 * layers * window * d


@pytest.mark.parametrize(("d", "layers", "heads", "hidden", "window"), [
    (64, 2, 4, 192, 64),  # quick's llama_modern: 6 x 139,264 + 12 x 2 x 64 x 64
    (32, 3, 2, 80, 16),
])
def test_llama_modern_matches_six_n_plus_twelve_l_t_d(d, layers, heads, hidden, window):
    config = ModelConfig(d_model=d, n_layers=layers, n_heads=heads, max_seq_len=window,
                         attention=f"mha:kv_heads={heads}", feedforward=f"swiglu:hidden={hidden}")
    count = count_flops_per_token(build_model(config), _batch(config.vocab_size, 2, window))
    assert count.counted == count.computed == _transformer_flops(d, layers, hidden, config.vocab_size, window)


def test_the_default_model_by_its_published_numbers():
    count = count_flops_per_token(build_model(ModelConfig()), _batch(512, 4, 64))
    assert count.counted == 6 * 139_264 + 12 * 2 * 64 * 64 == 933_888  # 139,264: 139,584 less 5 norms of 64


def test_grouped_kv_heads_count_their_narrower_projections():
    config = ModelConfig(attention="gqa:group_size=2")  # 2 kv heads of 16: K and V project to 32
    count = count_flops_per_token(build_model(config), _batch(512, 2, 64))
    assert count.counted == _transformer_flops(64, 2, 192, 512, 64, kv_dim=32)


def test_a_mixture_of_experts_counts_its_active_experts_and_router():
    experts, top_k, hidden = 4, 2, 24
    config = ModelConfig(d_model=32, n_heads=2, max_seq_len=16, attention="mha:kv_heads=2",
                         feedforward=f"moe:experts={experts},top_k={top_k},hidden={hidden}")
    count = count_flops_per_token(build_model(config), _batch(512, 2, 16))
    attention_and_head = _transformer_flops(32, 2, 0, 512, 16)  # no feed-forward
    router = 6 * 2 * 32 * experts
    expert = 6 * 2 * 3 * 32 * hidden  # one SwiGLU expert in each of 2 layers
    assert count.computed == attention_and_head + router + experts * expert  # every expert runs here
    assert count.counted == attention_and_head + router + top_k * expert  # a token's top-k


def test_counting_leaves_the_model_and_the_generator_as_they_were():
    model = build_model(ModelConfig(d_model=32, n_heads=2, max_seq_len=16, attention="mha:kv_heads=2"))
    state = torch.random.get_rng_state()
    count_flops_per_token(model, _batch(512, 2, 16))
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(state, torch.random.get_rng_state())


def test_twice_the_flops_per_token_trains_half_the_steps():
    assert matched_steps(300, 1.0e6, 2.0e6) == 150
    assert matched_steps(300, 2.0e6, 1.0e6) == 600
    assert matched_steps(12, 933_888, 983_040) == 11  # mla at smoke: 12 x 0.95 = 11.4
    assert matched_steps(330, 933_888, 860_160) == 358  # mqa at quick: 330 x 1.0857 = 358.3
    assert matched_steps(3, 1.0, 100.0) == 1  # never zero steps
    assert flops_ratio(300, 1.0e6, 150, 2.0e6) == 1.0
    assert flops_ratio(12, 933_888, 11, 983_040) == pytest.approx(11 * 983_040 / (12 * 933_888))
