"""``--tracker``: one run per arm and seed in TensorBoard, W&B (offline) or trackio (local),
read back with each tracker's own reader, on every training path.

The W&B runs are read from their offline transaction logs (``run-*.wandb``: LevelDB-log
framing of ``wandb.proto.wandb_internal_pb2.Record`` messages, the records ``wandb sync``
replays), the trackio runs from its local store (``trackio.sqlite_storage.SQLiteStorage``)."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from cli_runner import assert_refused, run_cli

from llmevo.catalog import build_model, build_optimizer
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.train.execution import RunSpec, train_many
from llmevo.train.logging import StepRecord
from llmevo.train.tracking import Tracking, check_tracker, verdict_summary
from llmevo.train.trainer import TrainConfig, lr_at

SEEDS = [42, 43]
STEPS = 3
RUNS = [f"{arm}-seed{seed}" for arm in ("baseline", "method") for seed in SEEDS]


# --- the interface, on a tracker kept in memory ------------------------------------------------

class MemoryTracker:
    def __init__(self):
        self.runs: dict[str, dict] = {}

    def start(self, name, config):
        run = self.runs[name] = {"config": dict(config), "logs": [], "summary": {}, "finished": False}

        class Run:
            def log(self, step, metrics):
                run["logs"].append((step, dict(metrics)))

            def summary(self, values):
                run["summary"].update(values)

            def finish(self):
                run["finished"] = True

        return Run()


def test_tracking_maps_steps_metrics_and_the_summary_to_every_run():
    tracker = MemoryTracker()
    logs = Tracking(tracker, {"comparison": "rope"})
    for name in ("baseline-seed42", "method-seed42"):
        run = logs.run(name)
        run.log_step(StepRecord(0, 2.5, 1e-3, 0.7, 64))
        run.log_metrics("validation", {"lm_loss": 2.0, "diverged": None, "flag": True}, 1)
        run.close()  # the run stays open for the summary
    assert not any(run["finished"] for run in tracker.runs.values())
    logs.summary({"verdict": "better", "verdict/change_percent": -1.5})
    logs.finish()
    for name, run in tracker.runs.items():
        assert run["config"] == {"comparison": "rope", "run": name}
        assert run["logs"] == [(1, {"train/loss": 2.5, "train/lr": 1e-3, "train/grad_norm": 0.7}),
                               (1, {"validation/lm_loss": 2.0})]  # only finite numbers
        assert run["summary"] == {"verdict": "better", "verdict/change_percent": -1.5} and run["finished"]


def test_verdict_summary_reads_the_verdict_and_its_interval():
    verdict = {"summary": "rope lowers lm_loss by 1%", "classification": "better", "metric": "lm_loss",
               "significant": True, "margin_percent": 1.0, "noise_floor_percent": None}
    statistics = {"lm_loss": {"paired_relative_change_percent": {"mean": -1.0, "ci_low": -1.5, "ci_high": -0.5}}}
    assert verdict_summary(verdict, statistics) == {
        "verdict": "rope lowers lm_loss by 1%", "verdict/classification": "better", "verdict/metric": "lm_loss",
        "verdict/significant": True, "verdict/margin_percent": 1.0, "verdict/change_percent": -1.0,
        "verdict/ci_low": -1.5, "verdict/ci_high": -0.5}
    assert verdict_summary(None, None, "a seed failed") == {"verdict": "withheld: a seed failed"}


@pytest.mark.parametrize("tracker, extra", [("wandb", "wandb"), ("trackio", "trackio"), ("tensorboard", "hf")])
def test_a_tracker_not_installed_is_one_line_naming_its_extra(monkeypatch, tracker, extra):
    monkeypatch.setitem(sys.modules, tracker, None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=rf"--tracker {tracker} needs the {tracker} package: "
                                          rf"pip install 'llmevo\[{extra}\]'"):
        check_tracker(tracker)


def test_the_command_refuses_a_missing_tracker_before_any_work(workdir, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    assert_refused(["reproduce", "rope", "--preset", "smoke", "--seed", "42", "--steps", "2", "--no-report",
                    "--out", str(workdir / "a.json"), "--tracker", "wandb"],
                   "--tracker wandb needs the wandb package: pip install 'llmevo[wandb]'", capsys, workdir)


# --- every training path ---------------------------------------------------------------------

class Recorder:
    def __init__(self):
        self.records: list[StepRecord] = []
        self.closed = False

    def log_step(self, record):
        self.records.append(record)

    def close(self):
        self.closed = True


class MemoryLogs:
    def __init__(self):
        self.runs: dict[str, Recorder] = {}

    def run(self, name):
        return self.runs.setdefault(name, Recorder())


def _train(path: str, logs: MemoryLogs):
    stream = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0))
    config = TrainConfig(steps=4, batch_size=2, seq_len=16, lr=3e-3, warmup_steps=2, schedule="cosine",
                         grad_clip=0.5)
    runs = [RunSpec(seed=seed, config=config.model_copy(update={"lr": lr}))
            for seed, lr in ((5, 3e-3), (6, 1e-3), (7, 2e-3), (8, 1e-3))]
    return train_many(lambda: build_model(ModelConfig()), stream, runs, torch.device("cpu"), logs=logs,
                      build_optimizer=build_optimizer, path=path, workers=2)


def test_every_path_logs_each_run_as_the_sequential_trainer_does():
    """Each run's records on the batched, parallel and parallel-batched paths equal the
    sequential path's (``train()``, the reference): the loss table, the gradient norm before
    clipping, the scheduled lr; each run its own log, left open for its final metrics."""
    reference = MemoryLogs()
    _train("sequential", reference)
    for path in ("batched", "parallel", "parallel-batched"):
        logs = MemoryLogs()
        outcomes = _train(path, logs)
        assert {outcome.path for outcome in outcomes} == {path}
        assert sorted(logs.runs) == ["seed5", "seed6", "seed7", "seed8"]
        for outcome in outcomes:
            name = f"seed{outcome.spec.seed}"
            records, expected = logs.runs[name].records, reference.runs[name].records
            assert outcome.logger is logs.runs[name] and not outcome.logger.closed
            assert [r.step for r in records] == list(range(4))
            assert [r.loss for r in records] == outcome.result.losses
            assert [r.loss for r in records] == pytest.approx([r.loss for r in expected], rel=1e-4), path
            assert [r.grad_norm for r in records] == pytest.approx([r.grad_norm for r in expected], rel=1e-3), path
            assert [r.lr for r in records] == pytest.approx([lr_at(s, outcome.spec.config) for s in range(4)])
            assert [r.tokens_seen for r in records] == [r.tokens_seen for r in expected]


# --- a tuned comparison on the batched path, read back with each tracker's own reader ----------

def _wandb_records(path: Path):
    """The ``Record`` messages of one offline run's transaction log (LevelDB log framing: 32 KiB
    blocks of chunks, each a 7-byte header: CRC32C, length, type 1 full / 2 first / 3 middle / 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data, position, pending = path.read_bytes(), 7, b""
    assert data[:4] == b":W&B"
    while position + 7 <= len(data):
        left = 32768 - position % 32768
        if left < 7:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if length == 0 and kind == 0:  # zero padding to the block's end
            position += left
            continue
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)  # "train/loss" may come as a nested key


def read_wandb(folder: Path) -> dict[str, dict]:
    """Every offline run under ``folder``: its group, config, history rows and summary."""
    runs = {}
    for log in folder.glob("wandb/offline-run-*/run-*.wandb"):
        run = {"history": [], "summary": {}}
        for record in _wandb_records(log):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                name, run["group"] = record.run.display_name, record.run.run_group
                run["config"] = {item.key: json.loads(item.value_json) for item in record.run.config.update}
            elif kind == "history":
                run["history"].append({_key(item): json.loads(item.value_json) for item in record.history.item})
            elif kind == "summary":
                run["summary"] |= {_key(item): json.loads(item.value_json) for item in record.summary.update}
        runs[name] = run
    return runs


@pytest.fixture(scope="module")
def trackio_dir(tmp_path_factory):
    """trackio reads its folder once per process, when imported: one folder for this module
    (so trackio is not imported before ``--tracker-dir`` names it)."""
    if importlib.util.find_spec("trackio") is None:
        pytest.skip("the trackio extra is not installed")
    if "trackio" in sys.modules:
        import trackio.utils

        return Path(trackio.utils.TRACKIO_DIR)
    return tmp_path_factory.mktemp("trackio")


def _per_seed(artifact: dict, seed: str, arm: str) -> dict:
    return next(row[arm] for row in artifact["per_seed"] if row["seed"] == int(seed))


def _tuned_batched(tracker: str, folder: Path, data_dir: Path, cache_dir: Path, out: Path):
    from llmevo.experiments import ReproductionRequest, reproduce

    request = ReproductionRequest(name="rope", preset="smoke", threads=1, device="cpu", data_dir=data_dir,
                                  cache_dir=cache_dir, report=False, out=out, seeds=SEEDS, steps=STEPS,
                                  tune_grid=[1e-3, 3e-3], tune_confirm=1, path="batched",
                                  tracker=tracker, tracker_dir=folder)
    return reproduce(request).to_json_dict()


def test_a_tuned_batched_comparison_in_wandb_offline(tmp_path, data_dir, cache_dir):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    artifact = _tuned_batched("wandb", tmp_path / "wb", data_dir, cache_dir, tmp_path / "rope" / "a.json")
    assert {path for paths in artifact["setup"]["training_path"].values() for path in paths.values()} == {"batched"}
    runs = read_wandb(tmp_path / "wb")
    assert sorted(runs) == sorted(RUNS)  # every arm and seed, nothing else (tuning runs are not logged)
    verdict = artifact["verdict"]
    for name, run in runs.items():
        arm, seed = name.split("-seed")
        assert run["group"] == "rope/a" and run["config"]["run"] == name and run["config"]["seeds"] == SEEDS
        steps = [row["_step"] for row in run["history"] if "train/loss" in row]
        assert steps == [1, 2, 3]
        losses = [row["train/loss"] for row in run["history"] if "train/loss" in row]
        assert losses == pytest.approx(artifact["training_curves"][arm]["per_seed"][seed])  # the loss table
        final = next(row for row in run["history"] if "validation/lm_loss" in row)
        assert final["validation/lm_loss"] == pytest.approx(_per_seed(artifact, seed, arm)["lm_loss"])
        assert run["summary"]["verdict"] == verdict["summary"]
        assert run["summary"]["verdict/change_percent"] == pytest.approx(
            artifact["statistics"]["lm_loss"]["paired_relative_change_percent"]["mean"])


def test_a_tuned_batched_comparison_in_trackio(tmp_path, data_dir, cache_dir, trackio_dir):
    artifact = _tuned_batched("trackio", trackio_dir, data_dir, cache_dir, tmp_path / "rope" / "a.json")
    from trackio.sqlite_storage import SQLiteStorage

    runs = {record["name"] for record in SQLiteStorage.get_run_records("llmevo")}
    assert set(RUNS) <= runs
    for name in RUNS:
        arm, seed = name.split("-seed")
        logs = SQLiteStorage.get_logs("llmevo", name)
        assert [row["step"] for row in logs if "train/loss" in row] == [1, 2, 3]
        assert all({"train/lr", "train/grad_norm"} <= set(row) for row in logs if "train/loss" in row)
        final = next(row for row in logs if "validation/lm_loss" in row)
        assert final["validation/lm_loss"] == pytest.approx(_per_seed(artifact, seed, arm)["lm_loss"])
        losses = [row["train/loss"] for row in logs if "train/loss" in row]
        assert losses == pytest.approx(artifact["training_curves"][arm]["per_seed"][seed])
        summary = next(row for row in logs if "summary/verdict" in row)
        assert summary["summary/verdict"] == artifact["verdict"]["summary"]
        assert SQLiteStorage.get_run_config("llmevo", name)["_Group"] == "rope/a"


# --- an external experiment: each run's final metrics --------------------------------------------

SCRIPT = """
    import json, os
    seed = int(os.environ["LLMEVO_PARAM_SEED"])
    print(json.dumps({"loss": 1.0 + 0.01 * seed + (0.1 if os.environ["LLMEVO_PARAM_MODE"] == "worse" else 0.0)}))
"""


def test_an_external_experiment_logs_each_report_run_and_the_verdict(workdir, capsys):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    folder = workdir / "exp"
    folder.mkdir()
    (folder / "script.py").write_text(textwrap.dedent(SCRIPT))
    (folder / "experiment.toml").write_text(textwrap.dedent("""
        name = "fake"
        command = ["{python}", "script.py"]
        metric = "loss"
        [params]
        mode = "good"
    """))
    code = run_cli(["reproduce", "--experiment", str(folder / "experiment.toml"), "--method", "mode=worse",
                    "--seeds", "1,2", "--no-tune", "--out", str(workdir / "out" / "fake.json"),
                    "--tracker", "wandb", "--tracker-dir", str(workdir / "wb")])
    assert code == 0, capsys.readouterr()
    artifact = json.loads((workdir / "out" / "fake.json").read_text())
    runs = read_wandb(workdir / "wb")
    assert sorted(runs) == ["baseline-seed1", "baseline-seed2", "method-seed1", "method-seed2"]
    for name, run in runs.items():
        arm, seed = name.split("-seed")
        expected = 1.0 + 0.01 * int(seed) + (0.1 if arm == "method" else 0.0)
        assert [row["final/loss"] for row in run["history"]] == pytest.approx([expected])
        assert run["group"] == "out/fake" and run["summary"]["status"] == "ok"
        assert run["summary"]["verdict"] == artifact["verdict"]["summary"]


def test_evolution_refuses_the_tracker_fields(tmp_path):
    """A study keeps its own ``--tensorboard`` (its ``trials`` run is reopened per trial)."""
    from llmevo.evolve import EvolutionSettings

    for field, value in (("tracker", "wandb"), ("tracker_dir", tmp_path)):
        with pytest.raises(ConfigError, match=rf"--{field.replace('_', '-')} does not apply here: a study logs"):
            EvolutionSettings(preset="smoke", data_dir=tmp_path, **{field: value})
