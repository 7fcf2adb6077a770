"""The memory estimate against hand counts: parameters, weights with their gradients and
optimizer state, and a refusal that names the estimate."""

from __future__ import annotations

import pytest
import torch

from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.runner.resources import check_memory, estimate_memory
from llmevo.train.trainer import TrainConfig

CPU = torch.device("cpu")


def test_the_estimate_counts_llama_modern_and_its_state_and_activations():
    train = TrainConfig(steps=1, lr=1e-3, batch_size=4, seq_len=32)
    estimate = estimate_memory(ModelConfig(), train)
    assert estimate.parameters == 139_584  # SPEC: the baseline model, counted on the meta device
    assert estimate.weights_bytes == 139_584 * 4 * 4  # weights, gradients, two AdamW moments
    # per position: 2 layers x (16 x 64 + 3 x 192 + 2 x 4 heads x 32) + 3 x 512 logits
    assert estimate.activation_bytes == 4 * 32 * (2 * (16 * 64 + 3 * 192 + 2 * 4 * 32) + 3 * 512) * 4


def test_a_run_that_cannot_fit_is_refused_and_one_that_fits_is_not():
    config, train = ModelConfig(), TrainConfig(steps=1, lr=1e-3, batch_size=4, seq_len=32)
    need = estimate_memory(config, train).total_bytes
    assert check_memory("arm", config, train, CPU, available=need).parameters == 139_584
    with pytest.raises(ConfigError, match=r"arm: training needs about .* GiB \(139,584 parameters.* x 2 runs at once\)"):
        check_memory("arm", config, train, CPU, concurrent=2, available=need)
