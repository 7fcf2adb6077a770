"""No positional encoding (NoPE): a causal decoder with no explicit position signal.

Kazemnejad et al., "The Impact of Positional Encoding on Length Generalization in
Transformers", arXiv 2305.19466: a decoder-only transformer can recover positions from
the causal mask alone, and NoPE length-generalises better than absolute, T5-bias, ALiBi
and rotary encodings on their synthetic tasks. Every hook of ``PositionEncoding`` stays the
identity. Reference test: the logits do not change when every position index is shifted
by a constant, and the attention of a single layer is equivariant to nothing but the mask
(tests/reference/test_nope_reference.py).

Deviations: none (there is no mechanism to deviate from); the paper's length-generalisation
tasks are not reproduced here.
"""

from __future__ import annotations

from llmevo.components.base import ModelDims, PositionEncoding
from llmevo.registry import EmptyConfig, Paper, register


@register(
    slot="position",
    name="nope",
    config=EmptyConfig,
    paper=Paper(
        arxiv_id="2305.19466",
        title="The Impact of Positional Encoding on Length Generalization in Transformers",
        url="https://arxiv.org/abs/2305.19466",
        organization="Mila, McGill University; ServiceNow Research",
    ),
    ablation="rope",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Drops all position information (the causal mask is the only order signal), compared "
        "with RoPE in-distribution; the paper's length-generalisation tasks are not reproduced."
    ),
)
class NoPosition(PositionEncoding):
    def __init__(self, config: EmptyConfig, dims: ModelDims):
        super().__init__()
