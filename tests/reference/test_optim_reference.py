"""AdamW (1711.05101) vs torch.optim.AdamW; Lion (2302.06675) vs its Algorithm 2 by hand;
cautious AdamW (2411.16085) vs its Algorithm 1 by hand and, where every sign agrees, vs
torch.optim.AdamW;
the dynamo-free optimizer base and LambdaSchedule vs torch.optim and LambdaLR; each batched
twin (``OptimizerComponent.batched``) vs its component's own optimizer, replica by replica."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from llmevo.catalog import build_model, build_optimizer, full_registry
from llmevo.components.optim.adamw import AdamWOptimizer
from llmevo.components.optim.base import parameter_roles
from llmevo.components.optim.cautious_adamw import CautiousAdamWOptimizer
from llmevo.components.optim.lion import Lion, LionConfig, LionOptimizer
from llmevo.components.optim.optimizer import LambdaSchedule
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matrices: intra-op threads only add synchronisation (very slow on a busy CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class _Shapes(torch.nn.Module):
    """Parameters of several shapes: an embedding, a biased Linear, a 3-D tensor, a scalar."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(40, 12)
        self.project = torch.nn.Linear(12, 20)
        self.mix = torch.nn.Parameter(torch.randn(2, 10, 12) * 0.1)
        self.gain = torch.nn.Parameter(torch.ones(12))
        self.temperature = torch.nn.Parameter(torch.tensor(1.5))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens) * self.gain  # (B, T, 12)
        h = torch.tanh(self.project(x)).unflatten(-1, (2, 10))  # (B, T, 2, 10)
        return torch.einsum("btgk,gkd->btd", h, self.mix) @ self.embedding.weight.T / self.temperature


def _twin_runs(make_model, ours_from, theirs_from, tokens, steps, schedule=None):
    """Train two copies of one model side by side; ``schedule(step)`` scales both lrs."""
    torch.manual_seed(0)
    model = make_model()
    reference = copy.deepcopy(model)
    ours, theirs = ours_from(model), theirs_from(reference)
    if schedule is not None:
        ours_schedule = LambdaSchedule(ours, schedule)
        theirs_schedule = torch.optim.lr_scheduler.LambdaLR(theirs, schedule)
    for _ in range(steps):
        for net, opt in ((model, ours), (reference, theirs)):
            opt.zero_grad(set_to_none=True)
            logits = net(tokens[:, :-1])
            F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
        if schedule is not None:
            ours_schedule.step()
            theirs_schedule.step()
            assert [g["lr"] for g in ours.param_groups] == [g["lr"] for g in theirs.param_groups]
    return model, reference, ours, theirs


def _initial_parameters(make_model) -> dict[str, torch.Tensor]:
    """The parameters ``_twin_runs`` starts from."""
    torch.manual_seed(0)
    return dict(make_model().named_parameters())


def test_adamw_is_bit_identical_to_torch_adamw_on_several_shapes() -> None:
    tokens = torch.randint(0, 40, (3, 9), generator=torch.Generator().manual_seed(1))
    initial = _initial_parameters(_Shapes)
    model, reference, ours, theirs = _twin_runs(
        _Shapes,
        lambda m: AdamWOptimizer(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1),
        lambda m: torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1),
        tokens, steps=20,
    )
    for (name, a), b in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert not torch.equal(a, initial[name]), f"{name} never moved"
        assert torch.equal(a, b), name
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(ours.state[a]["exp_avg"], theirs.state[b]["exp_avg"])
        assert torch.equal(ours.state[a]["exp_avg_sq"], theirs.state[b]["exp_avg_sq"])
        assert torch.equal(ours.state[a]["step"], theirs.state[b]["step"])


def test_adamw_component_is_torch_adamw_under_a_schedule() -> None:
    """The trainer's path: the component's optimizer, warmup + cosine, clipping, 20 steps."""
    spec = full_registry().get("optimizer", "adamw")
    component = spec.cls(spec.make_config({"beta2": 0.95}))
    tokens = torch.randint(0, 512, (2, 17), generator=torch.Generator().manual_seed(2))

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / 4) * 0.5 * (1 + math.cos(math.pi * step / 20))

    model, reference, _, _ = _twin_runs(
        lambda: build_model(ModelConfig(n_layers=1, max_seq_len=16)),
        lambda m: component.build(m, lr=1e-3, weight_decay=0.1),
        lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1),
        tokens, steps=20, schedule=factor,
    )
    for (name, a), b in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b), name


def test_lambda_schedule_is_lambda_lr_on_every_group() -> None:
    """Two groups with their own base lrs: each follows base * factor(step), as LambdaLR."""
    def factor(step: int) -> float:
        return 0.1 * (step + 1) if step < 3 else 0.7 ** step

    def groups(make):
        torch.manual_seed(0)
        first, second = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
        return make([{"params": first.parameters(), "lr": 0.3},
                     {"params": second.parameters(), "lr": 0.02}])

    ours = groups(lambda g: AdamWOptimizer(g, lr=1.0))
    theirs = groups(lambda g: torch.optim.SGD(g, lr=1.0))
    ours_schedule = LambdaSchedule(ours, factor)
    theirs_schedule = torch.optim.lr_scheduler.LambdaLR(theirs, factor)
    for step in range(8):
        lrs = [g["lr"] for g in ours.param_groups]
        assert lrs == [g["lr"] for g in theirs.param_groups]
        assert lrs == [0.3 * factor(step), 0.02 * factor(step)]
        theirs.step()  # LambdaLR warns unless the optimizer stepped first
        ours_schedule.step()
        theirs_schedule.step()


def test_zero_grad_and_state_dict_round_trip() -> None:
    param = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    other = torch.nn.Parameter(torch.tensor([[0.5]]))
    optimizer = AdamWOptimizer([{"params": [param]}, {"params": [other], "lr": 0.5}], lr=0.1)
    assert optimizer.param_groups[0]["lr"] == 0.1 and optimizer.param_groups[1]["lr"] == 0.5
    assert optimizer.param_groups[1]["betas"] == (0.9, 0.999)  # defaults filled in
    (param.sum() * 3 + other.sum()).backward()
    optimizer.zero_grad(set_to_none=False)
    assert param.grad.tolist() == [0.0, 0.0] and other.grad.tolist() == [[0.0]]
    param.grad, other.grad = torch.tensor([0.3, -0.1]), torch.tensor([[2.0]])
    optimizer.step()
    optimizer.zero_grad()
    assert param.grad is None and other.grad is None

    saved = copy.deepcopy(optimizer.state_dict())
    assert saved["param_groups"][0]["params"] == [0] and saved["param_groups"][1]["params"] == [1]
    assert set(saved["state"]) == {0, 1} and float(saved["state"][1]["step"]) == 1.0
    fresh = AdamWOptimizer([{"params": [param]}, {"params": [other], "lr": 0.9}], lr=0.1)
    fresh.load_state_dict(saved)
    assert fresh.param_groups[1]["lr"] == 0.5  # the saved hyperparameters come back
    assert torch.equal(fresh.state[other]["exp_avg_sq"], optimizer.state[other]["exp_avg_sq"])
    assert fresh.state[other]["exp_avg_sq"] is not optimizer.state[other]["exp_avg_sq"]
    with pytest.raises(ValueError, match="param groups do not match"):
        AdamWOptimizer([param, other], lr=0.1).load_state_dict(saved)
    with pytest.raises(ValueError, match="more than once"):
        AdamWOptimizer([{"params": [param]}, {"params": [param]}], lr=0.1)


def test_lion_matches_algorithm_by_hand() -> None:
    w0 = torch.tensor([0.5, -1.0, 2.0, 0.0])
    grads = [torch.tensor([0.1, -0.2, 0.0, 3.0]), torch.tensor([-0.3, -0.1, 0.2, -0.5])]
    lr, wd, beta1, beta2 = 0.1, 0.5, 0.9, 0.99
    param = torch.nn.Parameter(w0.clone())
    optimizer = LionOptimizer([param], lr=lr, betas=(beta1, beta2), weight_decay=wd)

    w, m = w0.tolist(), [0.0] * 4
    for g in grads:
        param.grad = g.clone()
        optimizer.step()
        for i in range(4):
            c = beta1 * m[i] + (1 - beta1) * g[i].item()
            sign = (c > 0) - (c < 0)
            w[i] = w[i] - lr * (sign + wd * w[i])
            m[i] = beta2 * m[i] + (1 - beta2) * g[i].item()
        assert param.detach().tolist() == pytest.approx(w, abs=1e-7)
    # first step from zero momentum: the update is exactly -lr * sign(g) before decay
    assert optimizer.state[param]["exp_avg"].tolist() == pytest.approx(m, abs=1e-7)


def test_cautious_adamw_matches_the_algorithm_by_hand() -> None:
    """Two steps on four entries; at the second the gradient flips sign on two of them, which
    are masked, and the other two are scaled by 1 / mean(mask) = 2."""
    w0 = [0.5, -1.0, 2.0, 0.3]
    grads = [[0.1, -0.2, 0.3, 0.5], [-0.05, -0.1, 0.2, -0.05]]
    lr, wd, beta1, beta2, eps = 0.1, 0.5, 0.9, 0.99, 1e-8
    param = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))
    optimizer = CautiousAdamWOptimizer([param], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd)

    w, m, v = list(w0), [0.0] * 4, [0.0] * 4
    for t, g in enumerate(grads, start=1):
        param.grad = torch.tensor(g, dtype=torch.float64)
        optimizer.step()
        u = []
        for i in range(4):
            w[i] *= 1 - lr * wd
            m[i] = beta1 * m[i] + (1 - beta1) * g[i]
            v[i] = beta2 * v[i] + (1 - beta2) * g[i] ** 2
            u.append((m[i] / (1 - beta1**t)) / (math.sqrt(v[i] / (1 - beta2**t)) + eps))
        mask = [1.0 if u[i] * g[i] > 0 else 0.0 for i in range(4)]
        mean = sum(mask) / 4
        for i in range(4):
            w[i] -= lr * mask[i] / mean * u[i]
        assert param.detach().tolist() == pytest.approx(w, abs=1e-12)
        assert mask == ([1.0] * 4 if t == 1 else [0.0, 1.0, 1.0, 0.0])  # the case under test


def test_cautious_adamw_is_torch_adamw_when_every_sign_agrees() -> None:
    """Gradients of a fixed sign per entry keep every update agreeing: bit-identical to
    torch.optim.AdamW; one flipped entry makes them differ (the mask is live)."""
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(3, 5, generator=generator)
    signs = torch.randn(3, 5, generator=generator).sign()
    sizes = [torch.rand(3, 5, generator=generator) + 0.1 for _ in range(6)]

    def run(optimizer_from, flip: bool) -> torch.Tensor:
        param = torch.nn.Parameter(start.clone())
        optimizer = optimizer_from([param])
        for step, size in enumerate(sizes):
            grad = signs * size
            if flip and step == 3:
                grad[0, 0] = -grad[0, 0]
            param.grad = grad
            optimizer.step()
        return param.detach()

    settings = dict(lr=3e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    ours = run(lambda p: CautiousAdamWOptimizer(p, **settings), flip=False)
    theirs = run(lambda p: torch.optim.AdamW(p, foreach=False, **settings), flip=False)
    assert torch.equal(ours, theirs)
    assert not torch.equal(run(lambda p: CautiousAdamWOptimizer(p, **settings), flip=True),
                           run(lambda p: torch.optim.AdamW(p, foreach=False, **settings), flip=True))


def test_lion_component_applies_the_multipliers() -> None:
    model = torch.nn.Linear(3, 3)
    optimizer = Lion(LionConfig(lr_multiplier=0.5, weight_decay_multiplier=4.0)).build(
        model, lr=1e-3, weight_decay=0.1
    )
    group = optimizer.param_groups[0]
    assert group["lr"] == pytest.approx(5e-4) and group["weight_decay"] == pytest.approx(0.4)


def test_optimizer_hyperparameters_are_validated() -> None:
    spec = full_registry().get("optimizer", "lion")
    with pytest.raises(ConfigError, match="optimizer component 'lion': beta1"):
        spec.make_config({"beta1": 1.5})
    with pytest.raises(ConfigError, match="optimizer component 'lion': momentum: Extra inputs"):
        spec.make_config({"momentum": 0.9})


@pytest.mark.parametrize(("name", "second"), [
    ("adamw", {"beta1": 0.8, "beta2": 0.95, "eps": 1e-6}),
    ("lion", {"beta1": 0.95, "beta2": 0.98, "lr_multiplier": 0.5, "weight_decay_multiplier": 2.0}),
    ("muon", {"momentum": 0.9, "rms_scale": 0.3, "beta1": 0.8, "beta2": 0.95, "adamw_lr_ratio": 2.5}),
    ("cautious_adamw", {"beta1": 0.8, "beta2": 0.95, "eps": 1e-6}),
], ids=["adamw", "lion", "muon", "cautious_adamw"])
def test_batched_twin_follows_its_optimizer_on_every_replica(name: str, second: dict) -> None:
    """Two replicas stacked (their own init, lr, weight decay and settings) and updated by the
    component's batched twin equal the component's own optimizer on each replica, given the
    same gradients; Muon's per-replica orthogonality error too (_Shapes has a hidden matrix,
    ``project.weight``, beside parameters for its AdamW groups)."""
    steps, lrs, decays = 5, [3e-3, 1e-2], [0.1, 0.0]
    components = [build_optimizer(ComponentChoice(name=name)),
                  build_optimizer(ComponentChoice(name=name, config=second))]
    torch.manual_seed(0)
    models = [_Shapes(), _Shapes()]
    optimizers = [component.build(model, lr=lr, weight_decay=decay)
                  for component, model, lr, decay in zip(components, models, lrs, decays, strict=True)]
    names = [n for n, _ in models[0].named_parameters()]
    stacked = {n: torch.stack([m.get_parameter(n).detach() for m in models]) for n in names}  # (R, ...)
    roles = parameter_roles(models[0])
    twin = components[0].batched([c.config for c in components], lrs, decays,
                                 {n: roles[n] for n in names}, torch.device("cpu"), steps)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        grads = {n: torch.randn(stacked[n].shape, generator=generator) for n in names}  # (R, ...)
        for replica, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            for n in names:
                model.get_parameter(n).grad = grads[n][replica].clone()
            optimizer.step()
        twin.step(stacked, grads, torch.ones(2))  # schedule factor 1, both replicas alive
    for replica, (model, component) in enumerate(zip(models, components, strict=True)):
        for n in names:
            torch.testing.assert_close(stacked[n][replica], model.get_parameter(n).detach(),
                                       rtol=1e-5, atol=1e-7, msg=f"{name} replica {replica}: {n}")
        error = 0.0 if twin.last_errors is None else float(twin.last_errors[replica])
        assert error == pytest.approx(component.orthogonality_error(), rel=1e-5)
    assert (twin.last_errors is not None) == (name == "muon")
