"""Value-residual attention (ResFormer): every layer mixes in the first layer's values.

Zhou et al., "Value Residual Learning For Alleviating Attention Concentration In
Transformers", arXiv 2410.17897. Layer 1 computes its values ``V_1`` as usual and shares
them; layer n > 1 attends with ``lambda_current * V_n + lambda_first * V_1`` in place of
``V_n`` (the paper's ResFormer uses 0.5 and 0.5). The attention built with ``layer_index``
0 shares its values through ``AttentionContext.shared`` within one forward pass. Because
each token's mixed value depends only on that token's own ``V_1``, mixed values can be
cached for incremental decoding. Reference test: layer 2's output against an explicit softmax over the mixed
values built by hand (tests/reference/test_attention_reference.py).

Deviations: fixed mixing weights (the paper's "Learnable-ResFormer" variant with trained
lambdas is not implemented); ``V_1`` is the first layer's value projection after
grouping into KV heads, so every layer must use the same ``kv_heads``.
"""

from __future__ import annotations

from torch import Tensor

from llmevo.components.attention.mha import CausalSelfAttention, KVHeadsConfig
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.errors import ConfigError
from llmevo.registry import Paper, SearchDimension, register

FIRST_VALUES = "value_residual.first_values"


class ValueResidualConfig(KVHeadsConfig):
    lambda_current: float = 0.5
    lambda_first: float = 0.5


def mix_values(current: Tensor, first: Tensor, lambda_current: float, lambda_first: float) -> Tensor:
    """``lambda_current * V_n + lambda_first * V_1``; both (B, Hk, T, Dh)."""
    return lambda_current * current + lambda_first * first


@register(
    slot="attention",
    name="value_residual",
    config=ValueResidualConfig,
    paper=Paper(
        arxiv_id="2410.17897",
        title="Value Residual Learning For Alleviating Attention Concentration In Transformers",
        url="https://arxiv.org/abs/2410.17897",
        organization="Westlake University; China Telecom",
    ),
    ablation="mha",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "ResFormer value residual with fixed 0.5/0.5 mixing in a 2-layer LM, compared with plain "
        "attention; the paper's scaling curves and attention-concentration analysis are not "
        "reproduced."
    ),
    search_space={"lambda_first": SearchDimension(low=0.25, high=1.0)},
)
class ValueResidualAttention(CausalSelfAttention):
    def __init__(self, config: ValueResidualConfig, dims: ModelDims, layer_index: int):
        super().__init__(dims, config.kv_heads)
        self.layer_index = layer_index
        self.lambda_current = config.lambda_current
        self.lambda_first = config.lambda_first

    def project(self, x: Tensor, context: AttentionContext) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = super().project(x, context)  # v: (B, Hk, T, Dh)
        if self.layer_index == 0:
            context.shared[FIRST_VALUES] = v
            return q, k, v
        first = context.shared.get(FIRST_VALUES)
        if first is None or first.shape != v.shape:
            raise ConfigError(
                "value_residual: layer "
                f"{self.layer_index} found no first-layer values of shape {tuple(v.shape)}; "
                "every layer must use value_residual attention with the same kv_heads"
            )
        return q, k, mix_values(v, first, self.lambda_current, self.lambda_first)
