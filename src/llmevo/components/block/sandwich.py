"""Sandwich-norm block: normalise each sub-layer's input and its output before the residual.

Ding et al., "CogView: Mastering Text-to-Image Generation via Transformers", arXiv
2105.13290 (section 2.4, "Sandwich-LN"); the layout Gemma 2 uses (pre- and post-norm
around attention and MLP): ``x = x + norm_out(sublayer(norm_in(x)))``. Reference test: the
block against the formula composed by hand from its own sub-modules
(tests/reference/test_norm_reference.py).

Deviations: the norm type is the model's norm slot (RMSNorm in llama_modern; CogView uses
LayerNorm); CogView's precision-bottleneck relaxation (PB-relax) is not included.
"""

from __future__ import annotations

from torch import Tensor

from llmevo.components.base import AttentionContext, Block, BlockParts, ModelDims
from llmevo.registry import EmptyConfig, Paper, register


@register(
    slot="block",
    name="sandwich",
    config=EmptyConfig,
    paper=Paper(
        arxiv_id="2105.13290",
        title="CogView: Mastering Text-to-Image Generation via Transformers",
        url="https://arxiv.org/abs/2105.13290",
        organization="Tsinghua University; DAMO Academy, Alibaba Group; BAAI",
    ),
    ablation="pre_norm",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Sandwich-LN (norm before and after each sub-layer) in a small LM, compared with "
        "pre-norm; CogView's image generation and PB-relax are not reproduced."
    ),
)
class SandwichBlock(Block):
    def __init__(
        self, config: EmptyConfig, dims: ModelDims, parts: BlockParts, layer_index: int
    ):
        super().__init__()
        self.attention_norm = parts.make_norm(dims.d_model)
        self.attention = parts.make_attention(layer_index)
        self.attention_output_norm = parts.make_norm(dims.d_model)
        self.feed_forward_norm = parts.make_norm(dims.d_model)
        self.feed_forward = parts.make_feedforward()
        self.feed_forward_output_norm = parts.make_norm(dims.d_model)

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        x = x + self.attention_output_norm(self.attention(self.attention_norm(x), context))
        return x + self.feed_forward_output_norm(self.feed_forward(self.feed_forward_norm(x)))
