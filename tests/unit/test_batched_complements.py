"""The batched twins' moment updates take 1 - beta as the sequential optimizers do: the
complement computed in double, then rounded to float32, not 1 - float32(beta) (which is off
in the last bits: 1 - float32(0.9) = 0.100000024). Given identical gradients, each replica's
moments then equal its sequential run's bit for bit."""

from __future__ import annotations

import torch
from torch import nn

from llmevo.components.optim.lion import LionBatched, LionConfig, LionOptimizer
from llmevo.components.optim.muon import MuonBatched, MuonConfig

STEPS = 6


def _grads(shape: tuple[int, ...]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator) for _ in range(STEPS)]


def _stepped_twin(twin_class, configs) -> tuple[object, dict, torch.Tensor, list[torch.Tensor]]:
    """A twin of two replicas stepped ``STEPS`` times: (twin, its stacked weights, start, grads)."""
    start = torch.randn(2, 8, 8, generator=torch.Generator().manual_seed(1))
    grads = _grads((2, 8, 8))
    twin = twin_class(configs, [1e-3, 1e-3], [0.0, 0.0], {"w": "hidden_matrix"}, torch.device("cpu"), STEPS)
    stacked = {"w": start.clone()}
    for grad in grads:
        twin.step(stacked, {"w": grad}, torch.ones(2))
    return twin, stacked, start, grads


def test_lion_twin_moments_and_weights_equal_the_sequential_optimizer_bit_for_bit():
    configs = [LionConfig(beta1=0.9, beta2=0.99), LionConfig(beta1=0.95, beta2=0.98)]
    twin, stacked, start, grads = _stepped_twin(LionBatched, configs)
    for replica, config in enumerate(configs):
        weight = nn.Parameter(start[replica].clone())
        alone = LionOptimizer([weight], lr=1e-3 * config.lr_multiplier, betas=(config.beta1, config.beta2))
        for grad in grads:
            weight.grad = grad[replica].clone()
            alone.step()
        assert torch.equal(twin.state["w"]["exp_avg"][replica], alone.state[weight]["exp_avg"])
        assert torch.equal(stacked["w"][replica], weight.detach())


def test_muon_twin_momentum_buffer_follows_the_sequential_lerp_bit_for_bit():
    configs = [MuonConfig(momentum=0.95), MuonConfig(momentum=0.9)]
    twin, _, _, grads = _stepped_twin(MuonBatched, configs)
    for replica, config in enumerate(configs):
        buffer = torch.zeros(8, 8)
        for grad in grads:  # MuonAdamW's own update: buffer.lerp_(grad, 1 - momentum), a double scalar
            buffer.lerp_(grad[replica], 1 - config.momentum)
        assert torch.equal(twin.state["w"]["momentum_buffer"][replica], buffer)
