"""Trainer: schedule formula, seeded windows, divergence, golden per-step losses."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from llmevo.catalog import build_optimizer, full_registry
from llmevo.train.trainer import TrainConfig, WindowSampler, lr_at, train

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def test_warmup_then_cosine_matches_the_formula():
    config = TrainConfig(steps=110, batch_size=1, seq_len=4, lr=1.0, schedule="cosine",
                         warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, config) == pytest.approx(0.1)
    assert lr_at(9, config) == pytest.approx(1.0)
    assert lr_at(10, config) == pytest.approx(1.0)
    assert lr_at(60, config) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_at(110, config) == pytest.approx(0.1)


def test_warmup_stable_decay_is_the_piecewise_linear_reference():
    """WSD (arXiv:2405.18392): warmup, the peak held, then a linear decay to the floor over the
    last ``wsd_decay`` of the post-warmup steps; the reference is numpy's piecewise-linear
    interpolation through the three corners."""
    import numpy as np

    config = TrainConfig(steps=110, batch_size=1, seq_len=4, lr=1.0, schedule="wsd", wsd_decay=0.2,
                         warmup_steps=10, min_lr_ratio=0.1)
    for step in range(10, 111):
        assert lr_at(step, config) == pytest.approx(float(np.interp(step, [10, 90, 110], [1.0, 1.0, 0.1])))
    assert lr_at(0, config) == pytest.approx(0.1)
    with pytest.raises(ValidationError):
        TrainConfig(steps=5, batch_size=1, seq_len=4, lr=1.0, schedule="wsd", wsd_decay=0.0)


def test_constant_schedule_is_constant_after_warmup():
    config = TrainConfig(steps=5, batch_size=1, seq_len=4, lr=3e-4)
    assert [lr_at(s, config) for s in range(5)] == [3e-4] * 5


def test_windows_depend_on_the_seed_only():
    stream = torch.arange(1000)
    a = WindowSampler(stream, 4, 16, seed=42)
    b = WindowSampler(stream, 4, 16, seed=42)
    c = WindowSampler(stream, 4, 16, seed=43)
    first, second, other = a.next(), b.next(), c.next()
    assert torch.equal(first, second) and not torch.equal(first, other)
    assert first.shape == (4, 17)
    # consecutive tokens: each window is a contiguous slice of the stream
    assert torch.equal(first[:, 1:] - first[:, :-1], torch.ones(4, 16, dtype=torch.long))


class _Exploding(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, tokens):
        return torch.full((*tokens.shape, 8), float("nan")) * self.scale


def test_non_finite_loss_is_recorded_as_diverged():
    config = TrainConfig(steps=5, batch_size=2, seq_len=4, lr=1e-3)
    result = train(_Exploding(), torch.arange(100) % 8, config, seed=0, device=torch.device("cpu"),
                   optimizer=build_optimizer(config.optimizer))
    assert result.status == "diverged"
    assert result.steps_done == 0 and "non-finite" in result.message


def test_hurdle_callback_stops_training():
    sys.path.insert(0, str(ASSETS))
    from llmevo.catalog import build_model
    from llmevo.model.config import ModelConfig

    model = build_model(ModelConfig())
    config = TrainConfig(steps=10, batch_size=2, seq_len=8, lr=1e-3)
    result = train(model, torch.arange(2000) % 512, config, seed=0, device=torch.device("cpu"),
                   optimizer=build_optimizer(config.optimizer), on_step=lambda step, loss: step < 2)
    assert result.status == "stopped" and result.steps_done == 3


def test_golden_per_step_losses():
    """A silent numerical change to model, init, sampler or optimizer moves these numbers."""
    sys.path.insert(0, str(ASSETS))
    import golden

    expected = json.loads((ASSETS / "golden_losses.json").read_text())
    assert expected["config"] == golden.CONFIG.model_dump(mode="json")
    losses = golden.golden_run()
    assert losses == pytest.approx(expected["losses"], abs=2e-5)


def _effective_lrs_during_training(config: TrainConfig) -> tuple[list[list[float]], list[float]]:
    """Each param group's lr at every ``optimizer.step()`` of ``train()``, and the base lrs
    the optimizer component itself sets on a freshly built optimizer."""
    from llmevo.catalog import build_model
    from llmevo.model.config import ModelConfig

    seen: list[list[float]] = []
    component = build_optimizer(config.optimizer)
    build = component.build

    def recording_build(*args, **kwargs):
        optimizer = build(*args, **kwargs)
        step = optimizer.step

        def record_then_step() -> None:
            seen.append([g["lr"] for g in optimizer.param_groups])
            step()

        optimizer.step = record_then_step
        return optimizer

    component.build = recording_build  # the trainer builds its optimizer from the component it gets
    torch.manual_seed(0)
    model = build_model(ModelConfig())
    train(model, torch.arange(2000) % 512, config, seed=0, device=torch.device("cpu"), optimizer=component)
    torch.manual_seed(0)
    fresh = build_optimizer(config.optimizer).build(build_model(ModelConfig()), config.lr, config.weight_decay)
    return seen, [group["lr"] for group in fresh.param_groups]


@pytest.mark.parametrize("name", sorted(full_registry().names("optimizer")))
def test_every_optimizer_keeps_each_groups_base_lr_under_the_schedule(name):
    """lr of group g at step s == base_g * lr_at(s) / config.lr (base_g set by the component)."""
    from llmevo.registry import ComponentChoice

    config = TrainConfig(steps=6, batch_size=2, seq_len=8, lr=2e-3, schedule="cosine", warmup_steps=2,
                         optimizer=ComponentChoice(name=name))
    seen, bases = _effective_lrs_during_training(config)
    assert len(seen) == config.steps
    for step, lrs in enumerate(seen):
        factor = lr_at(step, config) / config.lr
        assert lrs == pytest.approx([base * factor for base in bases], rel=1e-12), (name, step)


def test_lion_runs_at_its_multiplied_learning_rate():
    """Lion's base lr is lr * lr_multiplier; changing the gene changes the lr it trains at."""
    from llmevo.registry import ComponentChoice

    for multiplier in (0.3, 0.5):
        config = TrainConfig(steps=4, batch_size=2, seq_len=8, lr=1e-3,
                             optimizer=ComponentChoice(name="lion", config={"lr_multiplier": multiplier}))
        seen, _ = _effective_lrs_during_training(config)
        assert seen == [[pytest.approx(1e-3 * multiplier, rel=1e-12)]] * 4
