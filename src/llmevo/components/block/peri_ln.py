"""Peri-LN block: normalise each sub-layer's input and its output before the residual addition.

Kim et al., "Peri-LN: Revisiting Layer Normalization in the Transformer Architecture", arXiv
2502.02732 (later versions: "... Revisiting Normalization Layer ..."). Section 3: each of
attention and the MLP is wrapped as ``y = x + Norm(Module(Norm(x)))``, and the paper's Peri-LN
models also normalise the embeddings, ``x_0 = Norm(Embedding(tokens))``. The residual stream
itself is never normalised (as in pre-norm) but every update added to it is (as in post-norm),
so the stream's variance grows about linearly with depth rather than exponentially. Here the
first block (``layer_index`` 0) applies the embedding norm to its input, the one place a block
sees the embeddings; ``embedding_norm=False`` leaves exactly the sandwich-LN layout
(``block/sandwich.py``). Reference test: the block against the formula composed from plain
torch ops (RMSNorm written out) and its own attention and feed-forward, the embedding norm in
the first block only, unit-RMS updates whatever the input's scale, equality with sandwich
without the embedding norm, and the parameter count
(tests/reference/test_block_new_reference.py).

Deviations: the norm type is the model's norm slot (RMSNorm in llama_modern; the paper studies
LayerNorm and RMSNorm). In BLT's stacks the first block of each stack normalises that stack's
input. The paper's scale (400M-3.2B parameters, 30B tokens) and its FP16 and variance-growth
studies are not reproduced.
"""

from __future__ import annotations

from torch import Tensor

from llmevo.components.base import AttentionContext, Block, BlockParts, ModelDims
from llmevo.registry import Paper, SearchDimension, StrictModel, register


class PeriLNConfig(StrictModel):
    embedding_norm: bool = True  # normalise the embeddings before the first block


@register(
    slot="block",
    name="peri_ln",
    config=PeriLNConfig,
    paper=Paper(
        arxiv_id="2502.02732",
        title="Peri-LN: Revisiting Layer Normalization in the Transformer Architecture",
        url="https://arxiv.org/abs/2502.02732",
        organization="NAVER Cloud; KAIST; NAVER AI Lab",
    ),
    ablation="pre_norm",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Peri-LN (norms around each sub-layer, and on the embeddings) in a 2-layer LM, "
        "compared with pre-norm at an equal budget; the paper's large-model, FP16 and "
        "variance-growth studies are not reproduced."
    ),
    search_space={"embedding_norm": SearchDimension(choices=(True, False))},
)
class PeriLNBlock(Block):
    def __init__(
        self, config: PeriLNConfig, dims: ModelDims, parts: BlockParts, layer_index: int
    ):
        super().__init__()
        first = layer_index == 0 and config.embedding_norm
        self.embedding_norm = parts.make_norm(dims.d_model) if first else None
        self.attention_norm = parts.make_norm(dims.d_model)
        self.attention = parts.make_attention(layer_index)
        self.attention_output_norm = parts.make_norm(dims.d_model)
        self.feed_forward_norm = parts.make_norm(dims.d_model)
        self.feed_forward = parts.make_feedforward()
        self.feed_forward_output_norm = parts.make_norm(dims.d_model)

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)  # x_0 = Norm(embeddings)
        x = x + self.attention_output_norm(self.attention(self.attention_norm(x), context))
        return x + self.feed_forward_output_norm(self.feed_forward(self.feed_forward_norm(x)))
