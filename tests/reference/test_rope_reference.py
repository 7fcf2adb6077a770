"""RoPE (arXiv 2104.09864) against its defining properties and the paper's rotation matrix."""

from __future__ import annotations

import math

import pytest
import torch

from llmevo.catalog import build_model
from llmevo.components.base import ModelDims
from llmevo.components.position.rope import (
    RopeConfig,
    RotaryPosition,
    apply_rotary,
    rotary_frequencies,
)
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig


def _rotation_matrix(position: float, dim: int, theta: float) -> torch.Tensor:
    """RoFormer eq. 15: block-diagonal 2x2 rotations by position * theta^(-2(i-1)/d), in float64."""
    matrix = torch.zeros(dim, dim, dtype=torch.float64)
    for i in range(dim // 2):
        angle = position * theta ** (-2 * i / dim)
        c, s = math.cos(angle), math.sin(angle)
        matrix[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    return matrix


@pytest.mark.parametrize("position", [0, 1, 5, 63, 1000])
def test_matches_explicit_rotation_matrix(position: int) -> None:
    dim, theta = 16, 10_000.0
    x = torch.randn(3, dim, generator=torch.Generator().manual_seed(position), dtype=torch.float64)
    expected = x @ _rotation_matrix(position, dim, theta).T  # (3, D): R(m) x per row
    got = apply_rotary(x.float()[None], torch.tensor([position]), rotary_frequencies(dim, theta))
    torch.testing.assert_close(got[0].double().expand_as(expected), expected, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize(("m", "n", "shift"), [(3, 1, 7), (10, 10, 5), (0, 40, 23), (17, 2, -2)])
def test_inner_product_depends_on_relative_position_only(m: int, n: int, shift: int) -> None:
    generator = torch.Generator().manual_seed(m * 100 + n)
    q, k = torch.randn(2, 16, generator=generator)
    inv_freq = rotary_frequencies(16, 10_000.0)

    def score(qm: int, kn: int) -> torch.Tensor:
        rq = apply_rotary(q[None], torch.tensor([qm]), inv_freq)[0]
        rk = apply_rotary(k[None], torch.tensor([kn]), inv_freq)[0]
        return rq @ rk

    torch.testing.assert_close(score(m, n), score(m + shift, n + shift), atol=1e-4, rtol=1e-4)
    if m != n:  # and it does depend on the relative position
        assert not torch.allclose(score(m, n), score(m, m), atol=1e-3)


def test_rotation_preserves_norm() -> None:
    x = torch.randn(2, 4, 9, 16)
    rotated = apply_rotary(x, torch.arange(9), rotary_frequencies(16, 10_000.0))
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))


def test_partial_rotary_leaves_the_tail_untouched() -> None:
    dims = ModelDims(vocab_size=8, d_model=64, n_layers=1, n_heads=4, max_seq_len=16)
    rope = RotaryPosition(RopeConfig(rotary_dim=8), dims)
    x = torch.randn(2, 4, 10, 16)
    rotated = rope.rotate(x, torch.arange(10))
    assert torch.equal(rotated[..., 8:], x[..., 8:])
    expected = apply_rotary(x[..., :8], torch.arange(10), rotary_frequencies(8, 10_000.0))
    torch.testing.assert_close(rotated[..., :8], expected)
    assert not torch.allclose(rotated[..., 1:, :8], x[..., 1:, :8])


def test_rotary_dim_larger_than_head_dim_is_rejected() -> None:
    with pytest.raises(ConfigError, match="rotary_dim 32 is larger than the head dimension 16"):
        build_model(ModelConfig().with_slot("position", "rope:rotary_dim=32"))


def test_odd_rotary_dim_is_rejected() -> None:
    with pytest.raises(ConfigError, match="rotary_dim must be even"):
        build_model(ModelConfig().with_slot("position", "rope:rotary_dim=7"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "odd_offset", "odd_head_dim"])
def test_complex_and_real_paths_equal_the_pair_formula(dtype, layout):
    """The complex-multiply path (fp32/fp64) and the real path (bf16) both equal the
    rotation written out pair by pair, whatever the input's strides and offset."""
    generator = torch.Generator().manual_seed(3)
    head_dim, rotary_dim = (9, 8) if layout == "odd_head_dim" else (16, 16)
    base = torch.randn(2, 7, 3, head_dim + 1, generator=generator, dtype=torch.float64)
    x = {"contiguous": base[..., :head_dim].contiguous().transpose(1, 2).contiguous(),
         "transposed": base[..., :head_dim].transpose(1, 2),  # (B, H, T, Dh) view, as in attention
         "odd_offset": base.transpose(1, 2)[..., 1:],  # storage offset 1: cannot view as complex
         "odd_head_dim": base[..., :head_dim].transpose(1, 2)}[layout].to(dtype)
    if layout == "odd_offset":
        head_dim = rotary_dim = head_dim  # 16 channels starting at an odd offset
    inv_freq = rotary_frequencies(rotary_dim, 10_000.0)
    positions = torch.arange(-2, 5)
    got = apply_rotary(x, positions, inv_freq)
    angles = positions.double()[:, None] * inv_freq.double()  # (T, rotary_dim / 2)
    cos, sin = angles.float().double().cos(), angles.float().double().sin()
    reference = x.double().clone()
    for i in range(rotary_dim // 2):
        even, odd = x[..., 2 * i].double(), x[..., 2 * i + 1].double()
        reference[..., 2 * i] = even * cos[:, i] - odd * sin[:, i]
        reference[..., 2 * i + 1] = even * sin[:, i] + odd * cos[:, i]
    tolerance = {torch.float32: 1e-5, torch.float64: 1e-6, torch.bfloat16: 5e-2}[dtype]
    assert got.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got.double(), reference, rtol=0, atol=tolerance)
