"""Multi-query attention (MQA): every query head shares one key head and one value head.

Shazeer, "Fast Transformer Decoding: One Write-Head is All You Need", arXiv 1911.02150
(section 3, "Multi-Query Attention": multi-head attention except that the heads share a
single set of keys and values). Head h computes ``softmax(q_h k^T / sqrt(Dh) + mask) v``
with the one key/value head; the key and value projections are Dh wide instead of H x Dh,
and the KV cache is H times smaller. Reference test: the formula head by head with the one
key/value head, and equality with ``mha:kv_heads=1`` given the same weights
(tests/reference/test_attention_new_reference.py).

``mha`` already takes ``kv_heads``; this component is the verdict of sharing one key/value
head against full multi-head attention. It has no size field: one key/value head at every
rung of the size dial (``runner/size.py``), however many query heads.

Deviations: none in the attention itself; the paper's incremental-decoding speed measurements
and its WMT/billion-word models are not reproduced (the verdict here is the LM loss).
"""

from __future__ import annotations

from llmevo.components.attention.mha import CausalSelfAttention
from llmevo.components.base import ModelDims
from llmevo.registry import EmptyConfig, Paper, register


@register(
    slot="attention",
    name="mqa",
    config=EmptyConfig,
    paper=Paper(
        arxiv_id="1911.02150",
        title="Fast Transformer Decoding: One Write-Head is All You Need",
        url="https://arxiv.org/abs/1911.02150",
        organization="Google",
    ),
    ablation="mha",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Multi-query attention (one key/value head for all query heads) in a 2-layer LM, "
        "compared with full multi-head attention on the LM loss; decoding speed is not measured."
    ),
)
class MultiQueryAttention(CausalSelfAttention):
    def __init__(self, config: EmptyConfig, dims: ModelDims, layer_index: int):
        super().__init__(dims, kv_heads=1)
