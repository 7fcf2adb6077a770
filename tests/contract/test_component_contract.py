"""One contract for every registered component (the shared suite every model inherits).

Model-slot components (position, attention, feedforward, norm, block) are swapped one at a
time into ``llama_modern``; optimizer components train a tiny model for a few steps, and one
with a batched twin (``batched``) trains replicas that equal its sequential runs.
Components of other slots (kv_cache, architecture, ...) are not model parts and are skipped
here on purpose: they have their own suites.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from llmevo.catalog import build_model, build_optimizer, full_registry
from llmevo.components.optim.base import OptimizerComponent
from llmevo.components.optim.optimizer import LambdaSchedule, Optimizer
from llmevo.model.config import ModelConfig
from llmevo.registry import MODEL_SLOTS, ComponentChoice, integer_fields
from llmevo.train.replicas import ReplicaRefused, train_replicas
from llmevo.train.trainer import TrainConfig, train

REGISTRY = full_registry()
MODEL_COMPONENTS = [(slot, name) for slot in MODEL_SLOTS for name in REGISTRY.names(slot)]
OPTIMIZERS = REGISTRY.names("optimizer")
BATCH, LENGTH = 2, 12


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matrices: intra-op threads only add synchronisation (very slow on a busy CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _ids(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{slot}:{name}" for slot, name in pairs]


def _build(slot: str, name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(ModelConfig().with_slot(slot, name)).eval()


def _tokens(seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 512, (BATCH, LENGTH), generator=generator)


def test_registry_has_the_classic_components() -> None:
    assert len(MODEL_COMPONENTS) + len(OPTIMIZERS) >= 15
    assert all(len(REGISTRY.names(slot)) >= 2 for slot in MODEL_SLOTS)
    assert len(OPTIMIZERS) >= 3


def test_llama_modern_parameter_count() -> None:
    assert build_model(ModelConfig()).num_parameters() == 139_584


@pytest.mark.parametrize(("slot", "name"), MODEL_COMPONENTS, ids=_ids(MODEL_COMPONENTS))
def test_every_integer_field_declares_how_it_scales(slot: str, name: str) -> None:
    """An integer in a model component's config is a size, a count or a length: the size dial
    (``runner.size``) scales it by the ``registry.Scaling`` its field declares, so a component
    without one would keep a size that no longer fits a rung."""
    for field, scaling in integer_fields(REGISTRY.get(slot, name).config_cls).items():
        assert scaling is not None, (
            f"{slot} {name}.{field}: an integer with no Scaling; declare it on the field, e.g. "
            f"`{field}: Annotated[PositiveInt, Scaling.WIDTH]` (WIDTH, HEADS, HEAD_DIM, KEPT, DIVIDES_HEADS)")


@pytest.mark.parametrize(("slot", "name"), MODEL_COMPONENTS, ids=_ids(MODEL_COMPONENTS))
def test_forward_backward_finite(slot: str, name: str) -> None:
    model = _build(slot, name).train()
    assert model.num_parameters() > 0
    tokens = _tokens()
    logits = model(tokens)
    assert logits.shape == (BATCH, LENGTH, 512)
    assert torch.isfinite(logits).all()
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    for param_name, param in model.named_parameters():
        assert param.grad is not None, f"{param_name} received no gradient"
        assert param.grad.shape == param.shape
        assert torch.isfinite(param.grad).all(), f"{param_name} has a non-finite gradient"
    assert any(param.grad.abs().sum() > 0 for param in model.parameters())


@pytest.mark.parametrize(("slot", "name"), MODEL_COMPONENTS, ids=_ids(MODEL_COMPONENTS))
def test_causal(slot: str, name: str) -> None:
    model = _build(slot, name)
    tokens = _tokens()
    changed_at = 7
    altered = tokens.clone()
    altered[:, changed_at] = (altered[:, changed_at] + 1) % 512
    with torch.no_grad():
        before, after = model(tokens), model(altered)
    torch.testing.assert_close(before[:, :changed_at], after[:, :changed_at], rtol=0, atol=1e-6)
    assert not torch.allclose(before[:, changed_at:], after[:, changed_at:])


@pytest.mark.parametrize(("slot", "name"), MODEL_COMPONENTS, ids=_ids(MODEL_COMPONENTS))
def test_deterministic_and_state_dict_round_trip(slot: str, name: str) -> None:
    tokens = _tokens()
    first, second, other = _build(slot, name, 0), _build(slot, name, 0), _build(slot, name, 5)
    with torch.no_grad():
        reference = first(tokens)
        assert torch.equal(reference, second(tokens))
        assert not torch.equal(reference, other(tokens))
        other.load_state_dict(first.state_dict())
        assert torch.equal(reference, other(tokens))


@pytest.mark.parametrize(("slot", "name"), MODEL_COMPONENTS, ids=_ids(MODEL_COMPONENTS))
def test_cached_decoding_matches_full_forward(slot: str, name: str) -> None:
    model = _build(slot, name)
    if not model.supports_kv_cache:
        pytest.skip(f"{slot} component {name} declares no KV-cache support")
    tokens = _tokens()
    with torch.no_grad():
        full = model(tokens)
        caches = model.new_caches()
        prefix = model(tokens[:, :5], caches=caches)
        steps = [model(tokens[:, t : t + 1], caches=caches) for t in range(5, LENGTH)]
    torch.testing.assert_close(torch.cat([prefix, *steps], dim=1), full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("slot", "name"), MODEL_COMPONENTS, ids=_ids(MODEL_COMPONENTS))
def test_batched_replicas_match_sequential_training(slot: str, name: str) -> None:
    """Two replicas trained at once equal two sequential train() runs (or are refused by name)."""
    config = ModelConfig().with_slot(slot, name)

    def build() -> torch.nn.Module:
        return build_model(config)

    stream = torch.randint(0, 512, (600,), generator=torch.Generator().manual_seed(2))
    settings = TrainConfig(steps=3, batch_size=2, seq_len=LENGTH, lr=3e-3, grad_clip=0.5)
    configs = [settings, settings.model_copy(update={"lr": 1e-3})]
    if not REGISTRY.get(slot, name).manifest.supports_replicas:
        with pytest.raises(ReplicaRefused, match=name):
            train_replicas(build, stream, [0, 1], configs, torch.device("cpu"),
                           build_optimizer=build_optimizer)
        return
    trained = train_replicas(build, stream, [0, 1], configs, torch.device("cpu"),
                             build_optimizer=build_optimizer)
    for seed, cfg, (_, result) in zip((0, 1), configs, trained, strict=True):
        torch.manual_seed(seed)
        alone = train(build(), stream, cfg, seed, torch.device("cpu"), build_optimizer(cfg.optimizer))
        assert result.token_stream_sha256 == alone.token_stream_sha256
        torch.testing.assert_close(result.losses, alone.losses, rtol=1e-5, atol=0.0)


# --- optimizers -------------------------------------------------------------------------

def _tiny_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(ModelConfig(n_layers=1, max_seq_len=16))


def _loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


def _train(model: torch.nn.Module, optimizer: Optimizer, tokens, steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = _loss(model, tokens)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _optimizer(name: str, model: torch.nn.Module):
    component = build_optimizer(ComponentChoice(name=name))
    return component, component.build(model, lr=3e-3, weight_decay=0.01)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_reduces_loss(name: str) -> None:
    model = _tiny_model()
    component, optimizer = _optimizer(name, model)
    assert isinstance(optimizer, Optimizer)  # the dynamo-free base, not torch.optim
    tokens = torch.randint(0, 512, (4, 17), generator=torch.Generator().manual_seed(3))
    losses = _train(model, optimizer, tokens, steps=6)
    after = _loss(model, tokens).item()
    assert all(torch.isfinite(torch.tensor(losses)))
    assert after < losses[0] - 0.05, f"{name}: loss {losses[0]:.4f} -> {after:.4f}"
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # every parameter is updated by exactly one param group
    grouped = [id(p) for group in optimizer.param_groups for p in group["params"]]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters()), name
    # statistics: finite numbers; a parameter split adds up to the model's parameters
    statistics = component.statistics()
    assert all(isinstance(v, int | float) and math.isfinite(v) for v in statistics.values()), statistics
    split = [v for k, v in statistics.items() if k.endswith("_parameters")]
    if split:
        assert sum(split) == sum(p.numel() for p in model.parameters()), statistics
    error = component.orthogonality_error()
    if type(component).orthogonality_error is OptimizerComponent.orthogonality_error:
        assert error == 0.0  # does not orthogonalise
    else:  # measured on the last update: a Newton-Schulz polar factor is near, not at, orthogonal
        assert 0.0 < error < 0.5, f"{name}: orthogonality error {error}"


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_lr_is_schedulable(name: str) -> None:
    _, optimizer = _optimizer(name, _tiny_model())
    base = [group["lr"] for group in optimizer.param_groups]
    LambdaSchedule(optimizer, lambda step: 0.5)
    assert [group["lr"] for group in optimizer.param_groups] == [lr * 0.5 for lr in base]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_state_dict_round_trip(name: str) -> None:
    tokens = torch.randint(0, 512, (2, 17), generator=torch.Generator().manual_seed(4))
    model = _tiny_model()
    _, optimizer = _optimizer(name, model)
    _train(model, optimizer, tokens, steps=2)

    resumed = copy.deepcopy(model)
    _, resumed_optimizer = _optimizer(name, resumed)
    resumed_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # as if saved

    _train(model, optimizer, tokens, steps=1)
    _train(resumed, resumed_optimizer, tokens, steps=1)
    for (param_name, a), b in zip(model.named_parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b), f"{name}: {param_name} differs after resuming"


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_batched_twin_matches_sequential_training(name: str) -> None:
    """Two replicas that differ in lr and weight decay, trained at once by the component's
    batched twin, equal two sequential ``train()`` runs (or are refused: no twin)."""

    def build() -> torch.nn.Module:
        return build_model(ModelConfig(n_layers=1, max_seq_len=16))

    stream = torch.randint(0, 512, (600,), generator=torch.Generator().manual_seed(2))
    settings = TrainConfig(steps=3, batch_size=2, seq_len=LENGTH, lr=3e-3, grad_clip=0.5,
                           optimizer=ComponentChoice(name=name))
    configs = [settings, settings.model_copy(update={"lr": 1e-3, "weight_decay": 0.1})]
    twin = REGISTRY.get("optimizer", name).cls.batched
    if twin is None:
        with pytest.raises(ReplicaRefused, match=name):
            train_replicas(build, stream, [0, 1], configs, torch.device("cpu"),
                           build_optimizer=build_optimizer)
        return
    trained = train_replicas(build, stream, [0, 1], configs, torch.device("cpu"),
                             build_optimizer=build_optimizer)
    for seed, cfg, (model, result) in zip((0, 1), configs, trained, strict=True):
        torch.manual_seed(seed)
        alone_model = build()
        alone = train(alone_model, stream, cfg, seed, torch.device("cpu"), build_optimizer(cfg.optimizer))
        assert result.token_stream_sha256 == alone.token_stream_sha256
        torch.testing.assert_close(result.losses, alone.losses, rtol=1e-5, atol=0.0)
        assert result.optimizer_statistics == alone.optimizer_statistics
        assert result.orthogonality_error == pytest.approx(alone.orthogonality_error, rel=1e-4)
        for (param_name, p), q in zip(model.named_parameters(), alone_model.parameters(), strict=True):
            if twin.sign_sensitive:  # an entry whose gradient rounds to either sign of zero may differ
                apart = int((~torch.isclose(p, q, rtol=1e-4, atol=1e-5)).sum())
                assert apart <= p.numel() // 1000, f"{name}: {param_name}: {apart} of {p.numel()} entries"
            else:
                torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=f"{name}: {param_name}")
