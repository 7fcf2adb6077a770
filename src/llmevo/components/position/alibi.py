"""Attention with Linear Biases (ALiBi): a per-head linear distance penalty on the scores.

Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases Enables
Input Length Extrapolation", arXiv 2108.12409. Query i adds ``-m_h * (i - j)`` to its score
for key j; no position information enters the embeddings or q/k. For ``n`` heads, a power
of two, the slopes are the geometric sequence starting at ``2^(-8/n)`` with that ratio
(section 3; 8 heads: 1/2, 1/4, ..., 1/256). For other head counts the paper's code takes
the slopes of the closest lower power of two and interleaves every other slope of twice
that count; this module does the same. Reference test: the slopes against the paper's
values, the bias against ``-m (i - j)`` written out, and attention with ALiBi against an
explicit softmax (tests/reference/test_alibi_reference.py).

Deviations: ``max_bias`` (8 in the paper) is configurable; the bias is computed from
absolute positions of queries and keys, so it also holds for cached decoding.
"""

from __future__ import annotations

import math

import torch
from pydantic import PositiveFloat
from torch import Tensor

from llmevo.components.base import ModelDims, PositionEncoding
from llmevo.registry import Paper, SearchDimension, StrictModel, register


class AlibiConfig(StrictModel):
    max_bias: PositiveFloat = 8.0


def alibi_slopes(n_heads: int, max_bias: float = 8.0) -> Tensor:
    """(H,) slopes: ``2^(-max_bias/n)``, its powers 1..n; non-powers of two interleave."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-max_bias / n)
        return [start ** (h + 1) for h in range(n)]

    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(closest)
    if closest != n_heads:
        slopes += power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """(H, Tq, Tk): ``-slope_h * (q_pos - k_pos)``; future keys get a positive value, masked later."""
    distance = q_positions[:, None] - k_positions[None, :]  # (Tq, Tk)
    return -slopes[:, None, None] * distance.to(slopes.dtype)  # (H, Tq, Tk)


@register(
    slot="position",
    name="alibi",
    config=AlibiConfig,
    paper=Paper(
        arxiv_id="2108.12409",
        title=(
            "Train Short, Test Long: Attention with Linear Biases Enables Input Length "
            "Extrapolation"
        ),
        url="https://arxiv.org/abs/2108.12409",
        organization="University of Washington; Facebook AI Research; Allen Institute for AI",
    ),
    ablation="sinusoidal",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Per-head linear distance bias on attention scores, compared with sinusoidal positions "
        "at the training length; the paper's extrapolation to longer inputs is not reproduced."
    ),
    search_space={"max_bias": SearchDimension(choices=(4.0, 8.0, 16.0))},
)
class AlibiPosition(PositionEncoding):
    def __init__(self, config: AlibiConfig, dims: ModelDims):
        super().__init__()
        self.register_buffer(
            "slopes", alibi_slopes(dims.n_heads, config.max_bias), persistent=False
        )

    def attention_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        return alibi_bias(self.slopes, q_positions, k_positions)  # (H, Tq, Tk)
