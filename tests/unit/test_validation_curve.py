"""The validation curve (``--val-every N``): a report run's validation loss every N steps and at
the last, on a fixed subset of the validation windows, at the optimizer's evaluation point.

References: a cross-entropy written out by hand (log-softmax, gathered at the next tokens) on
windows whose positions are worked out here, for the model snapshotted at that step by a
per-step hook (which the trainer calls at the evaluation point); the same run without the
curve, to the bit (losses, weights, the global random state, the model's mode); the sequential
trainer, for the batched, parallel and parallel-batched paths (the test_replicas pattern: the
batched numbers equal the sequential ones, and the setting changes something).
"""

from __future__ import annotations

import pytest
import torch

from llmevo.catalog import build_model, build_optimizer
from llmevo.eval.lm import curve_windows
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.train.execution import RunSpec, train_many
from llmevo.train.replicas import train_replicas
from llmevo.train.trainer import TrainConfig, ValidationProbe, train

CPU = torch.device("cpu")
T = 16
STREAM = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0))
# 40 full windows of T + 1 tokens at stride T, and a short one at the end
VALIDATION = torch.randint(0, 512, (40 * T + 1 + 5,), generator=torch.Generator().manual_seed(1))
TINY = ModelConfig(d_model=32, n_layers=1)
MOE = ModelConfig(d_model=32, n_layers=1, feedforward=ComponentChoice(name="moe"))
CONFIG = TrainConfig(steps=12, batch_size=2, seq_len=T, lr=3e-3, schedule="cosine", warmup_steps=2)
OPTIMIZERS = ["adamw", "schedule_free_adamw"]  # schedule-free: evaluated at x, trained at y


def _probe(every: int = 5) -> ValidationProbe:
    return ValidationProbe(every, curve_windows(VALIDATION, T, None, count=8))


def _config(optimizer: str, **changes) -> TrainConfig:
    return CONFIG.model_copy(update={"optimizer": ComponentChoice(name=optimizer), **changes})


def _run(config: TrainConfig, seed: int = 3, model: ModelConfig = TINY, **kwargs):
    torch.manual_seed(seed)
    built = build_model(model)
    return built, train(built, STREAM, config, seed, CPU, build_optimizer(config.optimizer), **kwargs)


def _relative(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


def test_the_curve_windows_are_evenly_spaced_full_windows():
    windows = curve_windows(VALIDATION, T, None, count=8)  # 40 full windows: every fifth
    assert windows.shape == (8, T + 1)
    for row, index in enumerate([0, 5, 10, 15, 20, 25, 30, 35]):
        assert torch.equal(windows[row], VALIDATION[T * index : T * index + T + 1])
    first = curve_windows(VALIDATION, T, max_windows=4, count=8)  # fewer than 8 read: all of them
    assert torch.equal(first, torch.stack([VALIDATION[T * i : T * i + T + 1] for i in range(4)]))
    assert curve_windows(VALIDATION, T, None, count=64).shape == (40, T + 1)  # the short one left out


def _by_hand(model: torch.nn.Module) -> float:
    """Mean next-token NLL on every fifth of the 40 windows, the log-softmax written out."""
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for index in range(0, 40, 5):
            window = VALIDATION[T * index : T * index + T + 1]
            logits = model(window[None, :-1])[0].double()  # (T, V)
            log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
            total -= float(log_probs[torch.arange(T), window[1:]].sum())
            tokens += T
    return total / tokens


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_a_recorded_point_is_the_cross_entropy_by_hand_at_the_evaluation_point(optimizer):
    config = _config(optimizer)
    _, result = _run(config, curve=_probe())
    assert result.validation_curve["steps"] == [5, 10, 12]  # every 5th step and the last
    assert (result.validation_curve["every"], result.validation_curve["windows"]) == (5, 8)
    snapshots = {}

    def snapshot(step: int, loss: float) -> bool:  # called at the optimizer's evaluation point
        if step + 1 in (5, 10):
            snapshots[step + 1] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return True

    torch.manual_seed(3)
    model = build_model(TINY)
    again = train(model, STREAM, config, 3, CPU, build_optimizer(config.optimizer), on_step=snapshot)
    assert again.losses == result.losses
    for position, step in enumerate((5, 10)):
        checkpoint = build_model(TINY)
        checkpoint.load_state_dict(snapshots[step])
        assert result.validation_curve["losses"][position] == pytest.approx(_by_hand(checkpoint), rel=1e-6)
    assert result.validation_curve["losses"][2] == pytest.approx(_by_hand(model), rel=1e-6)  # the end: x


@pytest.mark.parametrize(("optimizer", "model"), [("adamw", TINY), ("schedule_free_adamw", TINY), ("adamw", MOE)],
                         ids=["adamw", "schedule_free_adamw", "moe"])
def test_the_curve_changes_nothing_of_the_training_to_the_bit(optimizer, model):
    """Evaluated after every step (the most it can interfere): the same losses, weights, token
    stream, model mode and global random state as the run without it (MoE: its auxiliary
    loss is not recorded by the evaluation's forward)."""
    config = _config(optimizer)
    outcomes = []
    for curve in (None, _probe(every=1)):
        built, result = _run(config, model=model, curve=curve)
        outcomes.append((built, result, torch.get_rng_state()))
    (plain, alone, rng_alone), (probed, with_curve, rng_with) = outcomes
    assert with_curve.losses == alone.losses and with_curve.final_loss == alone.final_loss
    assert with_curve.token_stream_sha256 == alone.token_stream_sha256
    assert torch.equal(rng_with, rng_alone)
    assert probed.training == plain.training
    for (name, p), q in zip(plain.state_dict().items(), probed.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    assert alone.validation_curve is None and len(with_curve.validation_curve["steps"]) == CONFIG.steps


def _runs(optimizer: str) -> list[RunSpec]:
    config = _config(optimizer)
    return [RunSpec(seed, config.model_copy(update={"lr": lr})) for seed, lr in ((1, 3e-3), (2, 1e-3), (3, 2e-3))]


def _build() -> torch.nn.Module:
    return build_model(TINY)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("path", ["batched", "parallel", "parallel-batched"])
def test_every_path_records_the_sequential_curve_and_trains_as_without_it(path, optimizer):
    runs = _runs(optimizer)
    reference = train_many(_build, STREAM, runs, CPU, build_optimizer=build_optimizer, path="sequential",
                           curve=_probe())
    options = {"build_optimizer": build_optimizer, "path": path, "replicas_max": 2, "workers": 2}
    probed = train_many(_build, STREAM, runs, CPU, curve=_probe(), **options)
    plain = train_many(_build, STREAM, runs, CPU, **options)
    assert any(outcome.path.endswith("batched") for outcome in probed) == path.endswith("batched")
    for outcome, expected, without in zip(probed, reference, plain, strict=True):
        curve, wanted = outcome.result.validation_curve, expected.result.validation_curve
        assert curve["steps"] == wanted["steps"] == [5, 10, 12]
        assert _relative(curve["losses"], wanted["losses"]) < 1e-5
        assert outcome.result.losses == without.result.losses  # the curve changes nothing here either
        for p, q in zip(outcome.model.parameters(), without.model.parameters(), strict=True):
            assert torch.equal(p, q)
    curves = [outcome.result.validation_curve["losses"] for outcome in probed]
    assert curves[0] != curves[1]  # each replica's own


def test_a_diverging_replica_s_curve_ends_where_its_sequential_run_stopped():
    base = TrainConfig(steps=20, batch_size=2, seq_len=T, lr=1e-3)
    absurd = base.model_copy(update={"lr": 1e6})
    probe = _probe(every=2)
    trained = train_replicas(_build, STREAM, [5, 6], [base, absurd], CPU, build_optimizer=build_optimizer,
                             curve=probe)
    for (_, result), seed, config in zip(trained, (5, 6), (base, absurd), strict=True):
        _, alone = _run(config, seed=seed, curve=probe)
        assert result.status == alone.status
        assert result.validation_curve["steps"] == alone.validation_curve["steps"]
        torch.testing.assert_close(torch.tensor(result.validation_curve["losses"]),
                                   torch.tensor(alone.validation_curve["losses"]), rtol=1e-5, atol=0.0,
                                   equal_nan=True)  # the absurd lr's one point is NaN in both
    assert trained[1][1].status == "diverged" and trained[1][1].validation_curve["steps"][-1] < base.steps
