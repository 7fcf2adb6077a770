"""The metric formulas against hand-computed values and the reference artifact's numbers."""

from __future__ import annotations

import math

import pytest

from llmevo.errors import ConfigError
from llmevo.eval import metrics

REFERENCE_LM_LOSS = 6.043058142066002
REFERENCE_INSTRUCTION_LOSS = 6.072489857673645
REFERENCE_PRIMARY = -6.953931620717048
REFERENCE_PERPLEXITY = 421.17909291166296


def test_perplexity_is_exp_of_loss():
    assert metrics.perplexity(0.0) == 1.0
    assert metrics.perplexity(math.log(512.0)) == pytest.approx(512.0, rel=1e-12)
    assert metrics.perplexity(REFERENCE_LM_LOSS) == pytest.approx(REFERENCE_PERPLEXITY, rel=1e-12)


def test_bits_per_byte_converts_nats_to_bits_per_byte():
    # 8 bytes each predicted with probability 1/2: 8 * ln 2 nats -> exactly 1 bit per byte.
    assert metrics.bits_per_byte(8 * math.log(2.0), 8) == pytest.approx(1.0, abs=1e-15)
    # 100 nats over 50 bytes = 2 nats/byte = 2 / ln 2 bits/byte.
    assert metrics.bits_per_byte(100.0, 50) == pytest.approx(2.0 / math.log(2.0), rel=1e-15)
    with pytest.raises(ConfigError):
        metrics.bits_per_byte(1.0, 0)


def test_primary_matches_reference_artifact():
    value = metrics.primary(REFERENCE_LM_LOSS, REFERENCE_INSTRUCTION_LOSS)
    assert abs(value - REFERENCE_PRIMARY) < 1e-12
    assert metrics.primary(2.0, 4.0) == pytest.approx(-2.6, abs=1e-15)


def test_public_composite_counts_unscored_terms_as_zero():
    assert metrics.public_composite(-2.6) == -2.6
    assert metrics.public_composite(-2.6, preference_loss=1.0) == pytest.approx(-2.7, abs=1e-15)
    assert metrics.public_composite(-2.6, reasoning_nll=2.0) == pytest.approx(-2.7, abs=1e-15)
    # -2.6 - 0.10*0.5 - 0.05*3.0 = -2.6 - 0.05 - 0.15 = -2.8
    assert metrics.public_composite(-2.6, 0.5, 3.0) == pytest.approx(-2.8, abs=1e-15)
    assert metrics.composite_loss(-2.8) == 2.8


def test_composite_bpb_is_a_loss_with_the_same_weights():
    # 1.5 + 0.15*2.0 + 0.10*0.5 + 0.05*3.0 = 1.5 + 0.3 + 0.05 + 0.15 = 2.0
    assert metrics.composite_bpb(1.5, 2.0, 0.5, 3.0) == pytest.approx(2.0, abs=1e-15)
    assert metrics.composite_bpb(1.5, 2.0) == pytest.approx(1.8, abs=1e-15)


def test_fitness_objectives_and_unknown_objective():
    arm = {"public_composite": -2.8, "composite_bpb": 2.0}
    assert metrics.fitness(arm) == -2.8
    assert metrics.fitness(arm, "composite_bpb") == -2.0
    with pytest.raises(ConfigError, match="composite_bpb.*public_composite"):
        metrics.fitness(arm, "accuracy")
    with pytest.raises(ConfigError, match="composite_bpb"):
        metrics.fitness({"public_composite": -2.8}, "composite_bpb")


def test_derive_arm_metrics_core_suite_reproduces_reference_arm():
    derived = metrics.derive_arm_metrics(
        {"lm_loss": REFERENCE_LM_LOSS, "instruction_loss": REFERENCE_INSTRUCTION_LOSS}
    )
    assert abs(derived["primary"] - REFERENCE_PRIMARY) < 1e-12
    assert abs(derived["public_composite"] - REFERENCE_PRIMARY) < 1e-12
    assert abs(derived["composite_loss"] + REFERENCE_PRIMARY) < 1e-12
    assert abs(derived["fitness"] - REFERENCE_PRIMARY) < 1e-12
    assert derived["perplexity"] == pytest.approx(REFERENCE_PERPLEXITY, rel=1e-12)
    assert "composite_bpb" not in derived


def test_derive_arm_metrics_public_suite_with_bytes():
    raw = {
        "lm_loss": 2.0,
        "instruction_loss": 4.0,
        "preference_loss": 0.5,
        "reasoning_nll": 3.0,
        "bits_per_byte": 1.5,
        "instruction_bpb": 2.0,
    }
    derived = metrics.derive_arm_metrics(raw)
    assert derived["primary"] == pytest.approx(-2.6, abs=1e-15)
    assert derived["public_composite"] == pytest.approx(-2.8, abs=1e-15)
    assert derived["composite_loss"] == pytest.approx(2.8, abs=1e-15)
    assert derived["composite_bpb"] == pytest.approx(2.0, abs=1e-15)
    assert derived["fitness"] == pytest.approx(-2.8, abs=1e-15)
    assert metrics.derive_arm_metrics(raw, "composite_bpb")["fitness"] == pytest.approx(-2.0)
    assert raw == {**raw}  # input left as it was
    assert "primary" not in raw


def test_derive_arm_metrics_requires_measured_losses():
    with pytest.raises(ConfigError, match="instruction_loss"):
        metrics.derive_arm_metrics({"lm_loss": 2.0})


def test_the_metric_table_names_each_metric_once():
    names = [metric.name for metric in metrics.METRICS]
    assert len(set(names)) == len(names)
