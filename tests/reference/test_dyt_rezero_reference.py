"""DyT (2503.10622) against numpy's tanh and its closed-form alpha gradient; the ReZero block
(2003.04887) against its formula composed by hand, the identity at initialisation and its
closed-form alpha gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llmevo.catalog import build_model
from llmevo.components.base import AttentionContext
from llmevo.components.norm.dyt import DynamicTanh, DyTConfig
from llmevo.model.config import ModelConfig

# --- DyT --------------------------------------------------------------------------------


def test_dyt_is_the_formula_computed_by_numpy() -> None:
    torch.manual_seed(0)
    norm = DynamicTanh(DyTConfig(alpha_init=0.7), 6).double()
    with torch.no_grad():  # alpha exactly 0.7 in float64; non-trivial gain and bias
        norm.alpha.fill_(0.7)
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(3, 4, 6, dtype=torch.float64) * 3.0
    gamma, beta = norm.weight.detach().numpy(), norm.bias.detach().numpy()
    expected = gamma * np.tanh(0.7 * x.numpy()) + beta
    np.testing.assert_allclose(norm(x).detach().numpy(), expected, rtol=1e-12, atol=1e-12)


def test_dyt_initialisation_and_the_bias_option() -> None:
    norm = DynamicTanh(DyTConfig(), 8)
    assert norm.alpha.tolist() == [0.5] and norm.alpha.shape == (1,)  # one scalar per layer
    assert torch.equal(norm.weight, torch.ones(8)) and torch.equal(norm.bias, torch.zeros(8))
    # at initialisation: tanh(x / 2), element by element (no statistics over the features)
    row = [-4.0, -1.0, 0.0, 0.5, 2.0, 6.0, 9.0, 30.0]
    got = norm(torch.tensor(row)).tolist()
    assert got == pytest.approx([float(np.tanh(v / 2)) for v in row], abs=1e-6)
    no_bias = DynamicTanh(DyTConfig(bias=False), 8)
    assert no_bias.bias is None and sum(p.numel() for p in no_bias.parameters()) == 8 + 1


def test_dyt_alpha_gradient_has_its_closed_form() -> None:
    """d/d alpha of sum(gamma tanh(alpha x) + beta) = sum(gamma x (1 - tanh^2(alpha x)))."""
    torch.manual_seed(1)
    norm = DynamicTanh(DyTConfig(), 5).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(4, 5, dtype=torch.float64)
    norm(x).sum().backward()
    gamma, alpha = norm.weight.detach().numpy(), 0.5
    expected = np.sum(gamma * x.numpy() * (1 - np.tanh(alpha * x.numpy()) ** 2))
    assert norm.alpha.grad.item() == pytest.approx(expected, rel=1e-12)


def test_dyt_fills_every_norm_of_the_model() -> None:
    model = build_model(ModelConfig().with_slot("norm", "dyt"))
    norms = [m for m in model.modules() if isinstance(m, DynamicTanh)]
    assert len(norms) == 2 * 2 + 1  # two per pre-norm block, and the final norm
    base = build_model(ModelConfig()).num_parameters()
    assert model.num_parameters() - base == len(norms) * (64 + 1)  # a bias and an alpha each


# --- ReZero -----------------------------------------------------------------------------


def _rezero_block(alpha: float):
    torch.manual_seed(0)
    model = build_model(ModelConfig().with_slot("block", f"rezero:alpha_init={alpha}"))
    context = AttentionContext(positions=torch.arange(6), position=model.position)
    return model, model.blocks[0], context


def test_rezero_block_formula() -> None:
    _, block, context = _rezero_block(0.37)
    x = torch.randn(2, 6, 64)
    h = x + 0.37 * block.attention(x, context)
    expected = h + 0.37 * block.feed_forward(h)
    torch.testing.assert_close(block(x, context), expected)
    assert not any("norm" in name for name, _ in block.named_parameters())  # no norm in a block


def test_rezero_starts_as_the_identity_and_its_alpha_learns() -> None:
    model, block, context = _rezero_block(0.0)
    assert block.alpha.tolist() == [0.0]
    x = torch.randn(2, 6, 64, requires_grad=True)
    y = block(x, context)
    assert torch.equal(y, x)  # every layer is the identity at initialisation
    # dL/d alpha = <dL/dy, attn(x)> + <dL/dy, ffn(x + alpha attn(x))> at alpha = 0
    upstream = torch.randn(2, 6, 64)
    (y * upstream).sum().backward()
    with torch.no_grad():
        expected = (upstream * block.attention(x, context)).sum() + (upstream * block.feed_forward(x)).sum()
    torch.testing.assert_close(block.alpha.grad, expected.reshape(1), rtol=1e-5, atol=1e-6)
    # the whole model at initialisation: the final norm and the head over the embeddings
    tokens = torch.randint(0, 512, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        direct = model.head(model.final_norm(model.embedding(tokens)))
        torch.testing.assert_close(model(tokens), direct)


def test_rezero_adds_one_scalar_per_layer_and_drops_the_block_norms() -> None:
    base = build_model(ModelConfig()).num_parameters()
    rezero = build_model(ModelConfig().with_slot("block", "rezero")).num_parameters()
    assert rezero - base == 2 * (1 - 2 * 64)  # per layer: one alpha, two RMSNorm gains fewer
