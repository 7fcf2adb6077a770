"""The same key, the same number (issue 34, item 1).

A tuned smoke reproduction (relu2 against GELU: tuning grid, edge extension, confirmation and
report runs, both arms) fills an empty arm cache on the sequential path at one thread. The
same keys are then retrained under every CPU execution path at one thread:

- parallel single-thread workers (the grid, the confirmation and the report seeds in forked
  workers, the lone extension run in this process): every number equals the cached one to
  the last bit, so a cache hit is what recomputation gives on either path;
- batched replicas (one vmapped step per group): every number equals that path's own
  retraining to the last bit, but not the sequential run's (last-bit differences from the first
  step, which a run near the stability edge turns into another number: post_norm at lr 9e-3
  seed 1002 read 4.744 sequential on this machine), so a batched request is never answered
  from the sequential entries;
- and a run cached on another CPU (the key names the CPU) is not returned: the published
  numbers of the 12 keys of issue 34 differ because one commit ran on different machines
  (docs/LOG.md, 2026-12-05, fifteenth session).

On the code before this session the last test fails: the key did not name the CPU.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from cache_support import fresh_cache

from llmevo.experiments import ReproductionRequest, reproduce
from llmevo.runner import cache as arm_cache
from llmevo.train import execution

SEEDS = [42, 43]
NOTHING_CACHED = {label: {"report_seeds": [], "tuning": []} for label in ("baseline", "method")}


def _reproduce(data_dir: Path, cache: Path, out: Path, path: str, **changes) -> dict:
    settings = {"seeds": SEEDS, "steps": 6, "tune_grid": [3e-3, 9e-3], "tune_confirm": 1, **changes}
    request = ReproductionRequest(name="relu2", preset="smoke", threads=1, device="cpu", path=path,
                                  data_dir=data_dir, cache_dir=cache, report=False, out=out, **settings)
    return reproduce(request).to_json_dict()


def _numbers(artifact: dict) -> dict:
    """Every per-seed number: the report seeds' metrics, each tuning run's score, and the
    training losses of each report seed."""
    return {
        "per_seed": artifact["per_seed"],
        "tuning": {label: [(s["lr"], s["validation"]) for s in block["settings"]]
                   for label, block in artifact["tuning"]["arms"].items()},
        "curves": {label: curve["per_seed"] for label, curve in artifact["training_curves"].items()},
    }


def _paths(artifact: dict) -> set[str]:
    return {path for arm in artifact["setup"]["training_path"].values() for path in arm.values()}


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, cache_dir: Path) -> SimpleNamespace:
    """The sequential, one-thread run into an empty cache: its artifact and its cache."""
    folder = tmp_path_factory.mktemp("sequential")
    cache = fresh_cache(folder, cache_dir)
    artifact = _reproduce(data_dir, cache, folder / "sequential.json", "sequential")
    assert artifact["cache"] == NOTHING_CACHED and _paths(artifact) == {"sequential"}
    return SimpleNamespace(cache=cache, artifact=artifact)


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two worker processes whatever the machine has, so the parallel path forks workers."""
    monkeypatch.setattr(execution.os, "cpu_count", lambda: 2)


def test_parallel_workers_retrain_the_cached_numbers_to_the_last_bit(
        cached, data_dir, cache_dir, tmp_path, two_cores):
    cache = fresh_cache(tmp_path, cache_dir)
    parallel = _reproduce(data_dir, cache, tmp_path / "parallel.json", "parallel")
    assert parallel["cache"] == NOTHING_CACHED  # another path: another key, trained here
    assert _paths(parallel) == {"parallel"}  # the report seeds trained in workers
    assert _numbers(parallel) == _numbers(cached.artifact)
    # each tuning run says how it trained: the grid and the confirmation (calls of two runs) in
    # workers, the edge extension (one run under the one tuning seed) in this process
    for block in parallel["tuning"]["arms"].values():
        for setting in block["settings"]:
            lone = setting["extension"]
            assert setting["paths"]["1000"] == ("sequential" if lone else "parallel")
            assert all(path == "parallel" for seed, path in setting["paths"].items() if seed != "1000")


def test_batched_replicas_retrain_their_own_numbers_and_never_answer_for_another_path(
        cached, data_dir, cache_dir, tmp_path):
    warm = tmp_path / "warm"
    shutil.copytree(cached.cache, warm, symlinks=True)
    first = _reproduce(data_dir, warm, tmp_path / "batched.json", "batched")
    # the sequential entries are in this cache, and none of them answered the batched runs
    assert first["cache"] == NOTHING_CACHED and _paths(first) == {"batched"}
    grid = [s for s in first["tuning"]["arms"]["method"]["settings"] if not s["extension"]]
    assert {path for s in grid for path in s["paths"].values()} == {"batched"}
    again = _reproduce(data_dir, fresh_cache(tmp_path / "again", cache_dir), tmp_path / "again.json",
                       "batched")
    assert _numbers(again) == _numbers(first)
    # ... and the batched entries now in `warm` answer a batched request, with those numbers
    hit = _reproduce(data_dir, warm, tmp_path / "hit.json", "batched")
    assert hit["cache"]["baseline"]["report_seeds"] == SEEDS and _numbers(hit) == _numbers(first)


def test_a_run_cached_on_another_cpu_is_not_returned(cached, data_dir, tmp_path, monkeypatch):
    warm = tmp_path / "warm"
    shutil.copytree(cached.cache, warm, symlinks=True)
    same = _reproduce(data_dir, warm, tmp_path / "same.json", "sequential")
    assert same["cache"]["baseline"]["report_seeds"] == SEEDS  # this CPU: every run is a hit
    # (raising=False: before this session the cache had no CPU to patch, and the hit below
    # is what it returned)
    monkeypatch.setattr(arm_cache, "cpu_identity", lambda: {"model": "AMD EPYC (another machine)",
                                                            "flags_sha256": "0" * 16}, raising=False)
    other = _reproduce(data_dir, warm, tmp_path / "other.json", "sequential")
    assert other["cache"] == NOTHING_CACHED  # trained again, not loaded
    assert _numbers(other) == _numbers(cached.artifact)  # (here it is the same machine after all)
    assert other["provenance"]["numerics"]["threads"] == 1
