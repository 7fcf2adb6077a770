"""Batched replicas: each replica equals the sequential train() run of its seed and settings.

References: the sequential trainer itself (``train``), a hand-written LambdaLR loop for the
schedule semantics, and ``torch.nn.utils.clip_grad_norm_`` for per-replica clipping. A toy
optimizer written only in this module (its ``Optimizer``, batched twin and component) trains
on the batched path: nothing in ``llmevo.train`` names an optimizer.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from llmevo.catalog import build_model, build_optimizer
from llmevo.components.optim.base import OptimizerComponent
from llmevo.components.optim.optimizer import (
    BatchedOptimizer,
    LambdaSchedule,
    Optimizer,
    per_replica,
)
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice, EmptyConfig
from llmevo.train.execution import RunSpec, train_many
from llmevo.train.replicas import ReplicaRefused, _clip_coefficients, train_replicas
from llmevo.train.trainer import TrainConfig, WindowSampler, lr_at, train

CPU = torch.device("cpu")
STREAM = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0))
TINY = ModelConfig(d_model=32, n_layers=1)


def _build() -> torch.nn.Module:
    return build_model(TINY)


def _settings(optimizer: ComponentChoice) -> list[TrainConfig]:
    """Two replicas that differ in every per-replica setting."""
    first = TrainConfig(steps=20, batch_size=2, seq_len=16, lr=3e-3, warmup_steps=4,
                        schedule="cosine", weight_decay=0.1, grad_clip=0.05, optimizer=optimizer)
    second = first.model_copy(update={
        "lr": 1e-3, "warmup_steps": 0, "schedule": "constant", "weight_decay": 0.0, "grad_clip": 0.0,
        "optimizer": ComponentChoice(name=optimizer.name, config={**optimizer.config, "beta2": 0.95}),
    })
    return [first, second]


def _sequential(seed: int, config: TrainConfig):
    torch.manual_seed(seed)
    model = _build()
    return model, train(model, STREAM, config, seed, CPU, build_optimizer(config.optimizer))


def _relative(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("optimizer", [
    ComponentChoice(name="adamw"),
    ComponentChoice(name="muon"),
    ComponentChoice(name="lion"),
], ids=["adamw", "muon", "lion"])
def test_each_replica_reproduces_the_sequential_run(optimizer: ComponentChoice) -> None:
    configs = _settings(optimizer)
    seeds = [5, 6]
    trained = train_replicas(_build, STREAM, seeds, configs, CPU, build_optimizer=build_optimizer)
    for (model, result), seed, config in zip(trained, seeds, configs, strict=True):
        alone_model, alone = _sequential(seed, config)
        assert result.token_stream_sha256 == alone.token_stream_sha256
        assert _relative(result.losses, alone.losses) < 1e-5
        assert result.status == alone.status == "complete"
        assert result.orthogonality_error == pytest.approx(alone.orthogonality_error, rel=1e-4)
        assert result.optimizer_statistics == alone.optimizer_statistics
        for (name, p), q in zip(model.named_parameters(), alone_model.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    assert trained[0][1].losses != trained[1][1].losses


def test_group_learning_rates_follow_lambda_lr() -> None:
    """Lion's own base lr (lr x lr_multiplier) scaled by lr_at(step)/lr, as LambdaLR does
    (``LambdaSchedule``, checked against ``LambdaLR`` in tests/reference/test_optim_reference.py)."""
    config = _settings(ComponentChoice(name="lion"))[0]
    torch.manual_seed(5)
    model = _build()
    optimizer = build_optimizer(config.optimizer).build(model, config.lr, config.weight_decay)
    scheduler = LambdaSchedule(optimizer, lambda step: lr_at(step, config) / config.lr)
    sampler = WindowSampler(STREAM, config.batch_size, config.seq_len, 5)
    losses = []
    for _ in range(config.steps):
        window = sampler.next()
        loss = F.cross_entropy(model(window[:, :-1]).flatten(0, 1), window[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    (_, result), = train_replicas(_build, STREAM, [5], [config], CPU, build_optimizer=build_optimizer)
    assert _relative(result.losses, losses) < 1e-5


def test_clip_coefficients_match_clip_grad_norm_per_replica() -> None:
    generator = torch.Generator().manual_seed(3)
    grads = [torch.randn(3, 4, 5, generator=generator), torch.randn(3, 7, generator=generator)]
    grads[0][1] *= 100  # replica 1 has a large norm, replica 2 a tiny one
    grads[1][2] *= 1e-3
    grads[0][2] *= 1e-3
    clip = torch.tensor([1.0, 0.5, 0.0])
    coefficient, norms = _clip_coefficients(grads, clip, clip > 0)
    for replica in range(2):
        pieces = [g[replica].clone().requires_grad_() for g in grads]
        for piece in pieces:
            piece.grad = piece.detach().clone()
        norm = torch.nn.utils.clip_grad_norm_(pieces, float(clip[replica]))
        torch.testing.assert_close(norms[replica], norm)  # the norm before clipping, as train() logs it
        for piece, g in zip(pieces, grads, strict=True):
            torch.testing.assert_close(g[replica] * coefficient[replica], piece.grad)
    assert coefficient[2] == 1.0  # clipping disabled


def test_a_diverging_replica_is_frozen_and_the_others_continue() -> None:
    base = TrainConfig(steps=20, batch_size=2, seq_len=16, lr=1e-3, weight_decay=0.01)
    absurd = base.model_copy(update={"lr": 1e6})
    trained = train_replicas(_build, STREAM, [5, 6], [base, absurd], CPU, build_optimizer=build_optimizer)
    (good_model, good), (bad_model, bad) = trained
    alone_good_model, alone_good = _sequential(5, base)
    alone_bad_model, alone_bad = _sequential(6, absurd)
    assert alone_bad.status == "diverged" and bad.status == "diverged"
    assert bad.steps_done == alone_bad.steps_done < base.steps
    assert bad.message == alone_bad.message
    assert bad.token_stream_sha256 == alone_bad.token_stream_sha256
    assert good.status == "complete" and good.steps_done == base.steps
    assert _relative(good.losses, alone_good.losses) < 1e-5
    # frozen at the diverging step: the parameters are those the sequential run stopped with
    for p, q in zip(bad_model.parameters(), alone_bad_model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=0.0, equal_nan=True)
    assert all(math.isfinite(x) for x in bad.losses)


def test_mismatched_settings_are_refused_before_training() -> None:
    config = TrainConfig(steps=2, batch_size=2, seq_len=16, lr=1e-3)
    with pytest.raises(ConfigError, match="counts must match"):
        train_replicas(_build, STREAM, [1, 2, 3], [config, config], CPU, build_optimizer=build_optimizer)
    with pytest.raises(ConfigError, match="must share steps"):
        train_replicas(_build, STREAM, [1, 2], [config, config.model_copy(update={"steps": 3})], CPU,
                       build_optimizer=build_optimizer)
    muon = config.model_copy(update={"optimizer": ComponentChoice(name="muon")})
    with pytest.raises(ConfigError, match="must share the optimizer with the settings its batched twin"):  # ns_steps
        train_replicas(_build, STREAM, [1, 2], [muon, muon.model_copy(update={
            "optimizer": ComponentChoice(name="muon", config={"ns_steps": 3})})], CPU,
            build_optimizer=build_optimizer)


def test_a_model_that_cannot_batch_is_refused_by_name_and_train_many_falls_back() -> None:
    class Plain(torch.nn.Module):  # not the component Transformer
        def __init__(self) -> None:
            super().__init__()
            self.embedding = torch.nn.Embedding(512, 8)
            self.head = torch.nn.Linear(8, 512)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.head(self.embedding(tokens))

    config = TrainConfig(steps=2, batch_size=2, seq_len=16, lr=1e-3)
    with pytest.raises(ReplicaRefused, match="model Plain"):
        train_replicas(Plain, STREAM, [1, 2], [config, config], CPU, build_optimizer=build_optimizer)
    outcomes = train_many(Plain, STREAM, [RunSpec(1, config), RunSpec(2, config)], CPU,
                          build_optimizer=build_optimizer, path="batched")
    assert [o.path for o in outcomes] == ["sequential", "sequential"]
    assert "model Plain" in outcomes[0].note


@pytest.mark.parametrize("path", ["batched", "parallel", "parallel-batched"])
def test_train_many_paths_agree_with_sequential(path: str) -> None:
    config = TrainConfig(steps=4, batch_size=2, seq_len=16, lr=3e-3)
    runs = [RunSpec(seed, config.model_copy(update={"lr": lr}))
            for seed, lr in ((1, 3e-3), (2, 1e-3), (3, 2e-3))]
    reference = train_many(_build, STREAM, runs, CPU, build_optimizer=build_optimizer, path="sequential")
    outcomes = train_many(_build, STREAM, runs, CPU, build_optimizer=build_optimizer, path=path,
                          replicas_max=2, workers=2)
    for outcome, expected in zip(outcomes, reference, strict=True):
        assert outcome.result.token_stream_sha256 == expected.result.token_stream_sha256
        assert _relative(outcome.result.losses, expected.result.losses) < 1e-5
        for p, q in zip(outcome.model.parameters(), expected.model.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    kinds = [o.path for o in outcomes]
    if path == "batched":  # replicas_max 2: seeds 1, 2 together, seed 3 alone
        assert kinds == ["batched", "batched", "sequential"]
    elif path == "parallel":
        assert kinds == ["parallel"] * 3
    else:  # two workers: a pair and a lone run
        assert set(kinds) <= {"parallel-batched", "parallel"} and "parallel-batched" in kinds


class _HeavyBallOptimizer(Optimizer):
    """A toy optimizer known only to this module: heavy-ball SGD with decoupled weight decay,
    ``m <- 0.9 m + g;  W <- W (1 - lr wd) - lr m``."""

    def __init__(self, params, *, lr: float, weight_decay: float):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay))

    def update_group(self, group) -> None:
        for p in group["params"]:
            if p.grad is None:
                continue
            momentum = self.state.setdefault(p, {}).setdefault("momentum", torch.zeros_like(p))
            momentum.mul_(0.9).add_(p.grad)
            p.mul_(1 - group["lr"] * group["weight_decay"])
            p.add_(momentum, alpha=-group["lr"])


class _HeavyBallBatched(BatchedOptimizer):
    """The same update for stacked replicas (the base has already applied the weight decay)."""

    def update(self, name, param, grad, state, lr):
        momentum = state.setdefault("momentum", torch.zeros_like(param))
        momentum.mul_(0.9).add_(grad)
        param.sub_(momentum * per_replica(lr, param))


class _HeavyBall(OptimizerComponent):
    batched = _HeavyBallBatched

    def build(self, model, lr, weight_decay):
        return _HeavyBallOptimizer(model.parameters(), lr=lr, weight_decay=weight_decay)


def _heavy_ball(choice: ComponentChoice) -> OptimizerComponent:
    assert choice.name == "heavy-ball"  # a name is only data: nothing looks it up
    return _HeavyBall(EmptyConfig())


def test_a_new_optimizer_in_one_module_trains_batched_and_matches_its_sequential_runs() -> None:
    config = TrainConfig(steps=6, batch_size=2, seq_len=16, lr=1e-2, weight_decay=0.1, grad_clip=0.5,
                         schedule="cosine", warmup_steps=2, optimizer=ComponentChoice(name="heavy-ball"))
    runs = [RunSpec(1, config), RunSpec(2, config.model_copy(update={"lr": 3e-3, "weight_decay": 0.0}))]
    outcomes = train_many(_build, STREAM, runs, CPU, build_optimizer=_heavy_ball, path="batched")
    assert [o.path for o in outcomes] == ["batched", "batched"] and not outcomes[0].note
    for outcome in outcomes:
        torch.manual_seed(outcome.spec.seed)
        alone_model = _build()
        alone = train(alone_model, STREAM, outcome.spec.config, outcome.spec.seed, CPU,
                      _heavy_ball(outcome.spec.config.optimizer))
        assert outcome.result.token_stream_sha256 == alone.token_stream_sha256
        assert _relative(outcome.result.losses, alone.losses) < 1e-5
        for p, q in zip(outcome.model.parameters(), alone_model.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert outcomes[0].result.losses != outcomes[1].result.losses


def test_an_optimizer_without_a_batched_twin_trains_sequentially_with_a_note() -> None:
    class Sequential(_HeavyBall):
        batched = None

    config = TrainConfig(steps=2, batch_size=2, seq_len=16, lr=1e-3,
                         optimizer=ComponentChoice(name="heavy-ball"))
    with pytest.raises(ReplicaRefused, match="'heavy-ball' has no batched implementation"):
        train_replicas(_build, STREAM, [1, 2], [config, config], CPU,
                       build_optimizer=lambda choice: Sequential(EmptyConfig()))
    outcomes = train_many(_build, STREAM, [RunSpec(1, config), RunSpec(2, config)], CPU,
                          build_optimizer=lambda choice: Sequential(EmptyConfig()), path="batched")
    assert [o.path for o in outcomes] == ["sequential", "sequential"]
    assert "'heavy-ball' has no batched implementation" in outcomes[0].note


def test_bad_execution_options_are_refused() -> None:
    config = TrainConfig(steps=2, batch_size=2, seq_len=16, lr=1e-3)
    with pytest.raises(ConfigError, match="replicas-max"):
        train_many(_build, STREAM, [RunSpec(1, config)], CPU, build_optimizer=build_optimizer,
                   replicas_max=0)
    with pytest.raises(ConfigError, match="unknown training path"):
        train_many(_build, STREAM, [RunSpec(1, config)], CPU, build_optimizer=build_optimizer,
                   path="warp")


@pytest.mark.parametrize(("args", "message"), [
    (["--replicas", "0"], "must be at least 1"),
    (["--replicas", "1,8", "--replicas-max", "4"], "exceed --replicas-max 4"),
    (["--replicas", "1,two"], "'two' is not an integer"),
    (["--replicas", "2", "--path", "warp"], "unknown training path 'warp'"),
])
def test_bench_bad_replica_input_is_one_line_exit_2_before_training(args, message, capsys) -> None:
    from llmevo.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--threads", "1", *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert message in err and len(err.strip().splitlines()) == 1


# one other value for every training setting: a setting added to TrainConfig without an entry
# here fails the first test below, so every new setting is checked on the batched path
BASE = TrainConfig(steps=12, batch_size=2, seq_len=16, lr=3e-3, weight_decay=0.1, grad_clip=0.05,
                   schedule="wsd", wsd_decay=0.5, warmup_steps=4, min_lr_ratio=0.1)
PER_REPLICA_OTHER = {"lr": 1e-3, "weight_decay": 0.0, "grad_clip": 0.0, "schedule": "cosine",
                     "wsd_decay": 0.25, "warmup_steps": 0, "min_lr_ratio": 0.5,
                     "optimizer": ComponentChoice(name="adamw", config={"beta2": 0.95})}
SHARED_OTHER = {"steps": 13, "batch_size": 3, "seq_len": 8, "loss_window": 5, "precision": "bf16"}


def test_every_training_setting_declares_how_replicas_honour_it_and_is_checked_here() -> None:
    from llmevo.train.trainer import Replicas

    per_replica = TrainConfig.replica_settings(Replicas.PER_REPLICA)
    shared = TrainConfig.replica_settings(Replicas.SHARED)
    assert set(per_replica) | set(shared) == set(TrainConfig.model_fields), "a setting declares neither"
    assert not set(per_replica) & set(shared)
    assert set(per_replica) == set(PER_REPLICA_OTHER) and set(shared) == set(SHARED_OTHER)


def _as_alone(batched, alone, config: TrainConfig) -> None:
    """A replica's result equals its sequential run's. The first steps, before rounding
    compounds through the updates, agree to 1e-6 (where fp32 and bf16 differ by >= 4e-6); the
    whole run to float32 rounding of the vmapped step, or to bf16's rounding under bf16 (which
    the clipped, normalised updates amplify: up to 2e-5 measured); and everything recorded from
    the losses and the settings."""
    assert _relative(batched.losses[:3], alone.losses[:3]) < 1e-6
    tolerance = 1e-4 if config.precision == "bf16" else 1e-5
    assert _relative(batched.losses, alone.losses) < tolerance
    assert _relative([batched.initial_loss, batched.final_loss],
                     [alone.initial_loss, alone.final_loss]) < tolerance
    assert (batched.status, batched.steps_done, batched.tokens_seen, batched.token_stream_sha256) == (
        alone.status, alone.steps_done, alone.tokens_seen, alone.token_stream_sha256)


def _recorded(result) -> tuple:
    return (result.losses, result.initial_loss, result.final_loss, result.tokens_seen,
            result.token_stream_sha256)


@pytest.mark.parametrize("setting", sorted(PER_REPLICA_OTHER))
def test_replicas_that_differ_in_one_setting_each_train_as_alone(setting: str) -> None:
    """Two replicas differing only in ``setting`` batch together, and each gives the numbers
    its sequential run gives: the batched path reads the setting per replica."""
    configs = [BASE, BASE.model_copy(update={setting: PER_REPLICA_OTHER[setting]})]
    trained = train_replicas(_build, STREAM, [5, 5], configs, CPU, build_optimizer=build_optimizer)
    alone = [_sequential(5, config)[1] for config in configs]
    for (_, result), sequential, config in zip(trained, alone, configs, strict=True):
        _as_alone(result, sequential, config)
    assert _recorded(alone[0]) != _recorded(alone[1]), f"{setting} changed nothing"


@pytest.mark.parametrize("setting", sorted(SHARED_OTHER))
def test_replicas_that_share_a_changed_setting_each_train_as_alone(setting: str) -> None:
    """A shared setting is honoured too: replicas that all take its other value each give the
    numbers of their sequential runs at that value (the batched path reads it, not a default)."""
    other = BASE.model_copy(update={setting: SHARED_OTHER[setting]})
    trained = train_replicas(_build, STREAM, [5, 6], [other, other], CPU, build_optimizer=build_optimizer)
    alone = [_sequential(seed, other)[1] for seed in (5, 6)]
    for (_, result), sequential in zip(trained, alone, strict=True):
        _as_alone(result, sequential, other)
    assert _recorded(alone[0]) != _recorded(_sequential(5, BASE)[1]), f"{setting} changed nothing"


@pytest.mark.parametrize("setting", sorted(SHARED_OTHER))
def test_replicas_that_differ_in_a_shared_setting_never_batch_together(setting: str) -> None:
    from llmevo.train.replicas import replica_group_key

    other = BASE.model_copy(update={setting: SHARED_OTHER[setting]})
    optimizer = build_optimizer(BASE.optimizer)
    assert replica_group_key(BASE, optimizer) != replica_group_key(other, optimizer)
    with pytest.raises(ConfigError, match=f"must share {setting}, which differ here"):
        train_replicas(_build, STREAM, [5, 6], [BASE, other], CPU, build_optimizer=build_optimizer)
