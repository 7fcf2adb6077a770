"""The shapes-only build (``llmevo.skeleton``) and the memory estimate's parameter count
against the real model: ``sum(p.numel())`` of ``build_model(config)`` on the CPU, for every
registered component of each model slot at two sizes, through both of the skeleton's builds
(the bounded CPU one and the meta fallback). Also: the CPU build never moves the global RNG,
a config too large for the budget never allocates, and the budget stops a call before it
allocates."""

from __future__ import annotations

import pytest
import torch

from llmevo import skeleton
from llmevo.catalog import build_model, full_registry
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.runner.resources import estimate_memory
from llmevo.skeleton import _OverBudget, _StorageBudget, build_skeleton, parameter_count
from llmevo.train.trainer import TrainConfig

SMALL = ModelConfig()  # llama_modern: d_model 64, 2 layers, 4 heads
LARGER = ModelConfig(d_model=96, n_layers=3, n_heads=6, vocab_size=700, max_seq_len=48,
                     attention=ComponentChoice(name="mha", config={"kv_heads": 6}),
                     feedforward=ComponentChoice(name="swiglu", config={"hidden": 160}))
SLOTS = ("attention", "feedforward", "norm", "position", "block")
TRAIN = TrainConfig(steps=1, lr=1e-3, batch_size=2, seq_len=16)


def _variants() -> list[tuple[str, ModelConfig]]:
    registry = full_registry()
    found = []
    for base_name, base in (("small", SMALL), ("larger", LARGER)):
        for slot in SLOTS:
            for name in registry.names(slot):
                if getattr(base, slot).name == name:
                    choice = getattr(base, slot)  # the base's own settings (kv_heads, hidden)
                else:
                    choice = ComponentChoice(name=name)
                found.append((f"{base_name}-{slot}-{name}", base.model_copy(update={slot: choice})))
    return found


VARIANTS = _variants()


def _real_count(config: ModelConfig) -> int:
    torch.manual_seed(0)
    return sum(p.numel() for p in build_model(config).parameters())  # the independent reference


@pytest.mark.parametrize("config", [config for _, config in VARIANTS], ids=[i for i, _ in VARIANTS])
def test_the_estimate_counts_what_the_real_model_has(config: ModelConfig,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real = _real_count(config)
    assert estimate_memory(config, TRAIN).parameters == real  # the bounded CPU build
    assert next(build_skeleton(config).parameters()).device.type == "cpu"
    monkeypatch.setattr(skeleton, "CPU_BUILD_BYTES", 0)  # every build falls back to meta
    assert estimate_memory(config, TRAIN).parameters == real
    assert next(build_skeleton(config).parameters()).device.type == "meta"


def test_a_state_dict_has_the_real_models_shapes() -> None:
    shapes = {name: tuple(t.shape) for name, t in build_model(LARGER).state_dict().items()}
    for budget in (None, 0):
        assert {name: tuple(t.shape) for name, t in build_skeleton(LARGER, budget).state_dict().items()} == shapes


def test_the_cpu_build_leaves_the_global_generator_where_it_was() -> None:
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    build_skeleton(LARGER)
    assert torch.equal(torch.rand(4), expected)


def test_a_billion_wide_hidden_layer_is_counted_without_allocating() -> None:
    wide = SMALL.model_copy(update={"feedforward": ComponentChoice(name="swiglu", config={"hidden": 10**9})})
    model = build_skeleton(wide)
    assert next(model.parameters()).device.type == "meta"
    assert parameter_count(wide) == sum(p.numel() for p in model.parameters()) > 2 * 3 * 64 * 10**9


def test_the_budget_stops_a_call_before_it_allocates_and_counts_storage_once() -> None:
    with pytest.raises(_OverBudget), _StorageBudget(4 * 1000):
        torch.empty((100, 100))  # 10,000 elements asked for: refused before the call
    with pytest.raises(_OverBudget), _StorageBudget(4 * 1000):
        torch.ones(40, 40)  # leading ints are a size too
    with _StorageBudget(4 * 1000) as budget:
        weight = torch.empty(10, 10)
        weight.normal_()  # in place: the same storage, not counted again
        weight.view(100)  # a view: the same storage
    assert budget.left == 4 * 1000 - 100 * 4
    kept = []
    with pytest.raises(_OverBudget), _StorageBudget(4 * 1000):
        for _ in range(11):  # storage kept call by call adds up past the budget
            kept.append(torch.empty(10, 10))
    assert len(kept) == 10
