"""`llmevo reproduce --all`: which comparisons form the table, a tiny table end to end, a
killed table resumed without rerunning a finished comparison, the per-comparison time limit,
and bad input."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from cli_runner import assert_refused
from ladder_support import counting_evidence_worker, trained
from ladder_support import own_cache as make_own_cache

from llmevo.artifacts.provenance import REPO_ROOT
from llmevo.catalog import full_registry
from llmevo.experiments import evidence as evidence_module
from llmevo.experiments.evidence import (
    STATE_FILE,
    EvidenceRequest,
    evidence_entries,
    request_sha256,
    run_evidence,
    shared_arm_needs,
)
from llmevo.experiments.pipeline import ReproductionRequest
from llmevo.promotion import family_entries
from llmevo.runner import run as run_module
from llmevo.runner.tuning_space import SpaceTuner


def test_the_table_is_every_comparison_of_record():
    labels = {entry.label for entry in evidence_entries()}
    published = {"rope", "muon", "lion", "relu2", "post_norm", "alibi", "sandwich", "geglu", "qk_norm",
                 "value_residual", "layernorm", "nope", "gelu", "sinusoidal", "blt-bytes",
                 "alibi --against rope", "relu2 --against swiglu", "geglu --against swiglu"}
    assert published <= labels
    # the reverse of a pair already there, untuned post-training, diagnostics-only components
    assert not labels & {"swiglu", "rmsnorm", "sft", "dpo", "grpo", "neftune", "blt", "rope-relay",
                         "learned", "adamw", "mha", "pre_norm", "concat", "none", "transformer"}


def test_a_comparison_waits_for_the_first_comparison_with_an_arm_it_shares():
    keys = [("llama", "learned"), ("nope", "llama"), ("mha", "gqa"), ("llama", "learned"), ("mha", "x")]
    assert shared_arm_needs(keys) == {0: [], 1: [0], 2: [], 3: [0], 4: [2]}
    # the planned table: rope trains llama_modern first, nope (its baseline) waits for it
    plan = _request(Path("unused"), Path("unused"), Path("unused"), only=["rope", "nope", "qk_norm"]).plan()
    assert [entry.label for entry, _ in plan.entries] == ["rope", "nope", "qk_norm"]
    assert shared_arm_needs(plan.arm_keys)[1] == [0]


def test_one_command_plans_exactly_the_published_table():
    """`reproduce --all --preset quick --publish` writes every member of the published family
    (each comparison at the path, so under the protocol, of its row: optimizers over their
    declared space, the rest over the lr grid) and nothing else."""
    plan = EvidenceRequest(preset="quick", data_dir=Path("unused"), publish=True).plan()
    planned = {}
    for entry, reproduction in plan.entries:
        artifact = reproduction.outputs.artifact
        planned[(REPO_ROOT / artifact).resolve()] = (entry, reproduction)
    published = {path.resolve(): artifact for path, artifact in family_entries(REPO_ROOT / "docs")}
    assert set(planned) == set(published)
    for path, (entry, reproduction) in planned.items():
        space_tuned = entry.name in {s.name for s in full_registry().all() if s.slot == "optimizer"}
        assert isinstance(reproduction.tuning, SpaceTuner) is space_tuned, entry.label
        assert (published[path].tuning.protocol == "space") is space_tuned, entry.label


def test_a_finished_comparison_asked_for_differently_runs_again(tmp_path):
    base = ReproductionRequest(name="rope", preset="smoke", seeds=[42, 43], tune=True, data_dir=tmp_path)
    same = base.updated(**{"threads": 2, "command": "another", "cache_dir": tmp_path / "c"})
    other_seeds = base.updated(**{"seeds": [42, 44]})
    assert request_sha256(same) == request_sha256(base) != request_sha256(other_seeds)
    artifact = tmp_path / "a.json"
    artifact.write_text("{}")
    record = {"status": "finished", "code_sha256": "c", "request_sha256": request_sha256(base),
              "artifact": str(artifact), "artifact_sha256": hashlib.sha256(b"{}").hexdigest()}
    assert evidence_module._still_finished(record, "c", request_sha256(same))
    assert not evidence_module._still_finished(record, "c", request_sha256(other_seeds))
    assert not evidence_module._still_finished(record, "other code", request_sha256(base))
    assert not evidence_module._still_finished({k: v for k, v in record.items() if k != "request_sha256"},
                                               "c", request_sha256(base))  # a state file from before the digest


def _request(out: Path, data_dir: Path, cache_dir: Path, **changes) -> EvidenceRequest:
    values = dict(preset="smoke", only=["nope", "qk_norm"], seeds=[42, 43, 44], tune_grid=[6e-4, 1.2e-3],
                  tune_confirm=0, steps=3, data_dir=data_dir, cache_dir=cache_dir, device="cpu",
                  path="sequential", out=out)
    return EvidenceRequest(**(values | changes))


@pytest.fixture
def own_cache(tmp_path, cache_dir):
    """A cache with the prepared data but none of the arm entries."""
    return make_own_cache(tmp_path / "cache", cache_dir)


def _forbid_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a finished comparison was trained again")

    monkeypatch.setattr(run_module, "train_many", refuse)  # tuning runs train through run_arm too


def test_a_killed_table_resumes_without_rerunning_a_finished_comparison(tmp_path, data_dir, own_cache,
                                                                        monkeypatch, workdir):
    out = tmp_path / "table"
    real, calls = evidence_module._run_entry, []

    def killed_at_the_second(*args, **kwargs):
        calls.append(args[0].label)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(evidence_module, "_run_entry", killed_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        run_evidence(_request(out, data_dir, own_cache))
    state = json.loads((out / STATE_FILE).read_text())["entries"]
    assert list(state) == ["nope"] and state["nope"]["status"] == "finished"
    monkeypatch.setattr(evidence_module, "_run_entry", real)
    outcomes = run_evidence(_request(out, data_dir, own_cache))
    assert [(o.label, o.status, o.skipped) for o in outcomes] == [("nope", "finished", True),
                                                                 ("qk_norm", "finished", False)]
    assert all(Path(o.artifact).is_file() and o.classification is not None for o in outcomes)
    _forbid_training(monkeypatch)  # a third run: nothing left to do
    again = run_evidence(_request(out, data_dir, own_cache))
    assert [o.skipped for o in again] == [True, True]


def test_a_published_table_publishes_every_comparison_from_one_clean_start(tmp_path, data_dir, own_cache,
                                                                          workdir):
    """The first published comparison's artifact makes the tree dirty; the second must still
    publish, recording the clean commit the table started from, and the leaderboard keeps the
    reference artifacts beside the data (as `llmevo leaderboard` does)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=workdir, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (workdir / "README.md").write_text("a repository\n")
    git("add", "README.md")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    head = git("rev-parse", "HEAD").strip()
    outcomes = run_evidence(_request(tmp_path / "table", data_dir, own_cache, publish=True, repo_root=workdir))
    assert [(o.label, o.status) for o in outcomes] == [("nope", "finished"), ("qk_norm", "finished")], outcomes
    for outcome in outcomes:
        provenance = json.loads(Path(outcome.artifact).read_text())["provenance"]
        assert provenance["code_dirty"] is False and provenance["code_commit"] == head
    references = (data_dir.parent / "reference-artifacts")
    if references.is_dir():
        board = json.loads((workdir / "docs" / "LEADERBOARD.json").read_text())
        assert any("reference-artifacts" in json.dumps(row) for row in board["rows"])


def test_a_comparison_past_its_time_limit_is_stopped_and_recorded(tmp_path, data_dir, own_cache, workdir):
    out = tmp_path / "limited"
    outcomes = run_evidence(_request(out, data_dir, own_cache, only=["qk_norm"], time_limit_minutes=0.001))
    assert [(o.label, o.status) for o in outcomes] == [("qk_norm", "timed_out")]
    assert "limit" in outcomes[0].message
    assert json.loads((out / STATE_FILE).read_text())["entries"]["qk_norm"]["status"] == "timed_out"


BAD = [
    (["reproduce", "rope", "--all"], "NAME applies to one comparison"),
    (["reproduce", "--all", "--against", "rope"], "--against applies to one comparison"),
    (["reproduce", "--only", "rope"], "--only applies to --all only"),
    (["reproduce", "--all", "--only", "nosuch"], "--only nosuch: not a comparison"),
    (["reproduce", "--all", "--time-limit", "0"], "--time-limit 0: give a positive number of minutes"),
    (["reproduce", "--all", "--study", "x"], "--study applies to --storage only"),
    (["reproduce", "--all", "--tune-space", "full"], "--tune-space applies to one comparison"),
    (["reproduce", "--all", "--only", "rope", "--tune-trials", "4"], "--tune-trials applies to the space-tuned"),
    (["reproduce", "--all", "--only", "rope", "--tune-sampler", "tpe"], "--tune-sampler applies to the space-tuned"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_tables_are_one_line_exit_2_nothing_written(args, message, capsys, workdir):
    assert_refused(args, message, capsys, workdir)


@pytest.mark.parametrize("kind", ["folder", "fifo", "not a state file", "broken link"])
def test_a_bad_state_path_is_refused_before_any_work(kind, capsys, workdir):
    """The state file's path is checked when the table is planned: a folder there was refused
    only after the first comparison had trained and written its artifact, a FIFO was silently
    replaced (exit 0)."""
    import os

    state = workdir / "table" / STATE_FILE
    state.parent.mkdir()
    if kind == "folder":
        state.mkdir()
    elif kind == "fifo":
        os.mkfifo(state)
    elif kind == "broken link":
        state.symlink_to(workdir / "nowhere.json")
    else:
        state.write_text('{"preset": "smoke"}')
    message = {"folder": "is a folder", "fifo": "is a FIFO", "broken link": "is a broken symbolic link",
               "not a state file": "not an evidence-table state file"}[kind]
    assert_refused(["reproduce", "--all", "--only", "rope", "--preset", "smoke", "--steps", "2",
                    "--threads", "1", "--out", "table"], message, capsys, workdir)


def _spawned(context, request, counter: Path, folder: Path):
    folder.mkdir()
    return context.Process(target=counting_evidence_worker, args=(request, str(counter), str(folder)))


def test_two_workers_share_one_table_and_train_every_run_once(tmp_path, data_dir, cache_dir):
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    # an arm in common: llama_modern is rope's method arm and nope's baseline; nope waits for
    # rope (shared_arm_needs), so the two workers never train that arm at once
    only = ["rope", "nope"]
    # the same table in one process, on a cache of its own: how many runs it trains
    alone = _spawned(context, _request(tmp_path / "alone" / "state", data_dir,
                                       make_own_cache(tmp_path / "cache-alone", cache_dir), only=only),
                     tmp_path / "alone.jsonl", tmp_path / "alone")
    alone.start()
    alone.join(600)
    assert alone.exitcode == 0
    url = f"sqlite:///{tmp_path / 'table.db'}"
    shared_cache = make_own_cache(tmp_path / "cache-shared", cache_dir)
    workers = [_spawned(context, _request(tmp_path / f"machine{i}" / "state", data_dir, shared_cache,
                                          only=only, storage=url),
                        tmp_path / f"trained{i}.jsonl", tmp_path / f"machine{i}") for i in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(600)
    assert [w.exitcode for w in workers] == [0, 0]
    shares = [trained(tmp_path / f"trained{i}.jsonl") for i in range(2)]
    assert sorted(run for share in shares for run in share) == sorted(trained(tmp_path / "alone.jsonl"))
    # each machine holds both artifacts, byte for byte those of the other
    found = [sorted((tmp_path / f"machine{i}" / "runs").rglob("*.json")) for i in range(2)]
    assert len(found[0]) == len(found[1]) == 2
    assert [p.read_bytes() for p in found[0]] == [p.read_bytes() for p in found[1]]
