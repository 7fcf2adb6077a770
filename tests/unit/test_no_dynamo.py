"""Training never imports ``torch._dynamo`` (issue 11: its import costs more than a smoke run).

Any ``torch.optim.Optimizer`` or ``LRScheduler`` imports it on first use; the optimizers and
the schedule of ``components/optim`` do not. A fresh interpreter runs tiny versions of every
training path (the trainer with each registered optimizer, the replica-batched trainer, the
post-training stage, the BLT entropy model), then checks ``sys.modules``; as a control, it
then builds a ``torch.optim.AdamW`` and checks that the same test would have seen dynamo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = r"""
import json, sys
import torch
torch.set_num_threads(1)
from llmevo.catalog import build_model, build_optimizer, full_registry
from llmevo.data.codec import ByteCodec
from llmevo.data.suites import build_sequence
from llmevo.model.blt.entropy import EntropyModelSettings, train_entropy_model
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.components.post_training.stage import PostTrainSettings, PretrainedModel, run_post_training
from llmevo.components.post_training.tasks import ArithmeticConfig, PostTrainData, TokenPair, arithmetic_problems
from llmevo.train.replicas import train_replicas
from llmevo.train.trainer import TrainConfig, train

cpu = torch.device("cpu")
tiny = ModelConfig(vocab_size=259, d_model=32, n_layers=1, n_heads=4, max_seq_len=32,
                   feedforward=ComponentChoice(name="swiglu", config={"hidden": 64}))
stream = torch.randint(0, 259, (2000,), generator=torch.Generator().manual_seed(0))
ran = []
for name in full_registry().names("optimizer"):
    config = TrainConfig(steps=2, batch_size=2, seq_len=16, lr=1e-3, schedule="cosine",
                         warmup_steps=1, optimizer=ComponentChoice(name=name))
    ran.append(train(build_model(tiny), stream, config, seed=0, device=cpu,
                     optimizer=build_optimizer(config.optimizer)).status)
config = TrainConfig(steps=2, batch_size=2, seq_len=16, lr=1e-3)
ran += [r.status for _, r in train_replicas(lambda: build_model(tiny), stream, [0, 1],
                                              [config, config], cpu, build_optimizer=build_optimizer)]

codec = ByteCodec()
pairs = tuple(TokenPair(build_sequence(codec, f"q{i}?", " yes", 24),
                        build_sequence(codec, f"q{i}?", " no", 24)) for i in range(4))
problems = arithmetic_problems(ArithmeticConfig(max_operand=3))
data = PostTrainData(codec, 24, tuple(p.chosen for p in pairs), pairs,
                     {"validation": pairs[:2], "test": pairs[2:]},
                     {k: tuple(v) for k, v in problems.items()}, "synthetic")
settings = PostTrainSettings(steps=2, batch_size=2)
for method, task in (("sft", "instruction"), ("dpo", "preference")):
    result = run_post_training(PretrainedModel(build_model(tiny), steps_done=1),
                               ComponentChoice(name=method), data, task, settings, 0, cpu)
    ran.append(f"{method}:{result.examples}")

entropy = EntropyModelSettings(d_model=16, n_layers=1, n_heads=2, ffn_hidden=32, context=16,
                               batch_size=2, steps=2)
train_entropy_model(entropy, torch.randint(0, 256, (500,), generator=torch.Generator()), seed=0)
ran.append("entropy")

training = "torch._dynamo" in sys.modules
torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
print(json.dumps({"ran": ran, "training": training, "control": "torch._dynamo" in sys.modules}))
"""


def test_training_paths_do_not_import_dynamo() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    trained, stages = report["ran"][:-3], report["ran"][-3:]
    assert len(trained) >= 5 and set(trained) == {"complete"}  # >= 3 optimizers + 2 replicas
    assert stages == ["sft:4", "dpo:4", "entropy"]
    assert report["training"] is False  # no dynamo after every training path
    assert report["control"] is True  # ... and torch.optim would have brought it in
