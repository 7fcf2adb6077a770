"""Comparison plans: one slot differs; BLT arms see the same text in bytes."""

from __future__ import annotations

import pytest

from llmevo.errors import ConfigError
from llmevo.experiments.arm_data import prepare_bpe_data, prepare_byte_data
from llmevo.experiments.plans import plan_comparison
from llmevo.experiments.presets import get_preset
from llmevo.model.config import MODEL_SLOTS


@pytest.mark.parametrize("name", ["rope", "alibi", "qk_norm", "geglu", "layernorm", "sandwich"])
def test_model_slot_arms_differ_in_that_slot_only(name):
    comparison = plan_comparison(name)
    slot = comparison.spec.slot
    base, method = comparison.baseline.model, comparison.method.model
    assert getattr(method, slot).name == name
    assert getattr(base, slot).name == comparison.spec.manifest.ablation
    for other in MODEL_SLOTS:
        if other != slot:
            assert getattr(base, other) == getattr(method, other)
    assert comparison.baseline.optimizer == comparison.method.optimizer


def test_optimizer_arms_differ_in_the_optimizer_only():
    comparison = plan_comparison("muon")
    assert comparison.baseline.model == comparison.method.model
    assert (comparison.baseline.optimizer.name, comparison.method.optimizer.name) == ("adamw", "muon")


def test_components_without_an_l2_reproduction_say_what_to_do():
    with pytest.raises(ConfigError, match="llmevo diagnose rope-relay"):
        plan_comparison("rope-relay")


def test_blt_bytes_is_judged_in_bits_per_byte():
    comparison = plan_comparison("blt-bytes")
    assert comparison.metric == "bits_per_byte" and comparison.objective == "composite_bpb"
    assert (comparison.baseline.data, comparison.method.data) == ("bpe", "bytes")


def test_byte_view_covers_exactly_the_text_of_the_token_view(smoke_corpus, data_dir):
    preset = get_preset("smoke")
    tokens = prepare_bpe_data(smoke_corpus, preset, data_dir, 64)
    data = prepare_byte_data(smoke_corpus, preset, data_dir, 64)
    assert bytes(data.stream.tolist()) == smoke_corpus.texts["train"].encode("utf-8")
    assert bytes(data.validation.tolist()) == smoke_corpus.texts["validation"].encode("utf-8")
    assert data.seq_len == round(64 * smoke_corpus.bytes_per_token("train"))
    # the same text length per step: byte windows carry as many bytes as token windows, on average
    token_text = int(smoke_corpus.token_bytes[tokens.stream].sum()) / tokens.stream.numel() * 64
    assert abs(data.seq_len - token_text) / token_text < 0.1
