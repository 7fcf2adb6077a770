"""llama_modern as the SPEC defines it, and genome validation before training."""

from __future__ import annotations

import pytest
import torch

from llmevo.catalog import build_model
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice


def test_llama_modern_has_exactly_139584_parameters():
    model = build_model(ModelConfig())
    # embedding 512*64 (tied head) + 2 * (4*64*64 attention + 3*64*192 SwiGLU + 2*64 norms) + 64
    expected = 512 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 192 + 2 * 64) + 64
    assert expected == 139_584
    assert model.num_parameters() == expected


def test_tied_embeddings_share_storage():
    model = build_model(ModelConfig())
    assert model.head.weight.data_ptr() == model.embedding.weight.data_ptr()


def test_learned_position_ablation_adds_its_table():
    model = build_model(ModelConfig().with_slot("position", "learned"))
    assert model.num_parameters() == 139_584 + 64 * 64


def test_logits_shape_and_causality():
    torch.manual_seed(0)
    model = build_model(ModelConfig()).eval()
    tokens = torch.randint(0, 512, (2, 16))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 512
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert a.shape == (2, 16, 512)
    torch.testing.assert_close(a[:, :10], b[:, :10], rtol=0, atol=0)
    assert not torch.allclose(a[:, 10:], b[:, 10:])


@pytest.mark.parametrize(
    ("slot", "choice", "message"),
    [
        ("position", "rope:rotary_dim=32", "rotary_dim 32 is larger than the head dimension 16"),
        ("position", "rope:rotary_dim=3", "rotary_dim must be even"),
        ("attention", "mha:kv_heads=3", "kv_heads 3 does not divide heads 4"),
        ("position", "rotary", "unknown position component 'rotary'; known:"),
        ("feedforward", "swiglu:width=3", "swiglu"),
    ],
)
def test_invalid_genomes_fail_at_build_with_the_reason(slot, choice, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        build_model(ModelConfig().with_slot(slot, choice))


def test_component_choice_parses_text_form():
    choice = ComponentChoice.parse("rope:theta=500000,rotary_dim=8")
    assert choice == ComponentChoice(name="rope", config={"theta": 500000, "rotary_dim": 8})
    assert ModelConfig(position="rope:theta=1000").position.config == {"theta": 1000}
