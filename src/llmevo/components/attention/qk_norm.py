"""QK-norm: RMS-normalise each head's queries and keys (with a learned gain) before q k^T.

Dehghani et al., "Scaling Vision Transformers to 22 Billion Parameters", arXiv 2302.05442
(section 2: LayerNorm on q and k keeps attention logits from growing without bound and
diverging); the idea goes back to Henry et al., "Query-Key Normalization for
Transformers", arXiv 2010.04245 (L2-normalised q and k with a learned scale). Here q and k
are RMS-normalised over the head dimension with one learned gain vector each (shared by all
heads), then the position encoding rotates them, then ordinary causal attention with the
``1/sqrt(Dh)`` scale. Reference test: the same computation written head by head with an
explicit softmax (tests/reference/test_attention_reference.py).

Deviations: RMSNorm rather than the paper's LayerNorm (no mean subtraction, no bias), as in
OLMo-2/Qwen3; the normalisation precedes RoPE; Henry et al.'s learned temperature replacing
``1/sqrt(Dh)`` is not used (the gains can learn the same scale).
"""

from __future__ import annotations

import torch
from pydantic import PositiveFloat
from torch import Tensor, nn

from llmevo.components.attention.mha import CausalSelfAttention, KVHeadsConfig
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.components.norm.rmsnorm import rms_norm
from llmevo.registry import Paper, SearchDimension, register


class QKNormConfig(KVHeadsConfig):
    eps: PositiveFloat = 1e-6


@register(
    slot="attention",
    name="qk_norm",
    config=QKNormConfig,
    paper=Paper(
        arxiv_id="2302.05442",
        title="Scaling Vision Transformers to 22 Billion Parameters",
        url="https://arxiv.org/abs/2302.05442",
        organization="Google Research",
    ),
    ablation="mha",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Per-head RMS normalisation of queries and keys with learned gains in a small causal LM, "
        "compared with plain attention; not the paper's 22B ViT or its stability-at-scale study."
    ),
    search_space={"kv_heads": SearchDimension(choices=(1, 2, 4))},
)
class QKNormAttention(CausalSelfAttention):
    def __init__(self, config: QKNormConfig, dims: ModelDims, layer_index: int):
        super().__init__(dims, config.kv_heads)
        self.eps = config.eps
        self.query_gain = nn.Parameter(torch.ones(self.head_dim))
        self.key_gain = nn.Parameter(torch.ones(self.head_dim))

    def project(self, x: Tensor, context: AttentionContext) -> tuple[Tensor, Tensor, Tensor]:
        batch, length, _ = x.shape
        q = self.query(x).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.key(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.value(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q = rms_norm(q, self.query_gain, self.eps)  # (B, H, T, Dh)
        k = rms_norm(k, self.key_gain, self.eps)  # (B, Hk, T, Dh)
        q = context.position.rotate(q, context.positions)
        k = context.position.rotate(k, context.positions)
        return q, k, v
