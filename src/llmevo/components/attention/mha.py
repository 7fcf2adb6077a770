"""Causal multi-head attention with grouped key/value heads.

Vaswani et al., "Attention Is All You Need", arXiv 1706.03762 (multi-head attention);
Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
Checkpoints", arXiv 2305.13245 (``kv_heads`` < ``heads``; ``kv_heads = 1`` is multi-query
attention, Shazeer 2019, arXiv 1911.02150). Reference test: an explicit
softmax(QK^T / sqrt(d) + mask) V computed head by head, with each key/value head shared by
its group of query heads.

Subclasses override one step (``project``, ``attend``, ``gate_heads``) rather than copying ``forward``;
``logits`` and ``expand_kv`` are the explicit score path of those that change the scores.
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar

import torch
import torch.nn.functional as F
from pydantic import PositiveInt
from torch import Tensor, nn

from llmevo.components.base import Attention, AttentionContext, ModelDims, SpelledOneWay
from llmevo.errors import ConfigError
from llmevo.registry import Paper, Scaling, SearchDimension, register


class KVHeadsConfig(SpelledOneWay):
    """An attention config with ``kv_heads``: None builds one key/value head per query head,
    the same network as ``kv_heads`` = heads. Its canonical spelling is None (the default
    these configs are written with), except ``mha``'s, which spells the count (llama_modern's
    own genome writes ``mha:kv_heads=4``): the spellings the arm cache already held keep
    their keys."""

    kv_heads: Annotated[PositiveInt | None, Scaling.HEADS] = None  # None: one key/value head per query head
    spells_heads: ClassVar[bool] = False  # canonical: the count (True) or None (False)

    def canonical(self, dims: ModelDims) -> KVHeadsConfig:
        full = self.kv_heads in (None, dims.n_heads)
        if not full:
            return self
        return self.model_copy(update={"kv_heads": dims.n_heads if self.spells_heads else None})


class MultiHeadConfig(KVHeadsConfig):
    spells_heads: ClassVar[bool] = True


def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> Tensor:
    """(Tq, Tk) bool mask: query i (the last Tq of Tk positions) sees keys 0..Tk-Tq+i."""
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(
        diagonal=n_keys - n_queries
    )


def expand_kv(kv: Tensor, n_heads: int) -> Tensor:
    """(B, Hk, S, Dh) -> (B, H, S, Dh): each key/value head repeated for its group of query heads."""
    return kv.repeat_interleave(n_heads // kv.shape[1], dim=1)


class SoftmaxAttention(Attention):
    """The steps after the projections, shared by every softmax attention: the cache, causal
    softmax attention (``attend``), ``gate_heads`` on the heads' outputs, the output projection.
    Subclasses set ``n_heads``, ``kv_heads``, ``head_dim``, ``scale`` and ``output`` and define
    ``project``."""

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, context: AttentionContext, k_positions: Tensor
    ) -> Tensor:
        """softmax(q k^T * scale + bias, causal) v  ->  (B, H, Tq, Dh); scale None: 1 / sqrt(Dh)."""
        n_queries, n_keys = q.shape[2], k.shape[2]
        grouped = self.kv_heads != self.n_heads
        bias = context.position.attention_bias(context.positions, k_positions)
        if bias is None and n_queries == n_keys:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=grouped,
                                                  scale=self.scale)
        allowed = causal_mask(n_queries, n_keys, q.device)  # (Tq, Tk)
        mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device)
        mask = mask.masked_fill(~allowed, -math.inf)
        if bias is not None:
            mask = mask + bias.to(q.dtype)  # (H, Tq, Tk)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=grouped,
                                              scale=self.scale)

    def gate_heads(self, x: Tensor, attended: Tensor) -> Tensor:
        """The heads' outputs (B, H, T, Dh) as the output projection reads them (here unchanged)."""
        return attended

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        batch, length, _ = x.shape
        q, k, v = self.project(x, context)
        k_positions = context.positions
        if context.cache is not None:
            k, v, k_positions = context.cache.update(k, v, context.positions)
        attended = self.gate_heads(x, self.attend(q, k, v, context, k_positions))  # (B, H, T, Dh)
        merged = attended.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim)
        return self.output(merged)  # (B, T, D)


class CausalSelfAttention(SoftmaxAttention):
    """Query/key/value projections (``kv_heads`` key/value heads) with the position hooks.

    ``scale`` is ``dims.attention_scale`` (None: the kernel's own ``1/sqrt(Dh)``)."""

    honours_attention_scale = True

    def __init__(self, dims: ModelDims, kv_heads: int | None):
        super().__init__()
        self.n_heads = dims.n_heads
        self.kv_heads = kv_heads or dims.n_heads
        self.head_dim = dims.head_dim
        self.scale = dims.attention_scale
        if dims.d_model % dims.n_heads:
            raise ConfigError(f"d_model {dims.d_model} is not divisible by heads {dims.n_heads}")
        if self.n_heads % self.kv_heads:
            raise ConfigError(
                f"attention: kv_heads {self.kv_heads} does not divide heads {self.n_heads}"
            )
        d_model = dims.d_model
        self.query = nn.Linear(d_model, self.n_heads * self.head_dim, bias=False)
        self.key = nn.Linear(d_model, self.kv_heads * self.head_dim, bias=False)
        self.value = nn.Linear(d_model, self.kv_heads * self.head_dim, bias=False)
        self.output = nn.Linear(self.n_heads * self.head_dim, d_model, bias=False)

    def project(self, x: Tensor, context: AttentionContext) -> tuple[Tensor, Tensor, Tensor]:
        """Queries (B, H, T, Dh) and keys/values (B, Hk, T, Dh), position-encoded."""
        batch, length, _ = x.shape
        q = self.query(x).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.key(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.value(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q = context.position.rotate(q, context.positions)
        k = context.position.rotate(k, context.positions)
        return q, k, v

    def logits(self, q: Tensor, k: Tensor, context: AttentionContext, k_positions: Tensor) -> Tensor:
        """q k^T / sqrt(Dh) plus the position encoding's bias, unmasked: (B, H, Tq, Tk).

        The explicit path of variants that change what happens to the scores (soft-capping,
        sigmoid); plain attention never builds this tensor (``attend`` calls the fused kernel).
        """
        scores = q @ expand_kv(k, self.n_heads).transpose(-1, -2)
        scores = scores / math.sqrt(self.head_dim) if self.scale is None else scores * self.scale
        bias = context.position.attention_bias(context.positions, k_positions)
        return scores if bias is None else scores + bias.to(q.dtype)  # (B, H, Tq, Tk)


@register(
    slot="attention",
    name="mha",
    config=MultiHeadConfig,
    paper=Paper(
        arxiv_id="1706.03762",
        title="Attention Is All You Need",
        url="https://arxiv.org/abs/1706.03762",
        organization="Google Brain",
    ),
    implementation_status="full",
    baseline=True,
    evolve_integrated=True,
    scope="Causal scaled dot-product attention; kv_heads < heads gives grouped-query attention.",
    search_space={"kv_heads": SearchDimension(choices=(1, 2, 4))},
)
class MultiHeadAttention(CausalSelfAttention):
    def __init__(self, config: MultiHeadConfig, dims: ModelDims, layer_index: int):
        super().__init__(dims, config.kv_heads)
