"""Pre-norm residual block: ``x + attn(norm(x))``, then ``x + ffn(norm(x))``; under CompleteP
(``--param completep`` away from the base depth) each branch is multiplied by ``L_base / L``.

Xiong et al., "On Layer Normalization in the Transformer Architecture", arXiv 2002.04745
(pre-LN); the layout of GPT-2 and LLaMA. Other placements (post-norm, sandwich) are
registered as separate block components.
"""

from __future__ import annotations

from torch import Tensor

from llmevo.components.base import AttentionContext, Block, BlockParts, ModelDims
from llmevo.registry import EmptyConfig, Paper, register


@register(
    slot="block",
    name="pre_norm",
    config=EmptyConfig,
    paper=Paper(
        arxiv_id="2002.04745",
        title="On Layer Normalization in the Transformer Architecture",
        url="https://arxiv.org/abs/2002.04745",
        organization="Microsoft Research Asia",
    ),
    implementation_status="full",
    baseline=True,
    evolve_integrated=True,
    scope="Normalise the input of each sub-layer; the residual stream itself is never normalised.",
)
class PreNormBlock(Block):
    honours_residual_scale = True  # CompleteP's branch multiplier (model/parametrization.py)

    def __init__(
        self, config: EmptyConfig, dims: ModelDims, parts: BlockParts, layer_index: int
    ):
        super().__init__()
        self.attention_norm = parts.make_norm(dims.d_model)
        self.attention = parts.make_attention(layer_index)
        self.feed_forward_norm = parts.make_norm(dims.d_model)
        self.feed_forward = parts.make_feedforward()
        self.residual_scale = dims.residual_scale  # None: no multiplier (every parametrization but completep)

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        if self.residual_scale is None:
            x = x + self.attention(self.attention_norm(x), context)
            return x + self.feed_forward(self.feed_forward_norm(x))  # (B, T, D)
        x = x + self.residual_scale * self.attention(self.attention_norm(x), context)
        return x + self.residual_scale * self.feed_forward(self.feed_forward_norm(x))  # (B, T, D)
