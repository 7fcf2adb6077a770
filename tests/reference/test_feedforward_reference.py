"""GEGLU (2002.05202), GELU MLP (1606.08415) and squared ReLU (2109.08668) vs their formulas."""

from __future__ import annotations

import math

import pytest
import torch

from llmevo.catalog import build_model
from llmevo.components.base import ModelDims
from llmevo.components.feedforward.geglu import GEGLU
from llmevo.components.feedforward.gelu import GeluMLP, PlainConfig
from llmevo.components.feedforward.relu2 import SquaredReluMLP
from llmevo.components.feedforward.swiglu import GatedConfig, SwiGLU
from llmevo.model.config import ModelConfig

DIMS = ModelDims(vocab_size=16, d_model=64, n_layers=1, n_heads=4, max_seq_len=32)


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def test_geglu_formula() -> None:
    torch.manual_seed(0)
    ff = GEGLU(GatedConfig(hidden=48), DIMS)
    x = torch.randn(2, 5, 64)
    w1, w3, w2 = ff.gate.weight, ff.up.weight, ff.down.weight
    expected = (_gelu(x @ w1.T) * (x @ w3.T)) @ w2.T
    torch.testing.assert_close(ff(x), expected, atol=1e-6, rtol=1e-5)


def test_gelu_mlp_formula() -> None:
    torch.manual_seed(0)
    ff = GeluMLP(PlainConfig(hidden=40), DIMS)
    x = torch.randn(2, 5, 64)
    expected = _gelu(x @ ff.up.weight.T) @ ff.down.weight.T
    torch.testing.assert_close(ff(x), expected, atol=1e-6, rtol=1e-5)


def test_squared_relu_formula() -> None:
    torch.manual_seed(0)
    ff = SquaredReluMLP(PlainConfig(hidden=40), DIMS)
    x = torch.randn(2, 5, 64)
    expected = (torch.clamp(x @ ff.up.weight.T, min=0) ** 2) @ ff.down.weight.T
    torch.testing.assert_close(ff(x), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["gelu", "relu2", "geglu"])
def test_default_sizes_match_swiglu_parameter_count(name: str) -> None:
    swiglu = sum(p.numel() for p in SwiGLU(GatedConfig(), DIMS).parameters())
    model = build_model(ModelConfig().with_slot("feedforward", name))
    assert model.num_parameters() == 139_584
    assert swiglu == 3 * 64 * 192


def test_hidden_must_be_positive() -> None:
    from llmevo.errors import ConfigError

    with pytest.raises(ConfigError, match="feedforward component 'gelu': hidden"):
        build_model(ModelConfig().with_slot("feedforward", "gelu:hidden=0"))


def test_swiglu_formula() -> None:
    """``W2 (SiLU(W1 x) * W3 x)`` with SiLU written as ``x * sigmoid(x)`` (2002.05202, eq. 5)."""
    torch.manual_seed(0)
    ff = SwiGLU(GatedConfig(hidden=48), DIMS)
    x = torch.randn(2, 5, 64)
    w1, w3, w2 = ff.gate.weight, ff.up.weight, ff.down.weight
    gate = x @ w1.T
    expected = ((gate * torch.sigmoid(gate)) * (x @ w3.T)) @ w2.T
    torch.testing.assert_close(ff(x), expected, atol=1e-6, rtol=1e-5)


def test_swiglu_hand_computed() -> None:
    """One input, hidden 2, weights chosen by hand: silu(1) = 1/(1+e^-1), silu(-2) = -2/(1+e^2)."""
    dims = ModelDims(vocab_size=4, d_model=2, n_layers=1, n_heads=1, max_seq_len=4)
    ff = SwiGLU(GatedConfig(hidden=2), dims)
    with torch.no_grad():
        ff.gate.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))  # gate = (x0, -x1)
        ff.up.weight.copy_(torch.tensor([[2.0, 0.0], [1.0, 1.0]]))  # up = (2 x0, x0 + x1)
        ff.down.weight.copy_(torch.tensor([[1.0, 1.0], [0.0, 3.0]]))
    x = torch.tensor([[[1.0, 2.0]]])
    silu1, silu_m2 = 1.0 / (1.0 + math.exp(-1.0)), -2.0 / (1.0 + math.exp(2.0))
    hidden = [silu1 * 2.0, silu_m2 * 3.0]
    expected = [hidden[0] + hidden[1], 3.0 * hidden[1]]
    assert ff(x).flatten().tolist() == pytest.approx(expected, abs=1e-6)
