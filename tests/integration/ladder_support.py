"""Tiny ladders for the integration tests, and a ladder worker that counts what it trains."""

from __future__ import annotations

import json
from pathlib import Path

from llmevo.experiments.ladder import LadderRequest
from llmevo.runner.presets import get_preset

# quick, with smoke-sized data and evaluation: what the size dial scales, at test cost
TINY = get_preset("quick").override({
    "variant": "tokens", "train_tokens": 20_000, "validation_tokens": 4_000, "test_tokens": 4_000,
    "narrative_tokens": 20_000, "suite": "core", "eval_max_windows": 8, "train_on": ("lm",)})


def tiny_request(out: Path, data_dir: Path, cache_dir: Path, **changes) -> LadderRequest:
    values = dict(name="rope", rungs=[-2, -1], seeds=[42, 43, 44], tune_confirm=0, full_grid_rungs=1,
                  tokens_per_parameter=0.08, preset=TINY, data_dir=data_dir, cache_dir=cache_dir,
                  device="cpu", path="sequential", resamples=64, out=out)
    return LadderRequest(**(values | changes))


def own_cache(folder: Path, cache_dir: Path) -> Path:
    """A cache folder sharing the test cache's prepared data but not its arm entries."""
    folder.mkdir()
    for entry in cache_dir.iterdir():
        if entry.name != "arms":
            (folder / entry.name).symlink_to(entry)
    return folder


def count_trainings(counter: Path) -> None:
    """From now on, every run ``train_many`` trains in this process appends one JSON line
    (what trained it, seed, lr, batch size) to ``counter``."""
    from llmevo.runner import run as run_module  # tuning runs train through run_arm too

    original = run_module.train_many

    def counting(build, stream, specs, *args, **kwargs):
        with open(counter, "a", encoding="utf-8") as handle:
            for spec in specs:
                handle.write(json.dumps([kwargs.get("description"), spec.seed, spec.config.lr,
                                         spec.config.batch_size]) + "\n")
        return original(build, stream, specs, *args, **kwargs)

    run_module.train_many = counting


def trained(counter: Path) -> list[tuple]:
    if not counter.exists():
        return []
    return [tuple(json.loads(line)) for line in counter.read_text(encoding="utf-8").splitlines()]


def counting_worker(request: LadderRequest, counter: str) -> None:
    """A ladder worker process (multiprocessing spawn): one thread, its trainings counted."""
    import torch

    from llmevo.experiments.ladder import run_ladder

    torch.set_num_threads(1)
    count_trainings(Path(counter))
    run_ladder(request)


def counting_evidence_worker(request, counter: str, folder: str) -> None:
    """An evidence-table worker process (multiprocessing spawn) in ``folder``: one thread, its
    trainings counted."""
    import os

    import torch

    from llmevo.experiments.evidence import run_evidence

    os.chdir(folder)
    torch.set_num_threads(1)
    count_trainings(Path(counter))
    run_evidence(request)
