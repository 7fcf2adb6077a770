"""Sigmoid attention: ``sigmoid(q k^T / sqrt(Dh) + b) v`` with the bias ``b = -log(n)``.

Ramapuram et al., "Theory, Analysis, and Best Practices for Sigmoid Self-Attention", arXiv
2409.04431 (section 3: ``SigmoidAttn(X) = sigma(Q K^T / sqrt(d_qk) + b) V``; the bias
``b = -log(n)``, n the sequence length, keeps the initial attention norm comparable to softmax's
and is the paper's key stabiliser). Each weight is an independent sigmoid of its score (no
normalisation over keys); masked (future) entries are zero. Reference test: the formula
written head by head, ``1 / (1 + exp(-(s + b)))`` over the visible keys and zero elsewhere
(tests/reference/test_attention_variants_reference.py).

Deviations: ``n`` is the model's maximum sequence length (the 64-token training window), fixed
when the layer is built, rather than each sequence's own length, so a sequence's weights do not
change with its length and cached decoding equals the full forward; ``bias`` overrides it. The
paper's hybrid-norm and LayerScale additions for stability are not included (the block slot is
llama_modern's pre-norm); its FlashSigmoid kernel is not used (the weights are a dense tensor).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from llmevo.components.attention.mha import (
    CausalSelfAttention,
    KVHeadsConfig,
    causal_mask,
    expand_kv,
)
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.registry import Paper, register


class SigmoidAttentionConfig(KVHeadsConfig):
    bias: float | None = None  # None: -log(max_seq_len), the paper's b = -log(n)


def sigmoid_attention_weights(logits: Tensor, allowed: Tensor, bias: float) -> Tensor:
    """``sigmoid(logits + bias)`` where ``allowed`` (broadcast over the leading dims), else 0."""
    return torch.sigmoid(logits + bias) * allowed


@register(
    slot="attention",
    name="sigmoid_attn",
    config=SigmoidAttentionConfig,
    paper=Paper(
        arxiv_id="2409.04431",
        title="Theory, Analysis, and Best Practices for Sigmoid Self-Attention",
        url="https://arxiv.org/abs/2409.04431",
        organization="Apple",
    ),
    ablation="mha",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Sigmoid attention with b = -log(n) (n = the 64-token context) in a 2-layer pre-norm LM, "
        "compared with softmax attention; the paper's hybrid norm, LayerScale and FlashSigmoid "
        "kernel are not reproduced."
    ),
)
class SigmoidAttention(CausalSelfAttention):
    def __init__(self, config: SigmoidAttentionConfig, dims: ModelDims, layer_index: int):
        super().__init__(dims, config.kv_heads)
        self.bias = -math.log(dims.max_seq_len) if config.bias is None else config.bias

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, context: AttentionContext, k_positions: Tensor
    ) -> Tensor:
        """sigmoid(q k^T / sqrt(Dh) + position bias + b) v over the visible keys  ->  (B, H, Tq, Dh)."""
        logits = self.logits(q, k, context, k_positions)  # (B, H, Tq, Tk)
        allowed = causal_mask(q.shape[2], k.shape[2], q.device)  # (Tq, Tk)
        weights = sigmoid_attention_weights(logits, allowed, self.bias)
        return weights @ expand_kv(v, self.n_heads)  # (B, H, Tq, Dh)
