"""Batched replicas on CUDA: the vmapped step trains forward and backward and each replica
matches the sequential run of its seed on the same device (the first GPU check found the
fused memory-efficient attention kernel's backward failing under vmap; ``train/replicas.py``
keeps it out). Skipped without CUDA; ``scripts/gpu_check.py`` runs it on a lent GPU."""

from __future__ import annotations

import pytest
import torch

from llmevo.catalog import build_model, build_optimizer
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.train.replicas import train_replicas
from llmevo.train.trainer import TrainConfig, train

STREAM = torch.randint(0, 512, (8000,), generator=torch.Generator().manual_seed(0))
SMALL = ModelConfig(d_model=64, n_layers=2, n_heads=4)


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_replicas_match_sequential_runs(precision: str) -> None:
    device = torch.device("cuda")
    config = TrainConfig(steps=12, batch_size=4, seq_len=64, lr=3e-3, precision=precision,
                         optimizer=ComponentChoice(name="adamw"))
    seeds = [5, 6]
    trained = train_replicas(lambda: build_model(SMALL), STREAM, seeds, [config, config], device,
                             build_optimizer=build_optimizer)
    for (_, result), seed in zip(trained, seeds, strict=True):
        torch.manual_seed(seed)
        alone = train(build_model(SMALL).to(device), STREAM, config, seed, device,
                      build_optimizer(config.optimizer))
        assert result.status == alone.status == "complete"
        assert result.token_stream_sha256 == alone.token_stream_sha256
        tolerance = 1e-3 if precision == "fp32" else 3e-2  # kernels differ; bf16 rounds
        for batched, sequential in zip(result.losses, alone.losses, strict=True):
            assert abs(batched - sequential) <= tolerance * abs(sequential)
