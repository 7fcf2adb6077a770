"""Tiny end-to-end evolution runs: baseline first, resume, SIGKILL recovery, CLI report."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import time

import optuna
import pytest
import sqlalchemy.exc
from evolve_support import tiny_plan
from optuna.trial import TrialState

from llmevo.artifacts.schema import ReproductionArtifact, load_artifact
from llmevo.cli import main
from llmevo.evolve import workers
from llmevo.evolve.champion import baseline_trial, select_champion
from llmevo.evolve.study import finished_trials, open_storage, open_study
from llmevo.runner.genome import FIXED_DATA, Genome

pytestmark = pytest.mark.slow


def _study(plan):
    return open_study(plan, workers.build_space(plan), open_storage(plan, heartbeat=False))


def test_baseline_first_then_resume_keeps_completed_trials(tmp_path, data_dir, cache_dir):
    plan = tiny_plan(f"sqlite:///{tmp_path}/run.db", data_dir, cache_dir, trials=4)
    workers.run_workers(plan)
    study = _study(plan)
    first = {t.number: t.value for t in finished_trials(study)}
    assert len(first) == 4
    baseline = baseline_trial(study)
    assert baseline is not None and baseline.number == 0
    assert baseline.user_attrs["parameters"] == 139_584
    assert len(baseline.user_attrs["fitness_per_seed"]) == 2  # re-evaluated under 2 seeds
    champion = select_champion(study)
    assert champion.user_attrs["score"] >= baseline.user_attrs["score"]
    for trial in study.get_trials():
        assert trial.user_attrs["state"] in ("complete", "pruned")
        assert "test" not in json.dumps(trial.user_attrs.get("metrics", {}))  # never the test split
    workers.run_workers(dataclasses.replace(plan, trials=6))
    after = {t.number: t.value for t in finished_trials(_study(plan))}
    assert len(after) == 6
    assert all(after[number] == value for number, value in first.items())


def test_sigkilled_worker_loses_only_its_trial_which_is_retried(tmp_path, data_dir, cache_dir):
    # longer trials, so that the kill lands while one is running
    plan = tiny_plan(f"sqlite:///{tmp_path}/kill.db", data_dir, cache_dir, trials=5,
                         rescore_seeds=0, trial_steps=40)
    study = _study(plan)
    worker = multiprocessing.get_context("spawn").Process(target=workers._spawned, args=(plan, 0))
    worker.start()
    # Wait on the study's state, never on elapsed time: at least two finished trials and one
    # running. The worker is frozen (SIGSTOP) before the state is read again, so the trial
    # seen running is still running when the SIGKILL lands, however loaded the machine.
    safety = time.monotonic() + 1800  # only against a hang; never reached on a working engine
    def running_started(trials) -> bool:  # a trial whose objective has recorded its start
        return any(t.state == TrialState.RUNNING and t.user_attrs.get("state") == "running"
                   for t in trials)

    # A read may find the database locked by the worker (frozen inside a write, or just busy on
    # a loaded machine); that is not a failure of the engine: thaw it and look again.
    busy = (optuna.exceptions.StorageInternalError, sqlalchemy.exc.OperationalError)
    while True:
        assert worker.is_alive(), "the worker ended before a trial could be killed"
        assert time.monotonic() < safety, "no trial ever ran"
        try:
            trials = study.get_trials(deepcopy=False)
            ready = len(finished_trials(study)) >= 2 and running_started(trials)
        except busy:
            ready = False
        if ready:
            os.kill(worker.pid, signal.SIGSTOP)
            try:
                if running_started(study.get_trials(deepcopy=False)):
                    break
            except busy:
                pass
            os.kill(worker.pid, signal.SIGCONT)  # finished in between, or locked: look again
        time.sleep(0.05)
    os.kill(worker.pid, signal.SIGKILL)
    worker.join()
    before = {t.number: t.value for t in finished_trials(study)}
    killed = [t.number for t in study.get_trials() if t.state == TrialState.RUNNING]
    assert len(killed) == 1 and len(before) >= 2
    workers.worker_main(plan, 0)  # the same command again
    trials = study.get_trials()
    after = {t.number: t.value for t in finished_trials(study)}
    assert len(after) == 5
    assert all(after[number] == value for number, value in before.items())
    lost = trials[killed[0]]
    assert lost.state == TrialState.FAIL and lost.user_attrs["state"] == "running"
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == killed[0]]
    assert len(retried) == 1 and retried[0].params == lost.params


def test_cli_writes_the_report_and_refuses_bad_input(tmp_path, data_dir, cache_dir, monkeypatch, capsys):
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{tmp_path}/cli.db"
    common = ["evolve", "--preset", "smoke", "--trial-steps", "8", "--eval-windows", "4",
              "--workers", "1", "--threads", "1", "--population", "2", "--tournament", "2", "--rescore-seeds", "1",
              "--storage", storage, "--study", "cli", "--data-dir", str(data_dir)]
    main([*common, "--trials", "3", "--seeds", "42,43", "--out", str(tmp_path / "report")])
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["schema_version"] == 2 and summary["provenance"]["code_commit"]
    final = summary["final_evaluation"]
    assert final["seeds"] == [42, 43] and "test" in final["verdict"]
    # both arms' training windows, per seed: equal when the champion keeps the baseline's data
    # recipe, different by design when its data gene differs (equal steps x batch x seq_len)
    streams = final["token_stream_sha256"]
    assert set(streams) == {"baseline", "champion"} and set(streams["baseline"]) == {"42", "43"}
    assert streams["baseline"]["42"] != streams["baseline"]["43"]
    same_recipe = Genome.from_json(summary["champion"]["genome"]).data == FIXED_DATA
    assert (streams["baseline"] == streams["champion"]) == same_recipe
    assert summary["champion"]["lineage"][-1] == summary["champion"]["trial"]
    # the verdict of record: the final comparison's typed artifact, named by the summary
    assert final["artifact"] == "final-comparison.json"
    artifact = load_artifact(tmp_path / "report" / final["artifact"])
    assert isinstance(artifact, ReproductionArtifact) and artifact.setup.seeds == [42, 43]
    assert final["verdict_of_record"] == artifact.verdict.model_dump(mode="json")
    assert artifact.verdict.margin_percent == 1.0 and artifact.tuning is not None
    for name in ("README.md", "fitness.png", "fitness_vs_parameters.png"):
        assert (tmp_path / "report" / name).stat().st_size > 0
    # the same study from Python: no trial to add, the same champion, the same test numbers
    from llmevo.evolve import EvolutionSettings, EvolutionSummary, run

    again = run(EvolutionSettings(
        preset="smoke", trial_steps=8, eval_windows=4, workers=1, threads=1, population=2,
        tournament=2, rescore_seeds=1, storage=storage, study="cli", data_dir=data_dir,
        cache_dir=cache_dir, trials=3, seeds=[42, 43], out=tmp_path / "python"))
    assert isinstance(again, EvolutionSummary)
    assert again.trial_counts == summary["trial_counts"]
    assert again.champion == summary["champion"]
    assert again.final_evaluation == final
    assert again.verdict == final["verdict_of_record"]["summary"]  # the artifact's, not test fitness
    assert json.loads((tmp_path / "python" / "summary.json").read_text())["champion"] == summary["champion"]
    assert again.provenance["command"] == "python: llmevo.evolve.run(study='cli')"
    with pytest.raises(SystemExit) as exit_info:  # same study, different preset: refused
        main([*common[:4], "9", *common[5:], "--trials", "3"])
    assert exit_info.value.code == 2
    assert "different preset" in capsys.readouterr().err
    assert summary["final_tuning"]["seeds"] == [2000] and summary["settings"]["trial_lr_factors"] == [0.5, 1.0, 2.0]
    # --explain reads the study's identity, not the search's own options (refused with it)
    explain_common = [arg for index, arg in enumerate(common) if arg not in ("--population", "--tournament",
                      "--rescore-seeds") and common[index - 1] not in ("--population", "--tournament",
                                                                       "--rescore-seeds")]
    for bad, message in ((["--genes", "no_such_gene"], "not a gene where the champion differs"),
                         (["--study", "nosuch"], "no study 'nosuch'")):
        with pytest.raises(SystemExit) as exit_info:
            main([*explain_common, "--explain", *bad])
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and message in err and len(err.splitlines()) == 1


def test_rescore_seeds_0_scores_a_would_be_champion_on_its_search_seed(tmp_path, data_dir, cache_dir):
    """Issue 37 round 4: with --rescore-seeds 0 no trial was ever scored, so after the whole
    search the report failed with "no re-evaluated complete trial yet; run more trials",
    which no number of trials could change. Now a would-be champion is scored on its one seed."""
    plan = tiny_plan(f"sqlite:///{tmp_path}/zero.db", data_dir, cache_dir, trials=2, rescore_seeds=0)
    workers.run_workers(plan)
    study = _study(plan)
    champion = select_champion(study)
    assert champion.user_attrs["seeds"] == [champion.user_attrs["seeds"][0]]  # nothing retrained
    assert champion.user_attrs["score"] == champion.user_attrs["fitness_per_seed"][0]
