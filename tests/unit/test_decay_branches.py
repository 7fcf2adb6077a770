"""Warmup-stable-decay branches (issue 48, item 3b): several horizons from one stable trunk.

The independent reference is ``train()`` run alone at each horizon (``config.steps`` = that
horizon): every branch must equal it to the bit on a CPU at one thread (losses, token-stream
hash, validation curve, weights, optimizer statistics), whatever the order the horizons are
asked in, and the trunk must be trained once (steps counted)."""

from __future__ import annotations

import pytest
import torch

from llmevo.catalog import build_model, build_optimizer, build_recipe
from llmevo.components.data.base import TrainSources, TrainStream
from llmevo.errors import ConfigError
from llmevo.eval.lm import curve_windows
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.train import trainer
from llmevo.train.trainer import TrainConfig, ValidationProbe, branch_point, train, train_horizons

CPU = torch.device("cpu")
T = 16
STREAM = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0))
VALIDATION = torch.randint(0, 512, (20 * T + 1,), generator=torch.Generator().manual_seed(1))
TINY = ModelConfig(d_model=32, n_layers=1)
MOE = ModelConfig(d_model=32, n_layers=1, feedforward=ComponentChoice(name="moe"))
CONFIG = TrainConfig(steps=1, batch_size=2, seq_len=T, lr=3e-3, schedule="wsd", wsd_decay=0.25,
                     warmup_steps=2)
HORIZONS = [16, 8, 24]  # not in order: the results follow the request


def _alone(config: TrainConfig, steps: int, seed: int, model: ModelConfig, stream=STREAM, curve=None):
    torch.manual_seed(seed)
    built = build_model(model)
    config = config.model_copy(update={"steps": steps})
    return built, train(built, stream, config, seed, CPU, build_optimizer(config.optimizer), curve=curve)


def _branches(config: TrainConfig, seed: int, model: ModelConfig, horizons=HORIZONS, stream=STREAM, curve=None):
    torch.manual_seed(seed)
    return train_horizons(build_model(model), stream, config, horizons, seed, CPU, build_optimizer, curve=curve)


def _same(branch, alone) -> None:
    (model, result), (reference, expected) = branch, alone
    assert result.status == expected.status and result.message == expected.message
    assert result.losses == expected.losses and result.steps_done == expected.steps_done
    assert result.token_stream_sha256 == expected.token_stream_sha256
    assert (result.initial_loss, result.final_loss) == (expected.initial_loss, expected.final_loss)
    assert result.validation_curve == expected.validation_curve
    assert result.optimizer_statistics == expected.optimizer_statistics
    assert result.orthogonality_error == expected.orthogonality_error
    for (name, p), q in zip(reference.state_dict().items(), model.state_dict().values(), strict=True):
        torch.testing.assert_close(q, p, rtol=0, atol=0, equal_nan=True, msg=name)  # bitwise (NaN = NaN)


@pytest.mark.parametrize(("optimizer", "model"), [("adamw", TINY), ("muon", TINY), ("schedule_free_adamw", TINY),
                                                  ("lion", MOE)])
def test_every_branch_is_the_run_of_its_horizon_alone_to_the_bit(monkeypatch, optimizer, model):
    """Muon: its component's optimizer is copied with the model (orthogonality error);
    schedule-free: the copy is taken at y and each branch is evaluated at its own x; MoE: the
    auxiliary loss and the global random state. The curve (every 3 steps) spans the branch point."""
    torch.set_num_threads(1)
    config = CONFIG.model_copy(update={"optimizer": ComponentChoice(name=optimizer)})
    curve = ValidationProbe(3, curve_windows(VALIDATION, T, None, count=4))
    segments = []
    advance = trainer._Run.advance

    def counted(run, until, *args, **kwargs):
        segments.append(until - len(run.losses))
        return advance(run, until, *args, **kwargs)

    monkeypatch.setattr(trainer._Run, "advance", counted)
    branches = _branches(config, 5, model, curve=curve)
    monkeypatch.setattr(trainer._Run, "advance", advance)
    for horizon, branch in zip(HORIZONS, branches, strict=True):
        _same(branch, _alone(config, horizon, 5, model, curve=curve))
    points = {h: branch_point(config.model_copy(update={"steps": h}), config.model_copy(update={"steps": 24}))
              for h in HORIZONS}
    assert points == {8: 7, 16: 13, 24: 23}  # the first decayed step; the longest: its last
    assert sum(segments) == 24 + (8 - 7) + (16 - 13)  # the longest once, then each shorter decay


def test_a_trunk_that_diverges_before_a_branch_point_gives_that_horizon_its_divergence():
    """lr 1e4 diverges within a few steps, before any decay starts: every horizon records the
    standalone run's divergence (same step, same message, same hash)."""
    config = CONFIG.model_copy(update={"lr": 1e4, "grad_clip": 0.0})
    branches = _branches(config, 2, TINY)
    for horizon, branch in zip(HORIZONS, branches, strict=True):
        expected = _alone(config, horizon, 2, TINY)
        assert expected[1].status == "diverged"
        _same(branch, expected)


def test_what_cannot_branch_is_refused_before_training():
    with pytest.raises(ConfigError, match="distinct positive"):
        _branches(CONFIG, 1, TINY, horizons=[8, 8])
    ademamix = CONFIG.model_copy(update={"optimizer": ComponentChoice(name="ademamix")})
    with pytest.raises(ConfigError, match="depends on the run's length"):  # its schedulers span the run
        _branches(ademamix, 1, TINY)
    parts = {name: torch.randint(0, 512, (2000,), generator=torch.Generator().manual_seed(i))
             for i, name in enumerate(("lm", "narrative", "instruction"))}
    sources = TrainSources(parts=parts, default=tuple(parts), stream=torch.cat(list(parts.values())))
    curriculum = TrainStream(sources, build_recipe(ComponentChoice(name="curriculum")))
    with pytest.raises(ConfigError, match="data depends on the run's length"):
        _branches(CONFIG, 1, TINY, stream=curriculum)
