"""AdamW (1711.05101) vs torch.optim.AdamW; Lion (2302.06675) vs its Algorithm 2 by hand."""

from __future__ import annotations

import pytest
import torch

from llmevo.catalog import build_model, ensure_registered
from llmevo.components.optim.lion import Lion, LionConfig, LionOptimizer
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matrices: intra-op threads only add synchronisation (very slow on a busy CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_adamw_component_is_torch_adamw() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=1))
    reference = build_model(ModelConfig(n_layers=1))
    reference.load_state_dict(model.state_dict())
    spec = ensure_registered().get("optimizer", "adamw")
    ours = spec.cls(spec.make_config({"beta2": 0.95})).build(model, lr=1e-3, weight_decay=0.1)
    theirs = torch.optim.AdamW(reference.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    tokens = torch.randint(0, 512, (2, 9))
    for _ in range(3):
        for net, opt in ((model, ours), (reference, theirs)):
            opt.zero_grad()
            net(tokens).logsumexp(-1).mean().backward()
            opt.step()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)


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


def test_lion_component_applies_the_multipliers() -> None:
    model = torch.nn.Linear(3, 3)
    optimizer = Lion(LionConfig(lr_multiplier=0.5, weight_decay_multiplier=4.0)).build(
        model, lr=1e-3, weight_decay=0.1
    )
    group = optimizer.param_groups[0]
    assert group["lr"] == pytest.approx(5e-4) and group["weight_decay"] == pytest.approx(0.4)


def test_optimizer_hyperparameters_are_validated() -> None:
    spec = ensure_registered().get("optimizer", "lion")
    with pytest.raises(ConfigError, match="optimizer component 'lion': beta1"):
        spec.make_config({"beta1": 1.5})
    with pytest.raises(ConfigError, match="optimizer component 'lion': momentum: Extra inputs"):
        spec.make_config({"momentum": 0.9})
