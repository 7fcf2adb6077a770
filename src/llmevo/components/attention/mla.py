"""Multi-head latent attention (MLA): keys and values up-projected from one small joint latent.

DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language
Model", arXiv 2405.04434 (section 2.1.2, low-rank key-value joint compression; section 2.1.3,
decoupled rotary position embedding; appendix C, the full formulas). For the layer input
``h_t`` (the block's pre-normalised hidden state):

    c_t^KV = W^DKV h_t  (width kv_rank),   k_t^C = W^UK c_t^KV,   v_t = W^UV c_t^KV,
    c_t^Q  = W^DQ h_t   (width q_rank; with q_rank None, c_t^Q = h_t),   q_t^C = W^UQ c_t^Q,
    q_{t,i}^R = RoPE(W^QR c_t^Q)_i (per head),   k_t^R = RoPE(W^KR h_t) (one, shared by heads),
    o_{t,i} = sum_j softmax_j([q^R; q^C]_{t,i} . [k^R; k^C]_{j,i} / sqrt(Dh + Dr)) v_{j,i},

and ``u_t = W^O [o_{t,1}; ...; o_{t,H}]``; an RMSNorm with a learned gain follows each latent
(section 3.1.2, as in the released models). Reference test: the formulas head by head from
the layer's own weights, and the full-rank limit (identity down-projection, no rotary part)
equal to an explicit ``mha``-style softmax attention (tests/reference/test_attention_new_reference.py).

Positions: RoPE cannot be applied to ``k^C``: a rotation between ``W^UK`` and the latent would
stop ``W^UK`` being absorbed into the query at inference, so the paper adds the decoupled
rotary part ``q^R``/``k^R`` of width Dr and leaves the content part unrotated. That part is
built here with Dr = Dh, so the position slot's ``rotate`` sees exactly the head-sized
(B, H, T, Dh) tensors it was built for (RoPE's default ``rotary_dim`` is the head dimension;
a partial ``rotary_dim`` rotates part of it, as in ``mha``). Position encodings that do not
rotate work unchanged: ALiBi's bias is added to the scores, learned or sinusoidal positions
enter the embeddings, NoPE does nothing; ``q^R``/``k^R`` are then a plain, unrotated
shared-key part. The rotary part comes first in the concatenation (the paper writes
``[q^C; q^R]``; the dot product is the same), so the cached keys are rotated in their first
channels like every other attention's, and a re-rotation of those channels by the KV-cache
slot (``rope_relay``) moves the rotary part only, leaving the content part as it is.

Size: at quick (d_model 64, 4 heads, Dh 16) the default ``kv_rank`` 16 gives 16,400
parameters per layer against ``mha``'s 16,384 (W^DKV 64x16, W^UK and W^UV 16x64 each, W^KR
64x16, the query 64x128 for content and rotary parts, W^O 64x64, the latent's gain 16):
the same size to within 16, and a per-token cache of kv_rank + Dr = 32 numbers instead of
2 x 64. The size dial scales ``kv_rank`` (and ``q_rank``) with the width while Dh stays 16,
so at larger rungs MLA is a little smaller than ``mha`` (about 1.6% at rung 7).

Deviations: the KV cache keeps the up-projected (post-position) keys and values rather than
the latent ``c^KV`` and ``k^R`` (the same outputs, not the paper's memory saving), so the
matrix-absorption trick of inference is not used; Dr = Dh rather than the paper's Dh / 2
(see Positions); the paper's dimensions (d_c = 4 Dh = 512, d_c' = 1536 at d_model 5120) are
scaled to this model's width, not copied; queries are uncompressed by default (``q_rank``
None, as in DeepSeek-V2-Lite); the paper's extra scaling factors at the bottlenecks and YaRN
are not used.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
from pydantic import PositiveFloat, PositiveInt
from torch import Tensor, nn

from llmevo.components.attention.mha import SoftmaxAttention
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.components.norm.rmsnorm import rms_norm
from llmevo.errors import ConfigError
from llmevo.registry import Paper, Scaling, SearchDimension, StrictModel, register


class LatentAttentionConfig(StrictModel):
    kv_rank: Annotated[PositiveInt, Scaling.WIDTH] = 16  # width of the joint key/value latent c^KV (d_c)
    q_rank: Annotated[PositiveInt | None, Scaling.WIDTH] = None  # width of the query latent c^Q (d_c'); None: no compression
    eps: PositiveFloat = 1e-6  # of the latents' RMSNorm


@register(
    slot="attention",
    name="mla",
    config=LatentAttentionConfig,
    paper=Paper(
        arxiv_id="2405.04434",
        title="DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language Model",
        url="https://arxiv.org/abs/2405.04434",
        organization="DeepSeek-AI",
    ),
    ablation="mha",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Multi-head latent attention (a 16-wide joint key/value latent, decoupled rotary "
        "query/key part, uncompressed queries) in a 2-layer dense LM at mha's parameter count, "
        "compared with multi-head attention on the LM loss; the latent KV cache's memory saving, "
        "DeepSeekMoE and the paper's 236B model are not reproduced."
    ),
    search_space={"kv_rank": SearchDimension(choices=(8, 16, 32))},
)
class LatentAttention(SoftmaxAttention):
    def __init__(self, config: LatentAttentionConfig, dims: ModelDims, layer_index: int):
        super().__init__()
        if dims.d_model % dims.n_heads:
            raise ConfigError(f"d_model {dims.d_model} is not divisible by heads {dims.n_heads}")
        self.n_heads = self.kv_heads = dims.n_heads
        self.head_dim = dims.head_dim
        self.rope_dim = dims.head_dim  # Dr: the decoupled rotary part, head-sized (see Positions)
        self.eps = config.eps
        d_model, width = dims.d_model, dims.n_heads * dims.head_dim
        self.kv_down = nn.Linear(d_model, config.kv_rank, bias=False)  # W^DKV
        self.kv_norm = nn.Parameter(torch.ones(config.kv_rank))
        self.key_up = nn.Linear(config.kv_rank, width, bias=False)  # W^UK
        self.value_up = nn.Linear(config.kv_rank, width, bias=False)  # W^UV
        self.key_rope = nn.Linear(d_model, self.rope_dim, bias=False)  # W^KR
        query_in = d_model if config.q_rank is None else config.q_rank
        self.query_down = (
            None if config.q_rank is None else nn.Linear(d_model, config.q_rank, bias=False)
        )  # W^DQ
        self.query_norm = None if config.q_rank is None else nn.Parameter(torch.ones(config.q_rank))
        self.query_up = nn.Linear(query_in, width, bias=False)  # W^UQ
        self.query_rope = nn.Linear(query_in, self.n_heads * self.rope_dim, bias=False)  # W^QR
        self.output = nn.Linear(width, d_model, bias=False)  # W^O
        self.scale = 1.0 / math.sqrt(self.head_dim + self.rope_dim)

    def _heads(self, x: Tensor, n_heads: int) -> Tensor:
        """(B, T, n x d) -> (B, n, T, d)."""
        batch, length, _ = x.shape
        return x.view(batch, length, n_heads, -1).transpose(1, 2)

    def project(self, x: Tensor, context: AttentionContext) -> tuple[Tensor, Tensor, Tensor]:
        """Queries and keys [rotary part; content part] (B, H, T, Dr + Dh), values (B, H, T, Dh)."""
        latent = rms_norm(self.kv_down(x), self.kv_norm, self.eps)  # c^KV: (B, T, kv_rank)
        key_content = self._heads(self.key_up(latent), self.n_heads)  # (B, H, T, Dh)
        values = self._heads(self.value_up(latent), self.n_heads)  # (B, H, T, Dh)
        key_rope = context.position.rotate(self._heads(self.key_rope(x), 1), context.positions)
        if self.query_down is None:
            query_latent = x  # (B, T, D)
        else:
            assert self.query_norm is not None
            query_latent = rms_norm(self.query_down(x), self.query_norm, self.eps)  # c^Q
        query_content = self._heads(self.query_up(query_latent), self.n_heads)  # (B, H, T, Dh)
        query_rope = self._heads(self.query_rope(query_latent), self.n_heads)  # (B, H, T, Dr)
        query_rope = context.position.rotate(query_rope, context.positions)
        q = torch.cat([query_rope, query_content], dim=-1)
        k = torch.cat([key_rope.expand(-1, self.n_heads, -1, -1), key_content], dim=-1)
        return q, k, values
