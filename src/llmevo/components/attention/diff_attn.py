"""Differential attention: the difference of two softmax maps, scaled by a learned lambda.

Ye et al., "Differential Transformer", arXiv 2410.05258 (section 2.1: differential attention,
the lambda reparameterisation and its schedule; section 2.2: multi-head differential
attention with per-head normalisation). Per head,
``[Q1; Q2] = X W^Q``, ``[K1; K2] = X W^K``, ``V = X W^V`` and

    DiffAttn(X) = (softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d))) V,
    lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init,
    lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1)),  l = layer_index + 1 in 1..L;

then each head is normalised on its own (``head_i' = (1 - lambda_init) Norm(head_i)``) and
the heads are concatenated into ``W^O``. Subtracting the second map cancels attention mass
that both maps put on irrelevant context ("attention noise"). Reference test: the formulas
head by head with explicit softmaxes, ``math.exp`` for lambda and the schedule's values,
and lambda = 0 reducing to ``(1 - lambda_init)`` times a normalised softmax attention
(tests/reference/test_attention_new_reference.py).

Parameters (kept comparable as in the paper, section 2.2: ``h = d_model / 2d`` heads): with
``heads`` = H and head dimension Dh = d_model / H, the layer has H / 2 differential heads,
each with Q1, Q2, K1, K2 of width Dh (the query and key projections are ``mha``'s d_model x
d_model, read as H sub-heads of Dh: sub-heads 2i and 2i + 1 are head i's Q1/K1 and Q2/K2)
and a value of width 2 Dh (``mha``'s d_model x d_model value projection, read as H / 2 heads
of 2 Dh). So the four projections equal ``mha``'s; the additions are the four lambda vectors
(Dh each, shared by the layer's heads) and the norm's gain (2 Dh): 4 x 16 + 32 = 96
parameters per layer at quick. RoPE (the position slot) rotates each Dh-wide sub-head, as in
the paper's code; a score bias (ALiBi) is added to each of the two maps of its sub-head.

Deviations: the per-head norm is RMSNorm with one learned gain of width 2 Dh shared by the
heads (the paper's code, ``subln``; the text says GroupNorm, i.e. LayerNorm per head);
the lambda vectors are initialised N(0, 0.1) as in that code; ``lambda_init`` (a constant, as
in the paper's ablation of the schedule) replaces the depth schedule when given. No key/value
grouping (every head has its own keys and values); needs an even number of heads.
"""

from __future__ import annotations

import math

import torch
from pydantic import PositiveFloat
from torch import Tensor, nn

from llmevo.components.attention.mha import CausalSelfAttention
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.components.norm.rmsnorm import rms_norm
from llmevo.errors import ConfigError
from llmevo.registry import Paper, SearchDimension, StrictModel, register

LAMBDA_STD = 0.1  # the reparameterisation vectors' init (the paper's code)


class DiffAttentionConfig(StrictModel):
    lambda_init: float | None = None  # None: 0.8 - 0.6 exp(-0.3 (l - 1)) by layer
    eps: PositiveFloat = 1e-5  # of the per-head RMSNorm (the paper's code)


def lambda_init_schedule(layer_index: int) -> float:
    """``0.8 - 0.6 exp(-0.3 (l - 1))`` with ``l = layer_index + 1``: 0.2 at the first layer, -> 0.8."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer_index)


@register(
    slot="attention",
    name="diff_attn",
    config=DiffAttentionConfig,
    paper=Paper(
        arxiv_id="2410.05258",
        title="Differential Transformer",
        url="https://arxiv.org/abs/2410.05258",
        organization="Microsoft Research; Tsinghua University",
    ),
    ablation="mha",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Differential attention (heads / 2 differential heads, learned lambda with the depth "
        "schedule, per-head RMSNorm and the (1 - lambda_init) scale) in a 2-layer LM at mha's "
        "projection sizes, compared with plain attention; not the paper's 3B-13B models, "
        "long-context retrieval or activation-outlier studies."
    ),
    search_space={"lambda_init": SearchDimension(choices=(None, 0.5, 0.8))},  # None: the schedule
)
class DiffAttention(CausalSelfAttention):
    def __init__(self, config: DiffAttentionConfig, dims: ModelDims, layer_index: int):
        if dims.n_heads % 2:
            raise ConfigError(
                f"diff_attn: heads {dims.n_heads} must be even (each differential head is two "
                "query/key sub-heads)"
            )
        super().__init__(dims, kv_heads=None)
        self.pairs = self.n_heads // 2
        self.eps = config.eps
        self.lambda_init = (
            lambda_init_schedule(layer_index) if config.lambda_init is None else config.lambda_init
        )
        self.lambda_q1 = nn.Parameter(torch.randn(self.head_dim) * LAMBDA_STD)
        self.lambda_k1 = nn.Parameter(torch.randn(self.head_dim) * LAMBDA_STD)
        self.lambda_q2 = nn.Parameter(torch.randn(self.head_dim) * LAMBDA_STD)
        self.lambda_k2 = nn.Parameter(torch.randn(self.head_dim) * LAMBDA_STD)
        self.head_norm = nn.Parameter(torch.ones(2 * self.head_dim))

    def lambda_full(self) -> Tensor:
        """``exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init`` (a scalar)."""
        first = torch.exp(torch.dot(self.lambda_q1, self.lambda_k1))
        second = torch.exp(torch.dot(self.lambda_q2, self.lambda_k2))
        return first - second + self.lambda_init

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, context: AttentionContext, k_positions: Tensor
    ) -> Tensor:
        """(A1 - lambda A2) V per differential head, normalised and scaled -> (B, H/2, Tq, 2Dh).

        q, k: (B, H, T, Dh) sub-heads (2i: head i's Q1/K1, 2i + 1: its Q2/K2); v: (B, H, S, Dh),
        whose channel pairs (2i, 2i + 1) are head i's 2Dh-wide value.
        """
        batch, _, n_keys, _ = v.shape
        n_queries = q.shape[2]
        values = v.transpose(1, 2).reshape(batch, n_keys, self.pairs, 2 * self.head_dim)
        values = values.transpose(1, 2)  # (B, H/2, S, 2Dh)
        # both maps of head i against its value: A1 V and A2 V in one fused call
        both = super().attend(q, k, values.repeat_interleave(2, dim=1), context, k_positions)
        first, second = both.view(batch, self.pairs, 2, n_queries, 2 * self.head_dim).unbind(2)
        heads = first - self.lambda_full() * second  # (B, H/2, Tq, 2Dh)
        return rms_norm(heads, self.head_norm, self.eps) * (1.0 - self.lambda_init)
