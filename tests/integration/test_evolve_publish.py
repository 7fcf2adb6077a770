"""Where ``llmevo evolve`` writes its report (``runs/evolve/<study>``; ``--publish``:
``docs/evolution/<study>``, refused from a dirty tree unless ``--allow-dirty``), and
``--explain`` rebuilding a removed report before merging its knockouts into it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest
from cli_runner import run_cli

from llmevo.artifacts.provenance import git_state
from llmevo.evolve.pipeline import REPO_ROOT

pytestmark = pytest.mark.slow


def tiny(storage: str, data_dir: Path, *extra: str) -> list[str]:
    """One trial (llama_modern), one seed, no tuning: the smallest study with a report."""
    return ["evolve", "--preset", "smoke", "--trial-steps", "8", "--eval-windows", "4",
            "--trials", "1", "--workers", "1", "--threads", "1", "--population", "2",
            "--tournament", "2", "--rescore-seeds", "1", "--trial-lr-factors", "none",
            "--no-final-tune", "--seeds", "42", "--device", "cpu", "--storage", storage,
            "--study", "tiny", "--data-dir", str(data_dir), *extra]


SEARCH_ONLY = {"--trials": 1, "--workers": 1, "--population": 1, "--tournament": 1, "--rescore-seeds": 1}


def explaining(storage: str, data_dir: Path, *extra: str) -> list[str]:
    """``tiny`` with ``--explain``, less the search's own options (refused by --explain, which
    trains the champion's knockouts: issue 37) and, without a report, its final tuning's."""
    args, kept = tiny(storage, data_dir, "--explain", *extra), []
    skip = 0
    for arg in args:
        if skip:
            skip -= 1
        elif arg in SEARCH_ONLY:
            skip = SEARCH_ONLY[arg]
        elif not (arg == "--no-final-tune" and "--no-report" in extra):
            kept.append(arg)
    return kept


def test_publish_then_explain_rebuilds_a_removed_report_with_its_knockouts(
        tmp_path, data_dir, cache_dir, monkeypatch, capsys):
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    monkeypatch.chdir(tmp_path)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{tmp_path}/tiny.db"
    published = Path("docs/evolution/tiny")

    assert run_cli(tiny(storage, data_dir, "--publish", "--allow-dirty")) == 0
    summary = json.loads((published / "summary.json").read_text())
    assert not Path("runs").exists()  # --publish: the report under docs/ only
    provenance = summary["provenance"]
    assert provenance["allow_dirty"] is True
    assert provenance["code_dirty"] == git_state(REPO_ROOT)[1]
    assert provenance["artifact_path"] == str(published / "summary.json")
    assert "knockouts" not in summary

    shutil.rmtree("docs")  # e.g. `git clean` in a fresh clone: the study is all that is left
    capsys.readouterr()
    assert run_cli(explaining(storage, data_dir, "--publish", "--allow-dirty")) == 0
    assert "rebuild" in capsys.readouterr().out
    rebuilt = json.loads((published / "summary.json").read_text())
    knockouts = json.loads((published / "knockouts.json").read_text())
    assert rebuilt["knockouts"] == knockouts and knockouts["champion_trial"] == 0
    assert [v["variant"] for v in knockouts["variants"]] == ["champion", "baseline"]
    # the same study, seeds and data: the rebuilt report has the same numbers
    assert rebuilt["final_evaluation"] == summary["final_evaluation"]
    assert rebuilt["champion"] == summary["champion"] and rebuilt["trials"] == summary["trials"]
    assert rebuilt["provenance"]["allow_dirty"] is True
    # the search's settings are the study's (trials 1, population 2, ...), not the defaults of
    # the --explain command that rebuilt the report (which searched nothing)
    for name in ("sampler", "trials", "workers", "population", "tournament", "rescore_seeds",
                 "score_k", "sampler_seed"):
        assert rebuilt["settings"][name] == summary["settings"][name], name
    assert rebuilt["settings"]["rebuilt_by"] == "explain" and "rebuilt_by" not in summary["settings"]
    readme = (published / "README.md").read_text()
    assert "Which genes carry the gain" in readme and "Verdict of record" in readme
    # the champion is llama_modern itself (trial 0): compared anyway, and classed no-op
    comparison = json.loads((published / "final-comparison.json").read_text())
    assert comparison["verdict"]["classification"] == "no-op"
    assert comparison["equivalence"]["same_function"] is True
    assert rebuilt["final_evaluation"]["verdict_of_record"] == comparison["verdict"]
    for plot in ("fitness.png", "fitness_vs_parameters.png"):
        assert (published / plot).stat().st_size > 0

    # unpublished, and asked for no report: knockouts.json alone, under runs/evolve/<study>
    assert run_cli(explaining(storage, data_dir, "--no-report")) == 0
    assert sorted(p.name for p in Path("runs/evolve/tiny").iterdir()) == ["knockouts.json"]


def test_publish_refuses_a_dirty_tree_before_any_work(tmp_path, data_dir, monkeypatch, capsys):
    """The same helper as ``reproduce --publish`` (``check_publishable``), told the tree is dirty."""
    import llmevo.artifacts.provenance as provenance

    monkeypatch.setattr(provenance, "git_state", lambda root, ignore=None: ("0" * 40, True))
    monkeypatch.setattr(provenance, "git_head", lambda root: "0" * 40)  # the write-time check's reader
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path}/never.db"
    for command in (tiny(storage, data_dir, "--publish"), explaining(storage, data_dir, "--publish")):
        assert run_cli(command) == 2
        err = capsys.readouterr().err
        assert "cannot publish" in err and "uncommitted changes" in err, err
        assert len(err.strip().splitlines()) == 1
        assert list(tmp_path.iterdir()) == []  # no study file, no report


def test_explain_of_a_missing_study_creates_no_database(tmp_path, data_dir, monkeypatch, capsys):
    """`--explain --study NAME` on the default sqlite storage: one line, exit 2, and no empty
    ``runs/evolve/NAME.db`` left behind (opening the storage would create it)."""
    monkeypatch.chdir(tmp_path)
    code = run_cli(["evolve", "--explain", "--study", "nosuch", "--threads", "1", "--device", "cpu",
                    "--data-dir", str(data_dir)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "no study 'nosuch'" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


def test_tune_confirm_without_the_final_tuning_is_refused(tmp_path, data_dir, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = run_cli(tiny(f"sqlite:///{tmp_path}/t.db", data_dir, "--tune-confirm", "3"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--tune-confirm needs the final tuning" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
