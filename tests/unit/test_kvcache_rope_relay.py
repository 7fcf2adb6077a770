"""Unit tests of the rope-relay pure functions, selection rules and bad-input errors."""

from __future__ import annotations

import pytest
import torch

from llmevo.catalog import full_registry
from llmevo.components.base import KVCacheLayer
from llmevo.components.kvcache.rope_relay import (
    SELECTION_RULES,
    RopeRelayConfig,
    RopeRelayPolicy,
    SelectionInput,
    relay_compact,
    rerotate_keys,
    selection_rule,
)
from llmevo.components.position.rope import apply_rotary, rotary_frequencies
from llmevo.errors import ConfigError

INV_FREQ = rotary_frequencies(8, 10_000.0)


def _cache(seed: int = 0, heads: int = 2, slots: int = 8, dim: int = 12):
    generator = torch.Generator().manual_seed(seed)
    raw = torch.randn(1, heads, slots, dim, generator=generator)
    positions = torch.randperm(40, generator=generator)[:slots].sort().values
    keys = apply_rotary(raw, positions, INV_FREQ)
    values = torch.randn(1, heads, slots, dim, generator=generator)
    return raw, keys, values, positions


def test_rerotate_moves_keys_to_new_positions_and_keeps_tail():
    raw, keys, _, positions = _cache()
    new = torch.arange(8)
    moved = rerotate_keys(keys, positions, new, INV_FREQ)
    assert torch.allclose(moved, apply_rotary(raw, new, INV_FREQ), atol=1e-5)
    assert torch.equal(moved[..., 8:], keys[..., 8:])


def test_compaction_keeps_order_values_and_gives_contiguous_positions():
    _, keys, values, positions = _cache()
    generator = torch.Generator().manual_seed(3)
    out = relay_compact(
        keys,
        values,
        positions,
        [6, 2],
        INV_FREQ,
        select=SELECTION_RULES["random"],
        generator=generator,
    )
    assert out.lengths.tolist() == [6, 2]
    for head, count in enumerate([6, 2]):
        kept = out.slots[head, :count]
        assert bool((kept.diff() > 0).all())
        assert torch.equal(out.values[0, head, :count], values[0, head, kept])
        assert torch.equal(out.positions[head, :count], torch.arange(count))
        assert torch.equal(out.original_positions[head, :count], positions[kept])
        assert not out.valid[head, count:].any()
        assert torch.count_nonzero(out.keys[0, head, count:]) == 0
    assert out.query_positions(4)[1].tolist() == [2, 3, 4, 5]


def test_without_rephase_keys_and_positions_stay_original():
    _, keys, values, positions = _cache()
    out = relay_compact(keys, values, positions, [4, 4], INV_FREQ, rephase=False)
    assert torch.equal(out.keys, keys[:, :, 4:])
    assert torch.equal(out.positions[0], positions[4:])


def test_selection_rules():
    positions = torch.arange(10, 20)
    mass = torch.tensor([5.0, 0, 0, 4, 0, 0, 0, 0, 3, 0])
    state = SelectionInput(positions=positions, attention_mass=mass, generator=None)
    assert selection_rule("recency")(state, 3).tolist() == [7, 8, 9]
    assert selection_rule("attention_mass")(state, 3).tolist() == [0, 3, 8]
    draw = [
        selection_rule("random")(
            SelectionInput(positions, None, torch.Generator().manual_seed(seed)), 4
        ).tolist()
        for seed in (1, 1, 2)
    ]
    assert draw[0] == draw[1] and draw[0] != draw[2]
    with pytest.raises(ConfigError, match="known: attention_mass, random, recency"):
        selection_rule("lru")
    with pytest.raises(ConfigError, match="attention mass"):
        selection_rule("attention_mass")(SelectionInput(positions, None, None), 2)


@pytest.mark.parametrize(
    ("budgets", "inv_freq", "message"),
    [
        ([9, 2], INV_FREQ, "must lie in 1..8"),
        ([0, 2], INV_FREQ, "must lie in 1..8"),
        ([2], INV_FREQ, "expected 2 per-head budgets"),
        ([2, 2], rotary_frequencies(14, 10_000.0), "larger than key_dim"),
    ],
)
def test_bad_input_is_refused_before_work(budgets, inv_freq, message):
    _, keys, values, positions = _cache()
    with pytest.raises(ConfigError, match=message):
        relay_compact(keys, values, positions, budgets, inv_freq)


def test_odd_rotary_dim_is_refused():
    _, keys, _, positions = _cache()
    with pytest.raises(ConfigError, match="positive even"):
        rerotate_keys(keys, positions, positions, torch.ones(0))


def test_policy_compacts_a_layer_cache_and_tracks_mass():
    _, keys, values, positions = _cache()
    layer = KVCacheLayer()
    layer.update(keys, values, positions)
    policy = RopeRelayPolicy(RopeRelayConfig(capacity=6, budget=3, selection="attention_mass"))
    assert policy.needs_compaction(len(layer))
    mass = torch.arange(16, dtype=torch.float32).view(2, 8)
    kept = policy.compact(layer, INV_FREQ, mass)
    assert len(layer) == 3 and layer.positions.tolist() == [0, 1, 2]
    assert kept.tolist() == [[5.0, 6.0, 7.0], [13.0, 14.0, 15.0]]


def test_registered_with_manifest():
    spec = full_registry().get("kv_cache", "rope-relay")
    assert spec.manifest.manifest_ref == "foundation-models:rope-relay"
    assert spec.manifest.paper.arxiv_id == "2610.21126"
    with pytest.raises(ConfigError, match="budget"):
        spec.make_config({"capacity": 4, "budget": 8})
