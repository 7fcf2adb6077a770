"""Comparison plans: one slot differs; BLT arms see the same text in bytes."""

from __future__ import annotations

import re

import pytest

from llmevo.errors import ConfigError
from llmevo.experiments.plans import plan_comparison
from llmevo.model.config import ModelConfig
from llmevo.registry import MODEL_SLOTS, ComponentChoice
from llmevo.runner.presets import get_preset
from llmevo.runner.views import prepare_bpe_data, prepare_byte_data


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


# --- --against OTHER: llama_modern's own choice (or another of the slot) as the baseline ---


@pytest.mark.parametrize(("name", "other"), [("alibi", "rope"), ("relu2", "swiglu"),
                                             ("geglu", "swiglu")])
def test_against_llama_moderns_choice_makes_the_baseline_llama_modern_itself(name, other):
    comparison = plan_comparison(name, against=other)
    slot = comparison.spec.slot
    assert comparison.baseline.model == ModelConfig()  # config and all: exactly llama_modern
    assert comparison.method.model == ModelConfig().with_slot(slot, name)
    assert comparison.baseline.name == f"llama_modern[{slot}={other}]"
    assert comparison.against == other
    assert comparison.baseline.optimizer == comparison.method.optimizer


def test_against_another_choice_differs_in_the_slot_only_with_its_config():
    comparison = plan_comparison("geglu", against="swiglu:hidden=128")
    base, method = comparison.baseline.model, comparison.method.model
    assert base.feedforward == ComponentChoice(name="swiglu", config={"hidden": 128})
    assert method.feedforward.name == "geglu"
    for other in MODEL_SLOTS:
        if other != "feedforward":
            assert getattr(base, other) == getattr(method, other)
    assert comparison.against == "swiglu:hidden=128"
    assert comparison.baseline.name == "llama_modern[feedforward=swiglu:hidden=128]"
    assert plan_comparison("geglu").against is None  # the declared ablation: no against


def test_against_in_the_optimizer_slot_changes_the_optimizer_only():
    comparison = plan_comparison("lion", against="muon")
    assert comparison.baseline.model == comparison.method.model
    assert (comparison.baseline.optimizer.name, comparison.method.optimizer.name) == ("muon", "lion")


@pytest.mark.parametrize(
    ("name", "other", "message"),
    [
        ("alibi", "nosuch", "--against nosuch: unknown position component; known: alibi,"),
        ("alibi", "swiglu", "--against swiglu: it fills the feedforward slot, but 'alibi' fills position"),
        ("alibi", "alibi", "--against alibi: that is the method itself"),
        ("alibi", "sinusoidal", "already the declared ablation of 'alibi'; drop --against"),
        ("alibi", "rope:nosuch=1", "position component 'rope': nosuch: Extra inputs are not permitted"),
        ("geglu", "swiglu:hidden=0", "feedforward component 'swiglu': hidden: Input should be greater than 0"),
        ("alibi", "", "--against needs a component name"),
        ("dpo", "none", "'dpo' is a post-training method"),
        ("blt-bytes", "rope", "'blt-bytes' is a whole architecture"),
        ("rope-relay", "rope", "llmevo diagnose rope-relay"),
    ],
)
def test_bad_against_is_refused(name, other, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        plan_comparison(name, against=other)
    assert "\n" not in str(error.value)
