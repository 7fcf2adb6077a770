"""Grouped-query attention (GQA): each key/value head is shared by a group of query heads.

Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
Checkpoints", arXiv 2305.13245 (section 2.2, "Grouped-query attention": the H query heads
are divided into G groups, each sharing a single key head and value head; GQA-G with
G = H / ``group_size``). Head h attends with key/value head ``h // group_size``:
``softmax(q_h k_{h // g}^T / sqrt(Dh) + mask) v_{h // g}``. The key and value projections
shrink from H x Dh to G x Dh outputs, and so does the KV cache. Reference test: the formula
head by head with each key/value head shared by its group, and group size 1 equal to
``mha`` with the same weights (tests/reference/test_attention_new_reference.py).

``mha`` already takes ``kv_heads``; this component is the verdict of grouping itself against
full multi-head attention: ``group_size`` (query heads per key/value head) is fixed rather
than the number of key/value heads, so the size dial (``runner/size.py``) keeps the ratio
at every rung (half the heads at 2, whatever the heads).

Deviations: trained from scratch, not "uptrained" from a multi-head checkpoint by mean-pooling
its key/value heads (the paper's section 2.1 conversion); the paper's encoder-decoder T5
models and their cross-attention are not reproduced (this is a decoder-only LM).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import PositiveInt

from llmevo.components.attention.mha import CausalSelfAttention
from llmevo.components.base import ModelDims
from llmevo.errors import ConfigError
from llmevo.registry import Paper, Scaling, SearchDimension, StrictModel, register


class GroupedQueryConfig(StrictModel):
    group_size: Annotated[PositiveInt, Scaling.DIVIDES_HEADS] = 2  # query heads sharing each key/value head: kv_heads = heads / 2


@register(
    slot="attention",
    name="gqa",
    config=GroupedQueryConfig,
    paper=Paper(
        arxiv_id="2305.13245",
        title="GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints",
        url="https://arxiv.org/abs/2305.13245",
        organization="Google Research",
    ),
    ablation="mha",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Grouped-query attention with half as many key/value heads as query heads, trained from "
        "scratch in a 2-layer LM and compared with full multi-head attention; the paper's "
        "uptraining of T5 checkpoints is not reproduced."
    ),
    search_space={"group_size": SearchDimension(choices=(2, 4))},
)
class GroupedQueryAttention(CausalSelfAttention):
    def __init__(self, config: GroupedQueryConfig, dims: ModelDims, layer_index: int):
        if dims.n_heads % config.group_size:
            raise ConfigError(
                f"gqa: group_size {config.group_size} does not divide heads {dims.n_heads}"
            )
        super().__init__(dims, dims.n_heads // config.group_size)
