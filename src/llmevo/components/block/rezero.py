"""ReZero block: ``x + alpha * attn(x)``, then ``x + alpha * ffn(x)``, alpha initialised to 0, no norm.

Bachlechner et al., "ReZero is All You Need: Fast Convergence at Large Depth", arXiv
2003.04887 (equation 3: ``x_{i+1} = x_i + alpha_i F(x_i)`` with a learnable scalar residual
weight ``alpha_i = 0`` at initialisation, and no LayerNorm: every layer starts as the
identity). As in the authors' ReZero Transformer layer, one alpha per layer scales both of
its sub-layers (self-attention and feed-forward). Reference test: the block against the
formula composed by hand from its own sub-modules at a non-zero alpha, the identity at
initialisation, and alpha's gradient against its closed form ``<dL/dy, F(x)>``
(tests/reference/test_dyt_rezero_reference.py).

Deviations: the model's final norm (the norm slot, RMSNorm in llama_modern) still normalises
the stream before the output head; the paper's ReZero Transformer has no norm anywhere. The
blocks themselves never build a norm, so the norm slot affects only that final one. Alpha
takes the run's weight decay like every other parameter (AdamW over all parameters).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from llmevo.components.base import AttentionContext, Block, BlockParts, ModelDims
from llmevo.registry import Paper, StrictModel, register


class ReZeroConfig(StrictModel):
    alpha_init: float = 0.0


@register(
    slot="block",
    name="rezero",
    config=ReZeroConfig,
    paper=Paper(
        arxiv_id="2003.04887",
        title="ReZero is All You Need: Fast Convergence at Large Depth",
        url="https://arxiv.org/abs/2003.04887",
        organization="UC San Diego",
    ),
    ablation="pre_norm",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "ReZero residuals (one zero-initialised alpha per layer, no norms in the blocks) in a "
        "2-layer LM, compared with pre-norm; the paper's deep (up to 128-layer) convergence "
        "study is not reproduced, and the model keeps its final norm."
    ),
)
class ReZeroBlock(Block):
    def __init__(
        self, config: ReZeroConfig, dims: ModelDims, parts: BlockParts, layer_index: int
    ):
        super().__init__()
        self.attention = parts.make_attention(layer_index)
        self.feed_forward = parts.make_feedforward()
        self.alpha = nn.Parameter(torch.full((1,), config.alpha_init))

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        x = x + self.alpha * self.attention(x, context)
        return x + self.alpha * self.feed_forward(x)  # (B, T, D)
