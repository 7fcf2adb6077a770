"""Rotary position embedding (RoPE).

Paper: Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding",
arXiv 2104.09864. Channel pairs (2i, 2i+1) of q and k are rotated by the angle
``position * theta ** (-2i / rotary_dim)``, so that ``<R(m) q, R(n) k>`` depends on
``m - n`` only. Reference test: the relative-position identity and an explicit
block-diagonal rotation matrix built from the paper's formula (tests/reference).

Deviations: ``rotary_dim`` may be smaller than the head dimension (partial rotary, as in
GPT-NeoX); the remaining channels pass through unrotated.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import PositiveInt, model_validator
from torch import Tensor

from llmevo.components.base import ModelDims, PositionEncoding, SpelledOneWay
from llmevo.errors import ConfigError
from llmevo.registry import Paper, Scaling, SearchDimension, register


class RopeConfig(SpelledOneWay):
    theta: float = 10_000.0
    rotary_dim: Annotated[PositiveInt | None, Scaling.HEAD_DIM] = None  # None: the whole head dimension

    def canonical(self, dims: ModelDims) -> RopeConfig:
        """None (the default) for a rotation over the whole head dimension, however written."""
        if self.rotary_dim == dims.head_dim:
            return self.model_copy(update={"rotary_dim": None})
        return self

    @model_validator(mode="after")
    def _even(self) -> RopeConfig:
        if self.rotary_dim is not None and self.rotary_dim % 2:
            raise ValueError(f"rotary_dim must be even, got {self.rotary_dim}")
        if self.theta <= 1.0:
            raise ValueError(f"theta must be > 1, got {self.theta}")
        return self


def rotary_frequencies(rotary_dim: int, theta: float) -> Tensor:
    """Inverse frequencies ``theta ** (-2i / rotary_dim)`` for i in [0, rotary_dim / 2)."""
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim
    return (theta ** -exponents).to(torch.float32)  # (rotary_dim / 2,)


def apply_rotary(x: Tensor, positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Rotate channel pairs (2i, 2i+1) of the first ``2 * len(inv_freq)`` channels of ``x``.

    x: (..., T, D); positions: broadcastable to (..., T), may be negative (used by the
    KV-cache relay to rotate by a position difference).

    In float32/float64 a pair (even, odd) is read as the complex number even + i odd, and
    the rotation by angle a is one complex multiply by cos a + i sin a: (even cos - odd sin)
    + i (even sin + odd cos), the same formula as the real path below in one kernel
    (about 3x cheaper forward and backward at llama_modern's shapes). Other dtypes (bf16
    under autocast has no complex type) take the real path.
    """
    rotary_dim = 2 * inv_freq.shape[0]
    angles = positions.to(torch.float32)[..., None] * inv_freq  # (..., T, rotary_dim/2)
    cos, sin = angles.cos(), angles.sin()
    rotated, tail = x[..., :rotary_dim], x[..., rotary_dim:]
    pairs = rotated.unflatten(-1, (-1, 2))  # (..., T, rotary_dim/2, 2)
    if x.dtype in (torch.float32, torch.float64):
        strides = pairs.stride()
        if pairs.stride(-1) != 1 or pairs.storage_offset() % 2 or any(n % 2 for n in strides[:-1]):
            pairs = pairs.contiguous()  # view_as_complex needs (re, im) adjacent and aligned
        turn = torch.complex(cos, sin).to(torch.complex64 if x.dtype == torch.float32 else torch.complex128)
        out = torch.view_as_real(torch.view_as_complex(pairs) * turn)  # (..., T, rotary_dim/2, 2)
    else:
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        even, odd = pairs[..., 0], pairs[..., 1]
        out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    out = out.flatten(-2)  # (..., T, rotary_dim)
    return out if tail.shape[-1] == 0 else torch.cat((out, tail), dim=-1)


@register(
    slot="position",
    name="rope",
    config=RopeConfig,
    paper=Paper(
        arxiv_id="2104.09864",
        title="RoFormer: Enhanced Transformer with Rotary Position Embedding",
        url="https://arxiv.org/abs/2104.09864",
        organization="Zhuiyi Technology",
    ),
    ablation="learned",
    implementation_status="full",
    baseline=True,
    evolve_integrated=True,
    scope=(
        "Rotary q/k rotation in every attention head of a 64-d, 2-layer model on WikiText-2, "
        "compared with learned absolute positions; not the paper's Chinese RoFormer pre-training "
        "or its long-text classification tasks."
    ),
    search_space={
        "theta": SearchDimension(choices=(1_000.0, 10_000.0, 100_000.0)),
        "rotary_dim": SearchDimension(choices=(8, 16)),
    },
)
class RotaryPosition(PositionEncoding):
    rotary = True

    def __init__(self, config: RopeConfig, dims: ModelDims):
        super().__init__()
        rotary_dim = config.rotary_dim or dims.head_dim
        if rotary_dim > dims.head_dim:
            raise ConfigError(
                f"rope: rotary_dim {rotary_dim} is larger than the head dimension {dims.head_dim}"
            )
        if rotary_dim % 2:  # the default, the whole head dimension, may be odd (d_model 15, 3 heads)
            raise ConfigError(
                f"rope: the head dimension {dims.head_dim} (d_model {dims.d_model} / {dims.n_heads} "
                "heads) is odd, and RoPE rotates channel pairs; choose heads whose width "
                "d_model / heads is even (or an even rope rotary_dim)")
        self.rotary_dim = rotary_dim
        self.register_buffer(
            "inv_freq", rotary_frequencies(rotary_dim, config.theta), persistent=False
        )

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        return apply_rotary(x, positions, self.inv_freq)  # (B, H, T, Dh)
