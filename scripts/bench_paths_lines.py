"""R runs through each ``train_many`` path, one JSON line per path as soon as it is measured
(``llmevo bench --replicas`` prints its list only at the end; on a busy machine a time limit
can cut a long comparison short, and these lines survive it). Same measurement code as the
bench: each path runs R seeds of llama_modern with N steps and with 1 step, each in a fresh
spawned process.

    PYTHONPATH=src python scripts/bench_paths_lines.py --replicas 8 --steps 40 --threads 2 \
        --path sequential,parallel,batched,parallel-batched
"""

from __future__ import annotations

import argparse
import json

import torch

from llmevo.bench import _measure_in_child
from llmevo.model.config import ModelConfig
from llmevo.train.trainer import TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--path", default="sequential,parallel,batched,parallel-batched")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device, tokens = torch.device("cpu"), args.replicas * 48 * 64
    for path in args.path.split(","):
        walls = {}
        for steps in (args.steps, 1):
            train = TrainConfig(steps=steps, batch_size=48, seq_len=64, lr=1e-3)
            walls[steps] = _measure_in_child(ModelConfig(), device, args.replicas, train, path, None)
        wall, peak, ran = walls[args.steps]
        step_seconds = (wall - walls[1][0]) / (args.steps - 1)
        print(json.dumps({"replicas": args.replicas, "path": ran, "steps": args.steps, "threads": args.threads,
                          "train_tokens_per_second": tokens * args.steps / wall,
                          "steady_tokens_per_second": tokens / step_seconds if step_seconds > 0 else None,
                          "setup_seconds": wall - args.steps * step_seconds, "wall_seconds": wall,
                          "peak_memory_mib": peak}), flush=True)


if __name__ == "__main__":
    main()
