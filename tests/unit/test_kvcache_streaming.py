"""Streaming evaluation with the rope-relay policy on a small random model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from llmevo.catalog import build_model
from llmevo.components.kvcache.rope_relay import RopeRelayConfig
from llmevo.errors import ConfigError
from llmevo.inference.streaming import entry_attention_mass, stream_nll
from llmevo.model.config import ModelConfig

SMALL = {"vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 32}


def _model(position: str = "rope"):
    torch.manual_seed(0)
    return build_model(ModelConfig(**SMALL, position=position)).eval()


TOKENS = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(5))


def test_full_cache_stream_equals_one_forward():
    model = _model()
    with torch.no_grad():
        logits = model(TOKENS[None, :-1])[0]
    expected = float(F.cross_entropy(logits, TOKENS[1:]))
    assert stream_nll(model, TOKENS, None) == pytest.approx(expected, abs=1e-5)


def test_recency_relay_equals_original_positions():
    """A contiguous window keeps every distance, so re-phasing changes nothing."""
    model = _model()
    losses = [
        stream_nll(
            model, TOKENS, RopeRelayConfig(capacity=12, budget=6, selection="recency", rephase=r)
        )
        for r in (True, False)
    ]
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    assert losses[0] != pytest.approx(stream_nll(model, TOKENS, None), abs=1e-4)


def test_attention_mass_relay_differs_from_original_positions():
    model = _model()
    losses = [
        stream_nll(model, TOKENS, RopeRelayConfig(capacity=12, budget=6, rephase=r))
        for r in (True, False)
    ]
    assert abs(losses[0] - losses[1]) > 1e-6


def test_entry_attention_mass_sums_to_query_count():
    queries = torch.randn(1, 4, 3, 8)
    keys = torch.randn(1, 2, 7, 8)
    mass = entry_attention_mass(queries, keys, n_heads=4, scale=8**-0.5)
    assert mass.shape == (2, 7)
    assert float(mass.sum()) == pytest.approx(4 * 3, rel=1e-5)
    assert float(mass[:, 6].sum()) > 0 and float(mass[:, 5].min()) >= 0


def test_relay_needs_rotary_positions():
    with pytest.raises(ConfigError, match="rotary"):
        stream_nll(_model("learned"), TOKENS[:10], RopeRelayConfig(capacity=8, budget=4))
