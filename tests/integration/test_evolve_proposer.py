"""``llmevo evolve --proposer CMD`` driven by a scripted proposer (tests/assets/scripted_proposer.py):
the trials run its genomes in order, the budget is llmevo's (no call once ``--trials`` are
finished, a duplicate or out-of-space answer costs a trial), the final comparison runs as
after any search, and a broken proposer is asked again, then stops the command with one
line and exit status 2, leaving the study resumable and no report."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from test_bad_input_signals import (
    DEADLINE,
    _alive,
    _gone,
    _kill_all,
    _start,
    _wait_for,
    assert_one_line_exit,
    linux,
)

from llmevo.artifacts.schema import load_artifact
from llmevo.cli import main
from llmevo.evolve import EvolutionSettings, search_space
from llmevo.evolve.proposer import CALLS_ATTR, proposer_summary, resolve_proposer
from llmevo.runner.genome import Genome

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "assets" / "scripted_proposer.py"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "proposer" / "hill_climb.py"


@pytest.fixture(scope="module")
def space(data_dir):
    found, _ = search_space(EvolutionSettings(preset="smoke", trial_steps=8, promotion="manifest",
                                              data_dir=data_dir))
    return found


def _common(tmp_path: Path, data_dir: Path, trials: int, proposer: str) -> list[str]:
    return ["evolve", "--preset", "smoke", "--trial-steps", "8", "--eval-windows", "4",
            "--trials", str(trials), "--threads", "1", "--rescore-seeds", "1",
            "--promotion", "manifest", "--trial-lr-factors", "none",
            "--storage", f"sqlite:///{tmp_path}/study.db", "--study", "proposed",
            "--data-dir", str(data_dir), "--proposer", proposer]


def _proposer(tmp_path: Path, steps: list, request_file: bool = False) -> str:
    (tmp_path / "script.json").write_text(json.dumps(steps))
    return (f"{sys.executable} {SCRIPT} {tmp_path / 'script.json'} {tmp_path / 'log.jsonl'}"
            + (" {request}" if request_file else ""))


def _requests(tmp_path: Path) -> list[dict]:
    log = tmp_path / "log.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _study(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="proposed", storage=f"sqlite:///{tmp_path}/study.db")


def test_a_scripted_proposer_drives_the_study_to_its_final_comparison(
        tmp_path, data_dir, cache_dir, space, monkeypatch, capsys):
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    base = space.to_params(space.baseline)
    first = {**base, "position.rope.theta": 1000.0}
    second = space.to_genome({**base, "attention.mha.kv_heads": 2})
    third = {**base, "feedforward.swiglu.hidden": 128, "train.lr": 1.2e-3}
    never = {**base, "optimizer.adamw.beta2": 0.99}  # a fourth genome the budget has no trial for
    proposer = _proposer(tmp_path, [{"params": first, "note": "rope theta 1000"},
                                    {"genome": second.model_dump(mode="json"), "parent": 0},
                                    {"params": third}, {"params": never}])
    common = _common(tmp_path, data_dir, 4, proposer)
    main([*common, "--seeds", "42,43", "--tune-grid", "6e-4,1.2e-3", "--tune-confirm", "0",
          "--out", str(tmp_path / "report")])

    # the trials ran the proposer's genomes in order, after the baseline (trial 0)
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    rows = summary["trials"]
    expected = [space.baseline, space.to_genome(first), second, space.to_genome(third)]
    assert [row["genome_hash"] for row in rows] == [genome.hash() for genome in expected]
    assert [row["chosen_by"] for row in rows] == ["baseline", "proposer", "proposer", "proposer"]
    assert all(row["state"] == "complete" for row in rows) and rows[2]["parent"] == 0
    # the budget: asked once per trial the study needed, never for the fourth genome
    requests = _requests(tmp_path)
    assert [r["budget"] for r in requests] == [{"trials": 4, "finished": n, "remaining": 4 - n}
                                              for n in (1, 2, 3)]
    assert [len(r["trials"]) for r in requests] == [1, 2, 3]
    assert requests[0]["trials"][0]["chosen_by"] == "baseline"
    assert requests[0]["baseline"]["params"] == base and requests[0]["space"]["slots"]["attention"] == ["mha"]
    seen = requests[1]["trials"][1]
    assert seen["state"] == "complete" and seen["fitness"] == rows[1]["fitness"]
    assert seen["note"] == "rope theta 1000" and seen["params"] == first
    # who chose the genomes, and what they cost
    block = summary["proposer"]
    assert summary["settings"]["sampler"] == "proposer"
    assert block["files"][str(SCRIPT)] == hashlib.sha256(SCRIPT.read_bytes()).hexdigest()
    assert block["command"][0] == sys.executable and block["identity"] in block["proposers"]
    assert block["calls"]["total"] == 3 and block["calls"]["genome"] == 3 and not block["stopped"]
    assert block["trials_chosen"] == 3 and block["budget"] == {"trials": 4, "finished": 4}
    rescored = sum(len(row["seeds"]) - 1 for row in rows[1:])
    assert block["training_runs"] == 3 + rescored
    # the final comparison ran as after any search
    artifact = load_artifact(tmp_path / "report" / "final-comparison.json")
    assert summary["final_evaluation"]["verdict_of_record"] == artifact.verdict.model_dump(mode="json")
    assert artifact.setup.seeds == [42, 43] and artifact.tuning is not None
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "Genomes chosen by the proposer" in readme and "3 call(s) (3 genome)" in readme

    # the same command again: the budget is spent, the proposer is not asked
    capsys.readouterr()
    main([*common, "--no-report"])
    assert len(_requests(tmp_path)) == 3
    assert "4 of 4 trials finished" in capsys.readouterr().out


def test_bad_answers_cost_a_trial_or_an_attempt_and_a_stop_ends_the_search(
        tmp_path, data_dir, cache_dir, space, monkeypatch):
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    base = space.to_params(space.baseline)
    genome = space.baseline.model_dump(mode="json")
    wider = {**genome, "model": {**genome["model"], "d_model": 128}}
    steps = [
        {"garbage": "I think rope is best"},  # broken: asked again, no trial
        {"params": {**base, "attention": "diff_attn"}},  # not promoted here: an invalid trial
        {"genome": wider},  # a setting no gene holds: an invalid trial
        {"params": base},  # the baseline again: a duplicate of trial 0, nothing trains
        {"exit": 3},  # broken
        {"stop": True, "reason": "seen enough"},
        {"params": base},  # never asked
    ]
    main([*_common(tmp_path, data_dir, 8, _proposer(tmp_path, steps, request_file=True)),
          "--no-report", "--proposer-timeout", "60"])
    requests = _requests(tmp_path)
    assert len(requests) == 6
    assert [(r["attempt"], r["budget"]["finished"]) for r in requests] == [
        (1, 1), (2, 1), (1, 2), (1, 3), (1, 4), (2, 4)]
    assert "not JSON" in requests[1]["previous_error"]
    assert requests[5]["previous_error"] == "exit status 3: scripted failure 3"
    study = _study(tmp_path)
    trials = study.get_trials()
    assert [t.user_attrs["state"] for t in trials] == ["complete", "invalid", "invalid", "duplicate"]
    assert "attention 'diff_attn' is not in the space" in trials[1].user_attrs["error"]
    assert "model.d_model: 128" in trials[2].user_attrs["error"]
    assert trials[2].user_attrs["genome_hash"] == Genome.from_json(wider).hash()
    assert trials[3].user_attrs["duplicate_of"] == 0 and "metrics" not in trials[3].user_attrs
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED) for t in trials)
    block = proposer_summary(study, None, 8)
    assert block["calls"] == {"total": 6, "broken": 2, "out_of_space": 2, "genome": 1, "stop": 1,
                              "seconds": block["calls"]["seconds"]}
    assert block["stopped"] and block["budget"] == {"trials": 8, "finished": 4}
    assert block["trial_states"] == {"duplicate": 1, "invalid": 2} and block["training_runs"] == 0
    assert [c["outcome"] for c in study.user_attrs[CALLS_ATTR]] == [
        "broken", "out_of_space", "out_of_space", "genome", "broken", "stop"]


def test_a_broken_proposer_stops_with_one_line_and_the_study_resumes(
        tmp_path, data_dir, cache_dir, monkeypatch, capsys):
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    steps = [{"garbage": "{\"params\": "}, {"exit": 5}, {"sleep": 30}]
    common = _common(tmp_path, data_dir, 3, _proposer(tmp_path, steps))
    report = tmp_path / "report"
    with pytest.raises(SystemExit) as exit_info:
        main([*common, "--proposer-timeout", "2", "--out", str(report)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert "3 broken answers in a row (last: no answer within 2 s (process group killed))" in err
    assert "keeps its 1 finished trial(s) of 3" in err
    # nothing half-written: the baseline's trial only, nothing running or waiting, no report
    trials = _study(tmp_path).get_trials()
    assert [(t.number, t.state) for t in trials] == [(0, TrialState.COMPLETE)]
    assert not report.exists()
    # fixed (the script goes on with a stop): the same command resumes, then reports
    (tmp_path / "script.json").write_text(json.dumps([*steps, {"stop": True}]))
    main([*common, "--no-report"])
    assert len(_requests(tmp_path)) == 4
    assert len(_study(tmp_path).get_trials()) == 1


@linux
def test_ctrl_c_while_the_proposer_thinks_kills_it_and_leaves_the_study_resumable(
        tmp_path, data_dir, cache_dir):
    """The proposer runs in its own session (a terminal's Ctrl-C does not reach it): the
    command kills its process group on the way out, ends with 130 and one line, and the
    study holds no trial running or waiting."""
    proposer = _proposer(tmp_path, [{"sleep": 600}])
    process = _start(_common(tmp_path, data_dir, 3, proposer) + ["--no-report"], tmp_path,
                     cache_dir, data_dir)
    try:
        requests = _wait_for(lambda: _requests(tmp_path) or process.poll() is not None, "a call")
        assert process.poll() is None, process.communicate()
        thinking = requests[0]["_pid"]
        assert _alive(thinking)
        os.killpg(process.pid, signal.SIGINT)
        status = process.wait(timeout=DEADLINE)
    finally:
        _, err = _kill_all(process, set())
    assert_one_line_exit(status, err, 130)
    assert _gone({thinking}, timeout=10)
    trials = _study(tmp_path).get_trials()
    assert [(t.number, t.state) for t in trials] == [(0, TrialState.COMPLETE)]


def test_the_example_hill_climber_proposes_neighbours_of_the_best_trial(tmp_path, data_dir, cache_dir,
                                                                         monkeypatch):
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    main([*_common(tmp_path, data_dir, 3, f"{{python}} {EXAMPLE}"), "--no-report"])
    trials = _study(tmp_path).get_trials()
    assert [t.user_attrs["state"] for t in trials] == ["complete"] * 3
    for trial in trials[1:]:
        attrs = trial.user_attrs
        assert attrs["chosen_by"] == "proposer" and attrs["note"].startswith("changed ")
        parent = trials[attrs["parent"]]
        changed = {k for k in {*trial.params, *parent.params} if trial.params.get(k) != parent.params.get(k)}
        assert changed and attrs["note"] == f"changed {', '.join(sorted(changed & set(trial.params)))}"


@pytest.mark.parametrize(("extra", "message"), [
    (["--sampler", "regularized"], "--sampler configures the sampler, which --proposer replaces"),
    (["--sampler-seed", "1"], "--sampler-seed configures the sampler"),
    (["--tournament", "2"], "--tournament configures the sampler"),
    (["--population", "4"], "--population sizes the sampler's population"),
    (["--workers", "2"], "--workers 2: a proposer study runs one worker"),
    (["--explain"], "--proposer applies to a search (not --explain)"),
    (["--proposer", ""], "--proposer: empty command"),
    (["--proposer", "python 'open"], "cannot split it into words"),
    (["--proposer-timeout", "0"], "--proposer-timeout"),
    # found only after the baseline trial trained, before (issue 37, round 4)
    (["--proposer", "no-such-proposer-program"], "no program 'no-such-proposer-program' on PATH"),
    (["--proposer", "/nonexistent/propose.py"], "/nonexistent/propose.py is not a file"),
    (["--proposer", "{python} /nonexistent/propose.py"], "the script /nonexistent/propose.py is not a file"),
    (["--proposer", "{python} -W ignore /nonexistent/p.py"], "the script /nonexistent/p.py is not a file"),
    (["--proposer", "{request}"], "{request} is the request file's path, not a program"),
    (["--proposer", "{python} -c pass {requests}"], "unknown placeholder {requests}"),
    (["--proposer", "'{python} -c pass'"], "no program '{python} -c pass' on PATH"),
    (["--proposer", "{python}"], "{python} needs a script (or -c/-m)"),  # ran the request as a program
    (["--proposer", "{python} -u -"], "{python} needs a script (or -c/-m)"),
])
def test_options_that_cannot_apply_are_one_line_and_exit_2_before_any_work(
        tmp_path, data_dir, capsys, extra, message):
    args = _common(tmp_path, data_dir, 3, "python propose.py")
    args = [arg for arg in args if arg != "none" and arg != "--trial-lr-factors"]  # lr grid: no hurdles
    with pytest.raises(SystemExit) as exit_info:
        main([*args, *extra])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "study.db").exists()


def test_a_proposer_file_that_is_not_executable_is_refused_before_any_work(tmp_path, data_dir, capsys):
    script = tmp_path / "propose.py"
    script.write_text("pass\n")
    script.chmod(0o644)
    with pytest.raises(SystemExit) as exit_info:
        main(_common(tmp_path, data_dir, 3, str(script)))
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "is not executable; chmod +x it, or run it as '{python}" in err, err
    assert not (tmp_path / "study.db").exists()
    # python -c and -m name no script: nothing to find
    for command in ("{python} -c pass", "{python} -m json.tool"):
        resolve_proposer(command, 5.0, tmp_path)
