"""LayerNorm (1607.06450) and the post-norm / sandwich block layouts vs their formulas."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from llmevo.catalog import build_model
from llmevo.components.base import AttentionContext
from llmevo.components.norm.layernorm import LayerNorm, LayerNormConfig, layer_norm
from llmevo.model.config import ModelConfig


def test_layer_norm_matches_torch_and_hand_computation() -> None:
    x = torch.randn(3, 5, 8)
    weight, bias = torch.randn(8), torch.randn(8)
    torch.testing.assert_close(layer_norm(x, weight, bias, 1e-5), F.layer_norm(x, (8,), weight, bias, 1e-5))
    row = [1.0, 2.0, 3.0, 6.0]  # mean 3, biased variance 3.5
    expected = [(v - 3.0) / (3.5 + 1e-5) ** 0.5 for v in row]
    got = layer_norm(torch.tensor(row), torch.ones(4), None, 1e-5)
    assert got.tolist() == pytest.approx(expected, abs=1e-6)


def test_layer_norm_module_bias_option() -> None:
    assert LayerNorm(LayerNormConfig(), 8).bias is not None
    module = LayerNorm(LayerNormConfig(bias=False), 8)
    assert module.bias is None and sum(p.numel() for p in module.parameters()) == 8


def _first_block(block_name: str):
    torch.manual_seed(0)
    model = build_model(ModelConfig().with_slot("block", block_name).with_slot("norm", "layernorm"))
    with torch.no_grad():  # non-trivial gains and biases so that every norm matters
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    block = model.blocks[0]
    context = AttentionContext(positions=torch.arange(6), position=model.position)
    return block, context


def test_post_norm_block_formula() -> None:
    block, context = _first_block("post_norm")
    x = torch.randn(2, 6, 64)
    h = block.attention_norm(x + block.attention(x, context))
    expected = block.feed_forward_norm(h + block.feed_forward(h))
    torch.testing.assert_close(block(x, context), expected)
    # the output is normalised: per-token mean equals the final bias mean, not the input's
    ln = block.feed_forward_norm
    normalised = (block(x, context) - ln.bias) / ln.weight
    torch.testing.assert_close(normalised.mean(-1), torch.zeros(2, 6), atol=1e-5, rtol=0)


def test_sandwich_block_formula() -> None:
    block, context = _first_block("sandwich")
    x = torch.randn(2, 6, 64)
    h = x + block.attention_output_norm(block.attention(block.attention_norm(x), context))
    expected = h + block.feed_forward_output_norm(block.feed_forward(block.feed_forward_norm(h)))
    torch.testing.assert_close(block(x, context), expected)


def test_sandwich_has_two_more_norms_per_layer() -> None:
    pre = build_model(ModelConfig()).num_parameters()
    sandwich = build_model(ModelConfig().with_slot("block", "sandwich")).num_parameters()
    assert sandwich - pre == 2 * 2 * 64  # two layers, two output norms of 64 gains


def test_rms_norm_matches_torch_and_hand_computation() -> None:
    from llmevo.components.norm.rmsnorm import RMSNorm, RMSNormConfig, rms_norm

    x = torch.randn(3, 5, 8)
    weight = torch.randn(8)
    torch.testing.assert_close(rms_norm(x, weight, 1e-6), F.rms_norm(x, (8,), weight, 1e-6))
    for dtype in (torch.float32, torch.float64):  # vs the formula written out element by element
        xd, wd = x.to(dtype), weight.to(dtype)
        rms = torch.tensor([[(sum(v * v for v in xd[i, j].tolist()) / 8 + 1e-6) ** 0.5
                             for j in range(5)] for i in range(3)], dtype=dtype)
        torch.testing.assert_close(rms_norm(xd, wd, 1e-6), xd / rms[..., None] * wd,
                                   rtol=1e-14 if dtype == torch.float64 else 1e-6, atol=0)
    # a bf16 input against a float32 gain (autocast) promotes to float32, as the formula does
    mixed = rms_norm(x.bfloat16(), weight, 1e-6)
    assert mixed.dtype == torch.float32
    xb = x.bfloat16()
    torch.testing.assert_close(mixed, xb * torch.rsqrt(xb.pow(2).mean(-1, keepdim=True) + 1e-6) * weight)
    row = [3.0, 4.0, 0.0, 0.0]  # mean of squares 25/4, rms 2.5; no mean is subtracted
    got = rms_norm(torch.tensor(row), torch.tensor([1.0, 2.0, 1.0, 1.0]), 1e-6)
    scale = 1.0 / (6.25 + 1e-6) ** 0.5
    assert got.tolist() == pytest.approx([3.0 * scale, 8.0 * scale, 0.0, 0.0], abs=1e-6)
    module = RMSNorm(RMSNormConfig(eps=0.5), 4)  # eps enters under the square root
    expected = [v / (6.25 + 0.5) ** 0.5 for v in row]
    assert module(torch.tensor(row)).tolist() == pytest.approx(expected, abs=1e-6)
    assert [n for n, _ in module.named_parameters()] == ["weight"]  # a gain, no bias
