"""A ladder shared through an Optuna RDB storage (``ladder --storage``): two worker processes
on one 3-rung ladder train every run once and write the ladder a single process writes; a
worker killed mid-rung, then a rerun, retrains no completed rung; bad storage input is one
line, exit 2, nothing written.

The PostgreSQL case needs a server: ``LLMEVO_TEST_POSTGRES_URL`` (``.ci/run`` starts
PostgreSQL 15 and sets it); it is skipped when unset. SQLite serves the others.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import uuid
from collections import Counter

import optuna
import pytest
from cli_runner import files_under, run_cli
from ladder_support import count_trainings, counting_worker, own_cache, tiny_request, trained
from optuna.trial import TrialState

from llmevo.artifacts.ladder import load_ladder
from llmevo.experiments.ladder import run_ladder
from llmevo.experiments.work_queue import ITEM_ATTR, open_work_queue
from llmevo.runner.storage import open_storage

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings(
    "ignore::optuna.exceptions.ExperimentalWarning", "ignore:Heartbeat of storage:UserWarning")]
POSTGRES_URL = os.environ.get("LLMEVO_TEST_POSTGRES_URL")
RUNGS = [-2, -1, 0]
SPAWN = multiprocessing.get_context("spawn")


def _shared(out, data_dir, cache, url, study):
    # full_grid_rungs 2: rungs -2 and -1 run at once; rung 0's lr rule waits for both
    return tiny_request(out, data_dir, cache, rungs=RUNGS, seeds=[42, 43], full_grid_rungs=2,
                        storage=url, study=study, heartbeat=1, grace_period=3, wait_timeout=600)


def _rung_trials(url, study):
    try:
        study = optuna.load_study(study_name=study, storage=open_storage(url))
    except KeyError:  # not created yet
        return []
    return [t for t in study.get_trials() if t.state == TrialState.COMPLETE]


def _comparable(ladder):
    """A ladder file without what differs between two runs of the same ladder: wall times,
    peak memory, CPU time, provenance (its time and command) and the rung artifacts' digests (their
    provenance)."""
    data = ladder.to_json_dict()
    data.pop("wall_seconds"), data.pop("provenance")
    for rung in data["rungs"]:
        for key in ("wall_seconds", "artifact_sha256", "peak_memory_mb", "cpu_seconds"):
            rung.pop(key)
    return data


@pytest.mark.parametrize("backend", [
    "sqlite",
    pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.skipif(
        not POSTGRES_URL, reason="LLMEVO_TEST_POSTGRES_URL is not set")]),
])
def test_two_workers_share_one_ladder_and_train_every_run_once(backend, tmp_path, data_dir, cache_dir):
    url = POSTGRES_URL if backend == "postgres" else f"sqlite:///{tmp_path / 'ladder.db'}"
    study = f"ladder-test-{uuid.uuid4().hex[:8]}"
    cache = own_cache(tmp_path / "cache", cache_dir)
    # two "machines": each worker its own ladder folder, so each writes the other's rungs from the study
    workers = [SPAWN.Process(target=counting_worker,
                             args=(_shared(tmp_path / f"machine{i}", data_dir, cache, url, study),
                                   str(tmp_path / f"trained{i}.txt")))
               for i in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=900)
    assert [w.exitcode for w in workers] == [0, 0]
    runs = [trained(tmp_path / f"trained{i}.txt") for i in range(2)]
    counts = Counter(runs[0] + runs[1])
    assert counts and max(counts.values()) == 1, [run for run, n in counts.items() if n > 1]
    assert runs[0] and runs[1]  # both workers trained rungs
    complete = _rung_trials(url, study)
    assert sorted(t.user_attrs[ITEM_ATTR] for t in complete) == RUNGS  # each rung completed once
    ladders = [load_ladder(tmp_path / f"machine{i}" / "ladder.json") for i in range(2)]
    assert _comparable(ladders[0]) == _comparable(ladders[1])
    for record in ladders[0].rungs:  # every rung's artifact, byte for byte, in both folders
        assert (tmp_path / "machine0" / record.artifact).read_bytes() == \
            (tmp_path / "machine1" / record.artifact).read_bytes()
    assert ladders[0].rungs[2].grid_rule["rule"] == "learning-rate rule"  # rung 0 read both lower rungs

    # one process, no storage, the same cache: it trains nothing and writes the same ladder
    count_trainings(tmp_path / "single.txt")
    single = run_ladder(tiny_request(tmp_path / "single", data_dir, cache, rungs=RUNGS, seeds=[42, 43],
                                     full_grid_rungs=2))
    assert trained(tmp_path / "single.txt") == []
    assert _comparable(single) == _comparable(ladders[0])


def test_a_killed_worker_then_a_rerun_retrains_no_completed_rung(tmp_path, data_dir, cache_dir):
    url = f"sqlite:///{tmp_path / 'ladder.db'}"
    cache = own_cache(tmp_path / "cache", cache_dir)
    request = _shared(tmp_path / "ladder", data_dir, cache, url, "killed")
    worker = SPAWN.Process(target=counting_worker, args=(request, str(tmp_path / "first.txt")))
    worker.start()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # rung -2 complete, rung -1 training
        time.sleep(1)
        done = {t.user_attrs[ITEM_ATTR] for t in _rung_trials(url, "killed")}
        if done and any(line[3] == 32 for line in trained(tmp_path / "first.txt")):
            break
    worker.kill()  # SIGKILL: its rung stays RUNNING until its heartbeat goes stale
    worker.join()
    assert done == {-2}
    count_trainings(tmp_path / "rerun.txt")
    built = run_ladder(request)
    assert [r.rung for r in built.rungs] == RUNGS
    again = trained(tmp_path / "rerun.txt")
    assert again and all(line[3] != 24 for line in again)  # rung -2 (batch 24): not retrained
    assert sorted(t.user_attrs[ITEM_ATTR] for t in _rung_trials(url, "killed")) == RUNGS


def test_a_study_of_another_ladder_is_refused(tmp_path, data_dir, cache_dir, capsys, workdir):
    url = f"sqlite:///{tmp_path / 'ladder.db'}"
    other = tiny_request(tmp_path / "other", data_dir, cache_dir, rungs=[-2, -1], storage=url, study="mine")
    plan = other.plan()
    open_work_queue(url, "mine", plan.shared.description, [-2, -1], 1, 3)
    before = files_under(workdir), (tmp_path / "ladder.db").read_bytes()
    status = run_cli(["ladder", "rope", "--rungs=-2,-1,0", "--storage", url, "--study", "mine"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "study 'mine' holds a different ladder (" in err and "use another --study" in err, err
    assert (files_under(workdir), (tmp_path / "ladder.db").read_bytes()) == before


BAD = [
    (["--storage", "postgresql+psycopg2://u:secret@127.0.0.1:9/x"], "cannot open study storage"),
    (["--storage", "not a url"], "is not a SQLAlchemy URL"),
    (["--study", "x"], "--study applies to --storage only"),
    (["--heartbeat", "2"], "--heartbeat applies to --storage only"),
    (["--storage", "sqlite:///s.db", "--grace-period", "0"], "grace_period"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_storage_is_one_line_exit_2_nothing_written(args, message, capsys, workdir):
    before = files_under(workdir)
    status = run_cli(["ladder", "rope", "--rungs=-2,-1", *args])
    err = capsys.readouterr().err
    assert status == 2, f"{args}: exit {status}, stderr {err!r}"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert message in err and "secret" not in err, err
    assert files_under(workdir) == before


def test_a_launched_ladder_says_how_far_its_rungs_are(tmp_path, data_dir, cache_dir):
    """Two local jobs run the rungs; the launching process, which trains nothing, prints the
    queue's line (``work_queue.queue_progress``) at least once, at the end."""
    from llmevo.experiments.sections import LaunchSection

    lines: list[str] = []
    cache = own_cache(tmp_path / "cache", cache_dir)
    request = tiny_request(tmp_path / "ladder", data_dir, cache, storage=f"sqlite:///{tmp_path / 'q.db'}",
                           launch=LaunchSection(launcher="local", jobs=2))
    ladder = run_ladder(request, on_status=lines.append)
    assert [record.rung for record in ladder.rungs] == [-2, -1]
    final = [line for line in lines if line.startswith("rungs: 2 of 2 finished; last finished: rung ")]
    assert final, lines
    said = {f"rung {record.rung} {record.classification} {record.delta_percent:+.2f}%" for record in ladder.rungs}
    assert final[-1].split("; last finished: ")[1] in said  # the rung that finished last, as its record says
