"""Tuned reproductions through the arm cache: a shared baseline is trained once, a second run
of the same comparison trains nothing and gives the same artifact, a lost or damaged entry is
recomputed alone, and ``arm_cache=False`` / ``--no-arm-cache`` / TensorBoard retrain."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from cache_support import fresh_cache as empty_cache

from llmevo.artifacts import load_artifact
from llmevo.cli import main
from llmevo.errors import ConfigError
from llmevo.experiments import ReproductionRequest, reproduce
from llmevo.inference.checkpoint import load_checkpoint
from llmevo.reports.sections import cache_sentence
from llmevo.runner import run
from llmevo.runner.cache import _Entries
from llmevo.train import execution

SEEDS = [42, 43, 44]


@pytest.fixture
def fresh_cache(tmp_path: Path, cache_dir: Path) -> Path:
    return empty_cache(tmp_path, cache_dir)


class Recorder:
    """Counts the runs every train_many call trains, by arm label, and every key asked for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.trained: Counter = Counter()  # (label, "tuning"/"report", lr, seed) -> times trained
        self.keys: dict[tuple, str] = {}  # (feed-forward, kind, lr, seed) -> key
        real_key, real_train = _Entries.key, execution.train_many

        def key(entries, spec, call):
            found = real_key(entries, spec, call)
            self.keys[(entries.arm["model"]["feedforward"]["name"], entries.kind, spec.config.lr,
                       spec.seed)] = found
            return found

        def train_many(build, stream, runs, device, progress=None, description="train", **kwargs):
            # descriptions: "tune baseline" (tuning), "baseline llama_modern[...]" (report seeds)
            words = description.split()
            label, kind = (words[1], "tuning") if words[0] == "tune" else (words[0], "report")
            for spec in runs:
                self.trained[(label, kind, spec.config.lr, spec.seed)] += 1
            return real_train(build, stream, runs, device, progress, description, **kwargs)

        monkeypatch.setattr(_Entries, "key", key)
        monkeypatch.setattr(run, "train_many", train_many)  # tuning trains through run_arm too

    def arms(self) -> set[str]:
        return {label for label, *_ in self.trained}


def _reproduce(name: str, data_dir: Path, cache: Path, out: Path, **changes) -> dict:
    settings = {"seeds": SEEDS, "steps": 3, "tune_grid": [1e-3, 3e-3], "tune_confirm": 1, **changes}
    request = ReproductionRequest(name=name, preset="smoke", threads=1, device="cpu",
                                  data_dir=data_dir, cache_dir=cache, report=False, out=out, **settings)
    return reproduce(request).to_json_dict()


def _comparable(artifact: dict, *wall_clock: str) -> dict:
    """The artifact without provenance, the cache block, the measured cost of the run (CPU and
    wall seconds: what loading from the cache saves; the no-op check's seconds) and the named
    setup fields."""
    kept = {key: value for key, value in artifact.items() if key not in ("provenance", "cache")}
    dropped = {*wall_clock, "cpu_seconds", "reproduction_wall_seconds"}
    kept["setup"] = {key: value for key, value in artifact["setup"].items() if key not in dropped}
    if "training_path" in wall_clock and kept.get("tuning"):  # each tuning run's path too
        kept["tuning"] = {**kept["tuning"], "arms": {
            label: {**block, "settings": [{k: v for k, v in s.items() if k != "paths"} for s in block["settings"]]}
            for label, block in kept["tuning"]["arms"].items()}}
    if kept.get("tuning"):  # each arm's tuning budget: what this run trained and spent
        kept["tuning"] = {**kept["tuning"], "arms": {
            label: {k: v for k, v in block.items() if k != "budget"} for label, block in kept["tuning"]["arms"].items()}}
    if kept.get("equivalence"):  # the no-op check's own cost
        kept["equivalence"] = {key: value for key, value in kept["equivalence"].items() if key != "seconds"}
    return kept


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, cache_dir: Path) -> SimpleNamespace:
    """One tuned relu2 reproduction into an empty arm cache: its artifact, runs and keys."""
    folder = tmp_path_factory.mktemp("cold")
    cache = empty_cache(folder, cache_dir)
    with pytest.MonkeyPatch.context() as patch:
        recorder = Recorder(patch)
        artifact = _reproduce("relu2", data_dir, cache, folder / "cold.json")
    return SimpleNamespace(cache=cache, artifact=artifact, trained=Counter(recorder.trained),
                           keys=dict(recorder.keys))


@pytest.fixture
def warm_cache(cold: SimpleNamespace, tmp_path: Path) -> Path:
    """A copy of the cold run's cache, for one test to read and change."""
    copy = tmp_path / "cache"
    shutil.copytree(cold.cache, copy, symlinks=True)
    return copy


def test_the_cold_run_trains_every_run_once_and_says_nothing_was_cached(cold):
    assert {label for label, *_ in cold.trained} == {"baseline", "method"}
    assert max(cold.trained.values()) == 1
    assert cold.artifact["cache"] == {label: {"report_seeds": [], "tuning": []}
                                      for label in ("baseline", "method")}
    # the grid [1e-3, 3e-3] was extended (9e-3), probed two steps above that (8.1e-2, on the
    # tuning seed alone: it lost) and its best confirmed: four learning rates per arm
    tuned = [key for key in cold.trained if key[:2] == ("baseline", "tuning")]
    assert len({seed for *_, seed in tuned}) == 2 and len({lr for _, _, lr, _ in tuned}) == 4
    probe = cold.artifact["tuning"]["arms"]["baseline"]["probe"]
    assert probe["lr"] == pytest.approx(8.1e-2) and not probe["moved"]
    assert [key for key in tuned if key[2] == probe["lr"]] == [("baseline", "tuning", probe["lr"], 1000)]


def test_a_shared_baseline_trains_once_and_a_repeat_trains_nothing(
        cold, data_dir, warm_cache, tmp_path, monkeypatch):
    recorder = Recorder(monkeypatch)
    geglu = _reproduce("geglu", data_dir, warm_cache, tmp_path / "geglu.json")  # same GELU baseline
    assert recorder.arms() == {"method"}  # the baseline came from the cache
    baseline_tuning = [key for key in cold.trained if key[:2] == ("baseline", "tuning")]
    assert geglu["cache"]["baseline"]["report_seeds"] == SEEDS
    assert len(geglu["cache"]["baseline"]["tuning"]) == len(baseline_tuning)
    assert geglu["cache"]["method"] == {"report_seeds": [], "tuning": []}
    assert [row["baseline"] for row in geglu["per_seed"]] == [row["baseline"] for row in cold.artifact["per_seed"]]
    assert _comparable(geglu)["tuning"]["arms"]["baseline"] == _comparable(cold.artifact)["tuning"]["arms"]["baseline"]
    assert geglu["tuning"]["arms"]["baseline"]["budget"]["trained"] == 0  # every run from the cache

    recorder.trained.clear()
    warm = _reproduce("relu2", data_dir, warm_cache, tmp_path / "warm.json")
    assert recorder.trained == Counter()  # nothing trained at all
    assert warm["cache"]["method"]["report_seeds"] == SEEDS
    # statistics, verdict, per-seed numbers, tuning, curves, even the (original) wall times
    assert _comparable(warm) == _comparable(cold.artifact)
    sentence = cache_sentence(load_artifact(tmp_path / "warm.json"))
    assert sentence is not None and "report seed(s) 42, 43, 44" in sentence


def test_a_lost_or_damaged_entry_is_recomputed_alone(cold, data_dir, warm_cache, tmp_path, monkeypatch):
    chosen = cold.artifact["baseline"]["learning_rate"]
    lost = cold.keys[("gelu", "report", chosen, 43)]
    damaged = cold.keys[("relu2", "tuning", 1e-3, 1000)]
    (warm_cache / "arms" / lost[:2] / f"{lost}.json").unlink()
    (warm_cache / "arms" / damaged[:2] / f"{damaged}.json").write_text('{"version": 1, "key": ')
    recorder = Recorder(monkeypatch)
    again = _reproduce("relu2", data_dir, warm_cache, tmp_path / "again.json")
    assert set(recorder.trained) == {("baseline", "report", chosen, 43), ("method", "tuning", 1e-3, 1000)}
    assert again["cache"]["baseline"]["report_seeds"] == [42, 44]
    assert {"lr": 1e-3, "seed": 1000} not in again["cache"]["method"]["tuning"]
    # a lone run trains in this process, not in a worker: the path says so; numbers are equal
    assert again["setup"]["training_path"]["baseline"]["43"] == "sequential"
    assert _comparable(again, "wall_seconds", "training_path") == _comparable(
        cold.artifact, "wall_seconds", "training_path")
    # the recomputed entries were written back: a third run trains nothing
    recorder.trained.clear()
    _reproduce("relu2", data_dir, warm_cache, tmp_path / "third.json")
    assert recorder.trained == Counter()


def test_no_arm_cache_retrains_everything_and_gives_the_same_numbers(
        cold, data_dir, warm_cache, tmp_path, monkeypatch):
    recorder = Recorder(monkeypatch)
    retrained = _reproduce("relu2", data_dir, warm_cache, tmp_path / "retrained.json", arm_cache=False,
                           save_checkpoints=tmp_path / "trained")
    assert recorder.trained == cold.trained and "cache" not in retrained
    assert _comparable(retrained, "wall_seconds") == _comparable(cold.artifact, "wall_seconds")
    # --save-checkpoints from cache hits: the same weights as the models trained just now
    recorder.trained.clear()
    _reproduce("relu2", data_dir, warm_cache, tmp_path / "loaded.json", save_checkpoints=tmp_path / "loaded")
    assert recorder.trained == Counter()
    for label in ("baseline", "method"):
        trained = load_checkpoint(tmp_path / "trained" / label).model.state_dict()
        loaded = load_checkpoint(tmp_path / "loaded" / label).model.state_dict()
        assert trained.keys() == loaded.keys()
        assert all(torch.equal(trained[name], loaded[name]) for name in trained)


def test_a_tracker_bypasses_the_arm_cache(data_dir, fresh_cache, tmp_path):
    pytest.importorskip("tensorboard")
    artifact = _reproduce("relu2", data_dir, fresh_cache, tmp_path / "tb.json", tune=False, tune_grid=None, tune_confirm=None,
                          seeds=[42], steps=2, tracker="tensorboard", tracker_dir=tmp_path / "tb")
    assert "cache" not in artifact and not (fresh_cache / "arms").exists()


def test_the_cli_flag_turns_the_cache_off(monkeypatch, tmp_path, capsys):
    requests = []

    def capture(plan, progress=None):
        requests.append(plan)
        raise ConfigError("captured")

    monkeypatch.setattr("llmevo.experiments.reproduce", capture)
    for flag, expected in (([], "use"), (["--no-arm-cache"], "refresh"), (["--arm-cache"], "use")):
        with pytest.raises(SystemExit) as exit_:
            main(["reproduce", "relu2", "--out", str(tmp_path / "a.json"), "--data-dir", str(tmp_path),
                  *flag])
        assert exit_.value.code == 2 and requests[-1].plan().arm_cache == expected  # the CLI hands the request down
    assert "captured" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["reproduce", "relu2", "--no-arm-cache=yes", "--data-dir", str(tmp_path)])
    assert exit_.value.code == 2 and len(requests) == 3
