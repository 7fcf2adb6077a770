"""The tiny fixed run whose per-step losses are kept as a golden test asset.

Regenerate (only when a change is meant to move the numbers, and say why in the commit):
    .venv/bin/python tests/assets/golden.py > tests/assets/golden_losses.json
"""

from __future__ import annotations

import json

import torch

from llmevo.catalog import build_model, build_optimizer
from llmevo.model.config import ModelConfig
from llmevo.train.trainer import TrainConfig, train

CONFIG = TrainConfig(steps=8, batch_size=4, seq_len=32, lr=1e-3, schedule="cosine", warmup_steps=2)


def golden_run() -> list[float]:
    stream = torch.randint(0, 512, (4096,), generator=torch.Generator().manual_seed(7))
    stream = stream % 37 + (torch.arange(4096) % 5) * 37  # structured enough to learn from
    torch.manual_seed(0)
    model = build_model(ModelConfig())
    return train(model, stream, CONFIG, seed=0, device=torch.device("cpu"),
                 optimizer=build_optimizer(CONFIG.optimizer)).losses


if __name__ == "__main__":
    print(json.dumps({"config": CONFIG.model_dump(mode="json"), "losses": golden_run()}, indent=2))
