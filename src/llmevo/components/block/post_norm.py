"""Post-norm residual block (the original Transformer): ``x = norm(x + sublayer(x))``.

Vaswani et al., "Attention Is All You Need", arXiv 1706.03762, section 3.1: "the output
of each sub-layer is LayerNorm(x + Sublayer(x))". Xiong et al. (arXiv 2002.04745) show
why this layout needs learning-rate warm-up. Reference test: the block against the
formula composed by hand from its own sub-modules (tests/reference/test_norm_reference.py).

Deviations: the model still applies its final norm after the last block, which for
post-norm normalises an already-normalised stream (harmless, one extra gain vector).
"""

from __future__ import annotations

from torch import Tensor

from llmevo.components.base import AttentionContext, Block, BlockParts, ModelDims
from llmevo.registry import EmptyConfig, Paper, register


@register(
    slot="block",
    name="post_norm",
    config=EmptyConfig,
    paper=Paper(
        arxiv_id="1706.03762",
        title="Attention Is All You Need",
        url="https://arxiv.org/abs/1706.03762",
        organization="Google Brain",
    ),
    ablation="pre_norm",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope="Normalise after each residual addition, compared with pre-norm at an equal budget.",
)
class PostNormBlock(Block):
    def __init__(
        self, config: EmptyConfig, dims: ModelDims, parts: BlockParts, layer_index: int
    ):
        super().__init__()
        self.attention = parts.make_attention(layer_index)
        self.attention_norm = parts.make_norm(dims.d_model)
        self.feed_forward = parts.make_feedforward()
        self.feed_forward_norm = parts.make_norm(dims.d_model)

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        x = self.attention_norm(x + self.attention(x, context))
        return self.feed_forward_norm(x + self.feed_forward(x))  # (B, T, D)
