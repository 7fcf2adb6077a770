"""Sliding-window causal attention: each query sees only the last ``window`` positions.

Beltagy, Peters and Cohan, "Longformer: The Long-Document Transformer", arXiv 2004.05150
(section 3.1, "Sliding Window": a fixed-size window around each token); the causal form of
Jiang et al., "Mistral 7B", arXiv 2310.06825 (section 2, "Sliding Window Attention": the hidden
state at position i of layer k attends to positions i - W .. i of layer k - 1, W = 4096). Query
at position i attends to key at position j iff ``0 <= i - j < window``, decided from the
absolute positions of queries and keys, so cached decoding masks exactly as the full forward
does. Reference test: the output against an explicit softmax under a mask written out entry
by entry, and window >= sequence length equal to plain causal attention
(tests/reference/test_attention_variants_reference.py).

Size: ``window`` is a length in tokens; the size dial (``runner/size.py``) keeps the sequence
length at 64 on every rung, so ``window`` does not scale with the rung (its rule is the
identity). The default 32 is half of the 64-token training window; with 2 layers the
receptive field of the last layer still reaches 2 x (32 - 1) = 62 earlier tokens.

Deviations: Mistral's window counts the query itself among its W + 1 positions (i - W .. i);
here ``window`` counts every visible position including the query (i - window + 1 .. i). The
rolling-buffer KV cache is not implemented: the cache keeps every entry and the mask hides the
old ones (same outputs, no memory saving). No Longformer global attention or dilation.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
import torch.nn.functional as F
from pydantic import PositiveInt
from torch import Tensor

from llmevo.components.attention.mha import CausalSelfAttention, KVHeadsConfig
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.registry import Paper, Scaling, SearchDimension, register


class SlidingWindowConfig(KVHeadsConfig):
    window: Annotated[PositiveInt, Scaling.KEPT] = 32  # visible positions per query, the query included


def sliding_window_mask(q_positions: Tensor, k_positions: Tensor, window: int) -> Tensor:
    """(Tq, Tk) bool: key position j is visible from query position i iff 0 <= i - j < window."""
    distance = q_positions[:, None] - k_positions[None, :]  # (Tq, Tk)
    return (distance >= 0) & (distance < window)


@register(
    slot="attention",
    name="sliding_window",
    config=SlidingWindowConfig,
    paper=Paper(
        arxiv_id="2310.06825",
        title="Mistral 7B",
        url="https://arxiv.org/abs/2310.06825",
        organization="Mistral AI",
    ),
    ablation="mha",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Causal sliding-window attention (window 32 of a 64-token context) in every layer of a "
        "2-layer LM, compared with full causal attention; Longformer's global tokens and "
        "dilation and Mistral's rolling-buffer cache are not reproduced."
    ),
    search_space={"window": SearchDimension(choices=(16, 32, 48))},
)
class SlidingWindowAttention(CausalSelfAttention):
    def __init__(self, config: SlidingWindowConfig, dims: ModelDims, layer_index: int):
        super().__init__(dims, config.kv_heads)
        self.window = config.window

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, context: AttentionContext, k_positions: Tensor
    ) -> Tensor:
        """softmax(q k^T / sqrt(Dh) + bias, window) v  ->  (B, H, Tq, Dh)."""
        allowed = sliding_window_mask(context.positions, k_positions, self.window)  # (Tq, Tk)
        mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device)
        mask = mask.masked_fill(~allowed, -math.inf)
        bias = context.position.attention_bias(context.positions, k_positions)
        if bias is not None:
            mask = mask + bias.to(q.dtype)  # (H, Tq, Tk)
        grouped = self.kv_heads != self.n_heads
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=grouped,
                                              scale=self.scale)
