"""Learned absolute position embeddings, added to the token embeddings.

The position encoding of GPT-2 (Radford et al., 2019) and of BERT; the non-rotary
ablation that RoPE is compared against. Reference test: the output equals the input
plus the embedding table's row for each position, computed as a one-hot matrix product
(tests/reference/test_position_reference.py).
"""

from __future__ import annotations

from torch import Tensor, nn

from llmevo.components.base import ModelDims, PositionEncoding
from llmevo.errors import ConfigError
from llmevo.registry import EmptyConfig, register


@register(
    slot="position",
    name="learned",
    config=EmptyConfig,
    implementation_status="full",
    baseline=True,
    evolve_integrated=True,
    scope="A trainable (max_seq_len, d_model) table added to the token embeddings.",
)
class LearnedPosition(PositionEncoding):
    def __init__(self, config: EmptyConfig, dims: ModelDims):
        super().__init__()
        self.max_positions = dims.max_seq_len
        self.table = nn.Embedding(dims.max_seq_len, dims.d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        if int(positions.max()) >= self.max_positions:
            raise ConfigError(
                f"learned positions: position {int(positions.max())} is beyond the table of "
                f"{self.max_positions}; use a shorter input or a cache policy"
            )
        return x + self.table(positions).to(x.dtype)  # (B, T, D) + (T, D)
