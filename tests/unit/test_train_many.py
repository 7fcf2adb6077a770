"""train_many: each run equals a lone train() call with the same seed and settings."""

from __future__ import annotations

import pytest
import torch

from llmevo.catalog import build_model, build_optimizer
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.train.execution import RunSpec, train_many
from llmevo.train.trainer import TrainConfig, train


def test_each_run_matches_a_lone_train_call():
    stream = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0))
    config = TrainConfig(steps=3, batch_size=2, seq_len=16, lr=1e-3)
    runs = [RunSpec(seed=5, config=config), RunSpec(seed=6, config=config.model_copy(update={"lr": 3e-3}))]
    outcomes = train_many(lambda: build_model(ModelConfig()), stream, runs, torch.device("cpu"),
                          build_optimizer=build_optimizer)
    for outcome in outcomes:
        torch.manual_seed(outcome.spec.seed)
        alone = train(build_model(ModelConfig()), stream, outcome.spec.config, outcome.spec.seed,
                      torch.device("cpu"), build_optimizer(outcome.spec.config.optimizer))
        assert outcome.result.losses == alone.losses
        assert outcome.result.token_stream_sha256 == alone.token_stream_sha256
    assert outcomes[0].result.losses != outcomes[1].result.losses


def test_no_runs_is_refused():
    with pytest.raises(ConfigError):
        train_many(lambda: build_model(ModelConfig()), torch.arange(100), [], torch.device("cpu"),
                   build_optimizer=build_optimizer)
