"""DeepNorm block: post-norm with the residual up-weighted by alpha and the sub-layers'
value, output and feed-forward weights initialised down-scaled by beta.

Wang et al., "DeepNet: Scaling Transformers to 1,000 Layers", arXiv 2203.00555 (section 3,
``x_{l+1} = LN(alpha * x_l + G_l(x_l))``; figure 2, the pseudocode and the constants: for a
decoder-only model of ``N`` layers ``alpha = (2N)^(1/4)`` and ``beta = (8N)^(-1/4)``, the
feed-forward, value-projection and output-projection weights initialised with gain ``beta``
and the query and key projections with gain 1; section 4 derives them from a bound on the
model update). At llama_modern's 2 layers ``alpha = 4^(1/4) = sqrt(2)`` and ``beta = 1/2``.
``N`` is the model's ``n_layers``. The init is an ``AdjustsInit`` hook: the model first draws
its default init, then this block multiplies its attention's ``value`` and ``output`` weights
and every linear weight of its feed-forward by ``beta``. Reference test: the block against
the formula composed by hand from its own sub-modules, alpha and beta against the formula for
several N, and the weights against ``beta`` times a post-norm model's drawn from the same seed
(tests/reference/test_block_new_reference.py).

Deviations: the default init the paper scales is Xavier-normal; here it is the model's
``normal(0, 0.02)`` for every linear layer (the same for every block, so beta keeps its
meaning: the value, output and feed-forward weights start beta times smaller than the query
and key weights and than post-norm's). With a mixture-of-experts feed-forward the router is
scaled too (every linear weight of the feed-forward is). The model still applies its final
norm after the last block, which normalises an already-normalised stream (as for post-norm).
The paper's 1,000-layer stability study is not reproduced at 2 layers.
"""

from __future__ import annotations

from torch import Tensor, nn

from llmevo.components.base import AdjustsInit, AttentionContext, Block, BlockParts, ModelDims
from llmevo.errors import ConfigError
from llmevo.registry import EmptyConfig, Paper, register


def deepnorm_constants(n_layers: int) -> tuple[float, float]:
    """The decoder-only (alpha, beta) of ``n_layers`` layers: ((2N)^(1/4), (8N)^(-1/4))."""
    return (2 * n_layers) ** 0.25, (8 * n_layers) ** -0.25


@register(
    slot="block",
    name="deepnorm",
    config=EmptyConfig,
    paper=Paper(
        arxiv_id="2203.00555",
        title="DeepNet: Scaling Transformers to 1,000 Layers",
        url="https://arxiv.org/abs/2203.00555",
        organization="Microsoft Research",
    ),
    ablation="post_norm",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "DeepNorm (post-norm with alpha = (2N)^(1/4) on the residual and beta = (8N)^(-1/4) on "
        "the value, output and feed-forward init) in a 2-layer LM, compared with plain "
        "post-norm, which differs only in alpha and beta; the paper's 1,000-layer depth and "
        "translation studies are not reproduced."
    ),
)
class DeepNormBlock(Block, AdjustsInit):
    def __init__(
        self, config: EmptyConfig, dims: ModelDims, parts: BlockParts, layer_index: int
    ):
        super().__init__()
        self.alpha, self.beta = deepnorm_constants(dims.n_layers)
        self.attention = parts.make_attention(layer_index)
        self.attention_norm = parts.make_norm(dims.d_model)
        self.feed_forward = parts.make_feedforward()
        self.feed_forward_norm = parts.make_norm(dims.d_model)
        missing = [name for name in ("value", "output")
                   if not isinstance(getattr(self.attention, name, None), nn.Linear)]
        if missing:
            raise ConfigError(f"block 'deepnorm' scales the attention's value and output "
                              f"projections; {type(self.attention).__name__} has no "
                              f"{' or '.join(missing)} linear layer")

    def beta_scaled(self) -> list[nn.Parameter]:
        """The weights DeepNorm initialises with gain beta: value, output, every feed-forward one."""
        attention = [self.attention.value.weight, self.attention.output.weight]
        return attention + [m.weight for m in self.feed_forward.modules() if isinstance(m, nn.Linear)]

    def adjust_init(self) -> None:
        for weight in self.beta_scaled():
            weight.mul_(self.beta)

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        x = self.attention_norm(self.alpha * x + self.attention(x, context))
        return self.feed_forward_norm(self.alpha * x + self.feed_forward(x))  # (B, T, D)
