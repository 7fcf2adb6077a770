"""Attention is built knowing its layer: block i's attention gets ``layer_index`` i.

A depth-dependent component (here the Differential Transformer's lambda_init schedule,
arXiv 2410.05258, section 2.1) needs nothing outside its own module. It is registered only
for these tests, in a registry of its own that the model builder is pointed at.
"""

from __future__ import annotations

import math

import pytest
import torch

import llmevo.model.transformer as transformer
from llmevo.catalog import build_model, full_registry
from llmevo.components.attention.mha import CausalSelfAttention
from llmevo.components.base import ModelDims
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentSpec, EmptyConfig, Manifest, Registry

BUILT: list[int] = []  # layer indices in construction order


class DepthScaledAttention(CausalSelfAttention):
    """Plain attention that records its layer and derives lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))."""

    def __init__(self, config: EmptyConfig, dims: ModelDims, layer_index: int):
        super().__init__(dims, None)
        self.layer_index = layer_index
        self.lambda_init = 0.8 - 0.6 * math.exp(-0.3 * layer_index)  # l = layer_index + 1
        BUILT.append(layer_index)


@pytest.fixture
def depth_scaled(monkeypatch: pytest.MonkeyPatch) -> str:
    """The name of the test-only attention component, visible to the model builder."""
    registry = Registry()
    for spec in full_registry().all():
        registry.add(spec)
    manifest = Manifest(name="depth_scaled", slot="attention", manifest_ref="test:depth_scaled")
    registry.add(ComponentSpec(cls=DepthScaledAttention, config_cls=EmptyConfig, manifest=manifest))
    monkeypatch.setattr(transformer, "REGISTRY", registry)
    BUILT.clear()
    return "depth_scaled"


@pytest.mark.parametrize("block", full_registry().names("block"))
def test_each_layer_receives_its_index_in_order(depth_scaled: str, block: str) -> None:
    config = ModelConfig(n_layers=4).with_slot("attention", depth_scaled).with_slot("block", block)
    model = build_model(config)
    assert BUILT == [0, 1, 2, 3]
    assert [layer.attention.layer_index for layer in model.blocks] == [0, 1, 2, 3]
    assert [round(layer.attention.lambda_init, 4) for layer in model.blocks] == [
        0.2, 0.3555, 0.4707, 0.5561]
    logits = model(torch.randint(0, 512, (2, 8), generator=torch.Generator().manual_seed(0)))
    assert logits.shape == (2, 8, 512) and torch.isfinite(logits).all()


def test_blt_stacks_number_their_own_layers(depth_scaled: str) -> None:
    """Local encoder, latent transformer and local decoder each count their blocks from 0."""
    config = ModelConfig(
        architecture="blt", n_layers=3, attention=depth_scaled,
        extra={"local_attention": {"name": depth_scaled}, "encoder_layers": 2,
               "decoder_layers": 4},
    )
    core = build_model(config).core
    assert BUILT == [0, 1, 0, 1, 2, 0, 1, 2, 3]  # encoder, latent, decoder
    for blocks, depth in ((core.encoder_blocks, 2), (core.latent_blocks, 3), (core.decoder_blocks, 4)):
        assert [layer.attention.layer_index for layer in blocks] == list(range(depth))
