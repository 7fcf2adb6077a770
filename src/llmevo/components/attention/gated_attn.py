"""Gated attention: a head-specific sigmoid gate on each head's SDPA output (position G1).

Qiu et al., "Gated Attention for Large Language Models: Non-linearity, Sparsity, and
Attention-Sink-Free", arXiv 2505.06708 (section 2: a gate ``Y' = Y ⊙ sigma(X W_theta)`` at
one of five positions; the best is G1, after the scaled dot-product attention and before the
output projection, head-specific, multiplicative, sigmoid). Here ``Y_h = softmax(q_h k_h^T /
sqrt(Dh) + mask) v_h`` is each head's attention output and ``X`` the attention's own input (the
block's pre-normalised hidden state of the same token), so head h's output becomes
``Y_h ⊙ sigmoid(X W_h)`` and then ``concat_h(...) W_O`` as usual. The gate depends only on the
query token, so cached decoding is unchanged. ``granularity`` picks the paper's two G1 forms:
``elementwise`` (``W_h``: d_model x Dh, one gate per output channel; the paper's best, +d_model
x d_model parameters per layer) or ``headwise`` (``W_h``: d_model x 1, one scalar per head and
token; +d_model x heads). Why it helps, per the paper: a non-linearity between the value and
output projections (otherwise one low-rank linear map) and query-dependent sparsity that
removes the attention sink. Reference test: the formula head by head, ``1 / (1 + exp(-x W_h))``
times an explicit softmax attention, and a zero gate weight giving half of ``mha``'s output
(tests/reference/test_attention_new_reference.py).

Deviations: the gate is its own bias-free projection ``gate`` rather than extra output rows of
the query projection as in the paper's code (the same function; the fused layout only saves a
kernel launch); it is initialised like every projection here (normal, std 0.02), so every gate
starts near sigmoid(0) = 0.5 and the attention branch starts at half its ungated scale. The
gate's parameters are not compensated in the baseline: ``mha`` stays at its own size (about
6% fewer parameters than the elementwise gate at quick).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from llmevo.components.attention.mha import CausalSelfAttention, KVHeadsConfig
from llmevo.components.base import ModelDims
from llmevo.registry import Paper, SearchDimension, register


class GatedAttentionConfig(KVHeadsConfig):
    granularity: Literal["elementwise", "headwise"] = "elementwise"


@register(
    slot="attention",
    name="gated_attn",
    config=GatedAttentionConfig,
    paper=Paper(
        arxiv_id="2505.06708",
        title="Gated Attention for Large Language Models: Non-linearity, Sparsity, and "
        "Attention-Sink-Free",
        url="https://arxiv.org/abs/2505.06708",
        organization="Qwen Team, Alibaba Group",
    ),
    ablation="mha",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "The paper's G1 gate (elementwise, head-specific sigmoid on the SDPA output, computed "
        "from the layer input) in a 2-layer dense LM, compared with ungated attention; not its "
        "15B MoE / 1.7B models, long-context extrapolation or attention-sink measurements."
    ),
    search_space={"granularity": SearchDimension(choices=("elementwise", "headwise"))},
)
class GatedAttention(CausalSelfAttention):
    def __init__(self, config: GatedAttentionConfig, dims: ModelDims, layer_index: int):
        super().__init__(dims, config.kv_heads)
        self.gate_width = self.head_dim if config.granularity == "elementwise" else 1
        self.gate = nn.Linear(dims.d_model, self.n_heads * self.gate_width, bias=False)

    def gate_heads(self, x: Tensor, attended: Tensor) -> Tensor:
        batch, length, _ = x.shape
        scores = self.gate(x).view(batch, length, self.n_heads, self.gate_width).transpose(1, 2)
        return attended * torch.sigmoid(scores)  # (B, H, T, Dh) times (B, H, T, Dh or 1)
