"""``--tracker tensorboard`` (and evolve's ``--tensorboard DIR``): the trainer's per-step records
and the event files they become."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from evolve_support import tiny_plan

from llmevo.catalog import build_model, build_optimizer
from llmevo.cli import main
from llmevo.evolve.workers import run_workers
from llmevo.model.config import ModelConfig
from llmevo.train.logging import StepRecord
from llmevo.train.trainer import TrainConfig, WindowSampler, lr_at, train

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


class Recorder:
    def __init__(self):
        self.records: list[StepRecord] = []

    def log_step(self, record: StepRecord) -> None:
        self.records.append(record)


def _scalars(run_dir):
    accumulator = event_accumulator.EventAccumulator(str(run_dir))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


@pytest.mark.parametrize("grad_clip", [0.0, 0.5])
def test_step_records_match_an_independent_first_step(grad_clip):
    config = TrainConfig(steps=5, batch_size=2, seq_len=16, lr=1e-2, warmup_steps=2,
                         schedule="cosine", grad_clip=grad_clip)
    stream = torch.randint(0, 512, (400,), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    model = build_model(ModelConfig())
    reference = copy.deepcopy(model)
    recorder = Recorder()
    result = train(model, stream, config, seed=3, device=torch.device("cpu"),
                   optimizer=build_optimizer(config.optimizer), logger=recorder)

    assert [r.step for r in recorder.records] == list(range(5))
    assert [r.loss for r in recorder.records] == result.losses
    assert [r.lr for r in recorder.records] == pytest.approx([lr_at(s, config) for s in range(5)])
    assert recorder.records[-1].tokens_seen == 5 * 2 * 16
    # the first step's gradient norm, recomputed by hand on the same window
    window = WindowSampler(stream, 2, 16, seed=3).next()
    loss = F.cross_entropy(reference(window[:, :-1]).flatten(0, 1), window[:, 1:].flatten())
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in reference.parameters()))
    assert recorder.records[0].grad_norm == pytest.approx(float(norm), rel=1e-5)


def test_reproduce_writes_curves_per_arm_and_final_metrics(tmp_path, data_dir, cache_dir, monkeypatch):
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    board = tmp_path / "tb"
    code = main_code(["reproduce", "rope", "--preset", "smoke", "--seeds", "42,43", "--steps", "3",
                      "--device", "cpu", "--threads", "1", "--no-report", "--data-dir", str(data_dir),
                      "--out", str(tmp_path / "a.json"), "--tracker", "tensorboard", "--tracker-dir", str(board)])
    assert code == 0
    group = board / tmp_path.name / "a"  # the artifact's folder and stem
    runs = sorted(p.name for p in group.iterdir())
    assert runs == ["baseline-seed42", "baseline-seed43", "method-seed42", "method-seed43"]
    artifact = json.loads((tmp_path / "a.json").read_text())
    for run in runs:
        scalars = _scalars(group / run)
        for tag in ("train/loss", "train/lr", "train/grad_norm"):
            assert [step for step, _ in scalars[tag]] == [1, 2, 3]
        assert {"validation/lm_loss", "validation/fitness", "test/lm_loss"} <= set(scalars)
        assert scalars["verdict/change_percent"][0][1] == pytest.approx(
            artifact["statistics"]["lm_loss"]["paired_relative_change_percent"]["mean"])
    logged = [_scalars(group / f"method-seed{seed}")["validation/lm_loss"][0] for seed in (42, 43)]
    assert [step for step, _ in logged] == [3, 3]
    assert sum(value for _, value in logged) / 2 == pytest.approx(artifact["method"]["lm_loss"], rel=1e-6)


def main_code(argv):
    try:
        main(argv)
    except SystemExit as exit_:
        return exit_.code
    return 0


def test_evolve_logs_each_trial_fitness_and_genome(tmp_path, data_dir, cache_dir):
    board = tmp_path / "tb"
    run_workers(tiny_plan(f"sqlite:///{tmp_path}/tb.db", data_dir, cache_dir, trials=2,
                              rescore_seeds=0, tensorboard=board))
    trials = _scalars(board / "trials")
    assert [step for step, _ in trials["evolve/fitness"]] == [0, 1]
    accumulator = event_accumulator.EventAccumulator(
        str(board / "trials"), size_guidance={event_accumulator.TENSORS: 0})
    accumulator.Reload()
    assert "evolve/genome/text_summary" in accumulator.Tags()["tensors"]
    genome_text = accumulator.Tensors("evolve/genome/text_summary")[0].tensor_proto.string_val[0]
    assert b"trial 0" in genome_text and b"rope" in genome_text
    first = _scalars(board / "trial-0000-seed1000")
    assert len(first["train/loss"]) == 8 and "validation/fitness" in first


class MemoryLogs:
    """RunLogs keeping each named run's step records in memory."""

    def __init__(self):
        self.runs: dict[str, Recorder] = {}
        self.closed: list[str] = []

    def run(self, name):
        recorder = self.runs.setdefault(name, Recorder())
        recorder.close = lambda: self.closed.append(name)
        return recorder


def test_train_many_gives_every_run_its_own_log():
    from llmevo.train.execution import RunSpec, train_many

    stream = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0))
    config = TrainConfig(steps=3, batch_size=2, seq_len=16, lr=1e-3)
    runs = [RunSpec(seed=5, config=config, label="lr1e-3"),
            RunSpec(seed=6, config=config.model_copy(update={"lr": 3e-3}))]
    logs = MemoryLogs()
    outcomes = train_many(lambda: build_model(ModelConfig()), stream, runs, torch.device("cpu"),
                          logs=logs, build_optimizer=build_optimizer)
    assert sorted(logs.runs) == ["lr1e-3", "seed6"] and logs.closed == []  # open for the final metrics
    for name, outcome in zip(("lr1e-3", "seed6"), outcomes, strict=True):
        assert outcome.logger is logs.runs[name]
        records = logs.runs[name].records
        assert [r.loss for r in records] == outcome.result.losses
        assert {r.lr for r in records} == {outcome.spec.config.lr}


def test_post_training_logs_the_stage_per_step_after_pretraining(tmp_path, data_dir, cache_dir,
                                                                 monkeypatch):
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    board = tmp_path / "tb"
    code = main_code(["reproduce", "sft", "--preset", "smoke", "--seed", "42", "--steps", "2",
                      "--post-steps", "3", "--post-batch-size", "2", "--post-lr", "0.002",
                      "--device", "cpu", "--threads", "1", "--no-report", "--data-dir", str(data_dir),
                      "--out", str(tmp_path / "a.json"), "--tracker", "tensorboard", "--tracker-dir", str(board)])
    assert code == 0
    board = board / tmp_path.name / "a"
    method = _scalars(board / "method-seed42")
    assert [step for step, _ in method["post_train/loss"]] == [3, 4, 5]  # after 2 pretraining steps
    assert all(value == pytest.approx(0.002) for _, value in method["post_train/lr"])
    for run in ("baseline-seed42", "method-seed42"):  # none (the ablation) records no stage steps
        norms = _scalars(board / run).get("post_train/grad_norm", [])
        assert [step for step, _ in norms] == ([3, 4, 5] if run.startswith("method") else [])
        assert all(math.isfinite(value) and value > 0 for _, value in norms)
    artifact = json.loads((tmp_path / "a.json").read_text())
    mean = sum(value for _, value in method["post_train/loss"]) / 3
    assert mean == pytest.approx(artifact["method"]["post_training_loss"], rel=1e-6)


def test_a_run_reopened_many_times_reads_back_in_the_order_it_was_written(tmp_path):
    """One event file per opening (evolve's ``trials`` run opens once per trial): past nine
    files in one second their names must still sort in creation order."""
    from llmevo.train.logging import TensorBoardLogs

    logs = TensorBoardLogs(tmp_path)
    for step in range(12):
        run = logs.run("trials")
        run.log_metrics("evolve", {"fitness": float(step)}, step)
        run.close()
    assert [step for step, _ in _scalars(tmp_path / "trials")["evolve/fitness"]] == list(range(12))
