"""The typed pipeline requests: invalid values are one-line ``ConfigError``s raised before
any work, and the default output paths follow the documented layout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llmevo.errors import ConfigError, LlmevoError
from llmevo.evolve import EvolutionSettings
from llmevo.experiments import ReproductionRequest, reproduce
from llmevo.experiments.pipeline import artifact_filename


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"seeds": [42, 42]}, "duplicate seeds"),
        ({"seeds": []}, "no seeds given"),
        ({"seeds": [-1]}, "--seeds: seed -1 is out of range"),
        ({"tune_seeds": [2**63]}, "--tune-seeds: seed 9223372036854775808 is out of range"),
        ({"threads": 0}, r"--threads 0: Input should be greater than or equal to 1 \(RunSection.threads\)"),
        ({"steps": 0}, r"--steps 0: Input should be greater than or equal to 1 \(TrainingSection.steps\)"),
        ({"lr": -1.0}, "--lr -1.0: Input should be greater than 0"),
        ({"margin": 0.0}, "--margin 0.0: Input should be greater than 0"),
        ({"replicas_max": 0}, "--replicas-max 0: Input should be greater than or equal to 1"),
        ({"stepz": 3}, "stepz: Extra inputs are not permitted"),
        ({"tune": False, "tune_grid": [1e-3, 3e-3]}, "--tune-grid needs tuning"),
    ],
)
def test_bad_reproduction_request_is_one_line(tmp_path, values, message):
    with pytest.raises(ConfigError, match=message) as error:
        ReproductionRequest(data_dir=tmp_path, **values)
    assert "\n" not in str(error.value)


def test_bad_evolution_settings_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"--trials 0: Input should be greater .* \(EvolutionSettings.trials\)"):
        EvolutionSettings(data_dir=tmp_path, trials=0)
    for values, message in (({"population": 1}, "--population 1: Input should be greater than or equal to 2"),
                            ({"population": 3, "tournament": 4}, "--tournament 4 exceeds --population 3"),
                            ({"seeds": [42, 42]}, "--seeds: duplicate seeds"),
                            ({"score_k": -1.0}, "--score-k -1.0"),
                            ({"study": "../escape"}, "--study '../escape': expected a name")):
        with pytest.raises(ConfigError, match=message):
            EvolutionSettings(data_dir=tmp_path, **values)
    with pytest.raises(ConfigError, match="promotion"):
        EvolutionSettings(data_dir=tmp_path, promotion="vibes")


def test_default_outputs(tmp_path):
    request = ReproductionRequest(data_dir=tmp_path, seeds=[42, 43, 44], preset="quick")
    outputs = request.plan().outputs
    assert outputs.artifact == Path("runs/2104.09864-rope/public-quick-tuned-seeds42-44.json")
    assert outputs.report == Path("runs/2104.09864-rope/report")
    published = request.updated(**{"publish": True, "report": False}).plan().outputs
    assert published.artifact == Path(
        "docs/reproductions/2104.09864-rope/metrics/public-quick-tuned-seeds42-44.json")
    assert published.report is None
    assert artifact_filename("smoke", [42]) == "public-seed42.json"
    smoke = ReproductionRequest(data_dir=tmp_path)  # smoke: untuned, seed 42
    assert smoke.plan().seeds == [42] and smoke.plan().tuning is None
    assert smoke.plan().outputs.artifact == Path("runs/2104.09864-rope/public-seed42.json")
    quick = ReproductionRequest(data_dir=tmp_path, preset="quick")  # quick: tuned, seeds 42..46
    assert quick.plan().seeds == [42, 43, 44, 45, 46]
    assert quick.plan().tuning.seeds == (1000,) and len(quick.plan().tuning.grid) == 5
    assert artifact_filename("smoke", [42, 47, 50]) == "public-seeds42-47-50.json"
    settings = EvolutionSettings(data_dir=tmp_path, preset="smoke", trial_steps=8)
    assert settings.study_name() == "evolve-smoke-s8"
    assert settings.storage_url() == "sqlite:///runs/evolve/evolve-smoke-s8.db"
    assert settings.report_folder() == Path("runs/evolve/evolve-smoke-s8")  # beside its study file
    published = settings.updated(**{"publish": True})
    assert published.report_folder() == Path("docs/evolution/evolve-smoke-s8")
    assert published.updated(**{"out": tmp_path / "r"}).report_folder() == tmp_path / "r"


def test_publish_outside_a_checkout_is_refused_before_any_work(tmp_path):
    out = tmp_path / "a.json"
    request = ReproductionRequest(data_dir=tmp_path, publish=True, repo_root=tmp_path, out=out,
                                  device="cpu")
    with pytest.raises(ConfigError, match="cannot publish"):
        reproduce(request)
    assert list(tmp_path.iterdir()) == []


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo),
                    *args], check=True, capture_output=True)


def test_evolve_publish_refuses_a_dirty_or_unknown_tree_before_any_work(tmp_path):
    from llmevo.evolve import explain, run

    repo, data = tmp_path / "repo", tmp_path / "data"
    repo.mkdir()
    data.mkdir()
    storage = tmp_path / "study.db"
    settings = EvolutionSettings(data_dir=data, preset="smoke", device="cpu", publish=True,
                                 repo_root=repo, storage=f"sqlite:///{storage}", study="s")
    for entry in (run, explain):
        with pytest.raises(ConfigError, match="cannot publish: .*not a git checkout"):
            entry(settings)
    (repo / "a.py").write_text("A = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "init")
    (repo / "a.py").write_text("A = 2\n")  # an uncommitted change
    for entry in (run, explain):
        with pytest.raises(ConfigError, match="cannot publish: .* uncommitted changes"):
            entry(settings)
    assert not storage.exists() and list(data.iterdir()) == []
    # allowed, or not publishing: past the check (refused next for the empty data folder)
    for allowed in (settings.updated(**{"allow_dirty": True}),
                    settings.updated(**{"publish": False})):
        with pytest.raises(LlmevoError) as error:
            run(allowed)
        assert "cannot publish" not in str(error.value)


def test_an_artifact_path_that_is_a_folder_is_refused_before_any_work(tmp_path):
    (tmp_path / "taken").mkdir()
    request = ReproductionRequest(data_dir=tmp_path, out=tmp_path / "taken", device="cpu")
    with pytest.raises(ConfigError, match="is a folder; expected a file path"):
        reproduce(request)
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]


def test_against_outputs_never_collide_with_the_declared_ablations(tmp_path):
    default = ReproductionRequest(name="alibi", data_dir=tmp_path, preset="quick")
    against = default.updated(**{"against": "rope"})
    assert default.plan().outputs.artifact == Path(
        "runs/2108.12409-alibi/public-quick-tuned-seeds42-46.json")
    assert against.plan().outputs.artifact == Path(
        "runs/2108.12409-alibi/public-quick-tuned-vs-rope-seeds42-46.json")
    assert (default.plan().outputs.report, against.plan().outputs.report) == (
        Path("runs/2108.12409-alibi/report"), Path("runs/2108.12409-alibi/report-vs-rope"))
    published = [r.updated(**{"publish": True}).plan().outputs for r in (default, against)]
    assert published[0].artifact == Path(
        "docs/reproductions/2108.12409-alibi/metrics/public-quick-tuned-seeds42-46.json")
    assert published[1].artifact == Path(
        "docs/reproductions/2108.12409-alibi/metrics/public-quick-tuned-vs-rope-seeds42-46.json")
    assert (published[0].report, published[1].report) == (
        Path("docs/reproductions/2108.12409-alibi"), Path("docs/reproductions/2108.12409-alibi/vs-rope"))
    assert artifact_filename("smoke", [42], against="swiglu:hidden=128") == \
        "public-vs-swiglu-hidden-128-seed42.json"
    assert artifact_filename("quick", [42, 43, 44], tuned=False, against="rope") == \
        "public-quick-vs-rope-seeds42-44.json"
    command = against.updated(**{"command": None}).plan().command
    assert "against='rope'" in command


def test_a_bad_against_is_refused_before_any_work(tmp_path):
    request = ReproductionRequest(name="alibi", against="swiglu", data_dir=tmp_path, device="cpu",
                                  out=tmp_path / "a.json")
    with pytest.raises(ConfigError, match="it fills the feedforward slot"):
        reproduce(request)
    assert list(tmp_path.iterdir()) == []


def test_a_preset_override_reaches_the_plan_and_a_bad_one_is_refused(tmp_path):
    plan = ReproductionRequest(data_dir=tmp_path, weight_decay=0.0, warmup_steps=5).plan()
    assert (plan.preset.train.weight_decay, plan.preset.train.warmup_steps) == (0.0, 5)
    assert ReproductionRequest(data_dir=tmp_path, preset="quick").plan().preset.train.weight_decay == 0.1
    with pytest.raises(ConfigError, match="--weight-decay -0.1: Input should be greater than or equal to 0"):
        ReproductionRequest(data_dir=tmp_path, weight_decay=-0.1)


def test_an_evolution_report_is_not_replaced_by_one_that_holds_less(tmp_path, data_dir):
    """The replacement check a reproduction makes, for a study's report: before any work."""
    import json

    from llmevo.evolve import run
    from llmevo.evolve.pipeline import check_report_replacement

    folder = tmp_path / "report"
    folder.mkdir()
    summary = folder / "summary.json"
    summary.write_text(json.dumps({"trial_counts": {"complete": 24},
                                   "final_evaluation": {"seeds": [42, 43, 44, 45, 46]}}))
    storage = tmp_path / "new.db"
    settings = EvolutionSettings(preset="smoke", trials=2, seeds=[42, 43], data_dir=data_dir, out=folder,
                                 storage=f"sqlite:///{storage}", device="cpu", threads=1)
    with pytest.raises(ConfigError, match=r"holds 24 complete trials \(a new study here runs 2\) and "
                                          r"final-comparison seeds 44, 45, 46.*--replace"):
        run(settings)
    assert not storage.exists()  # refused before the study was created
    # a study whose storage holds its trials lists them again; seeds it keeps are no loss
    storage.write_bytes(b"")
    check_report_replacement(summary, f"sqlite:///{storage}", 2, [42, 43, 44, 45, 46], replace=False)
    check_report_replacement(summary, f"sqlite:///{tmp_path / 'other.db'}", 2, [42], replace=True)
    summary.write_text("not json")
    with pytest.raises(ConfigError, match="not a readable evolution summary"):
        check_report_replacement(summary, f"sqlite:///{storage}", 30, [42], replace=False)


def test_a_published_evolution_report_goes_through_the_same_replacement_check(tmp_path, data_dir, monkeypatch):
    """Issue 37 item 2: ``evolve --publish`` writes docs/evolution/<study>/ and is checked as an
    unpublished report is, before any work: a published summary holding more seeds is kept."""
    import json

    from llmevo.evolve import run

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "docs" / "evolution" / "pub"
    folder.mkdir(parents=True)
    summary = folder / "summary.json"
    text = json.dumps({"trial_counts": {"complete": 1}, "final_evaluation": {"seeds": [42, 43, 44]}})
    summary.write_text(text)
    storage = tmp_path / "pub.db"
    settings = EvolutionSettings(preset="smoke", trials=2, seeds=[42], data_dir=data_dir, study="pub",
                                 storage=f"sqlite:///{storage}", device="cpu", threads=1, publish=True,
                                 allow_dirty=True)
    assert settings.report_folder() == Path("docs/evolution/pub")
    with pytest.raises(ConfigError, match=r"docs/evolution/pub/summary.json holds final-comparison seeds "
                                          r"43, 44.*--replace"):
        run(settings)
    assert not storage.exists() and summary.read_text() == text  # nothing started, nothing touched


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize(("name", "kind"), [("summary.json", "a FIFO"), ("summary.json", "a folder"),
                                            ("final-comparison.json", "a folder"), ("fitness.png", "a FIFO")])
def test_a_report_file_that_is_a_folder_or_a_fifo_is_refused_before_any_work(tmp_path, data_dir, name, kind,
                                                                              replace):
    """Issue 37 round 4: a folder at summary.json failed its write after the search and the
    final comparison, with final-comparison.json and the plots already written; a FIFO there
    was replaced, exit 0. Neither can be replaced by a file, so --replace does not help."""
    import os

    from llmevo.evolve import explain, run

    folder = tmp_path / "report"
    folder.mkdir()
    if kind == "a FIFO":
        os.mkfifo(folder / name)
    else:
        (folder / name).mkdir()
    storage = tmp_path / "new.db"
    settings = EvolutionSettings(preset="smoke", trials=2, seeds=[42], data_dir=data_dir, out=folder,
                                 storage=f"sqlite:///{storage}", device="cpu", threads=1, replace=replace)
    with pytest.raises(ConfigError, match=f"{name} is {kind}, where the study report writes a file"):
        run(settings)
    assert not storage.exists() and sorted(p.name for p in folder.iterdir()) == [name]
    storage.write_bytes(b"")  # explain opens the study first: a study file that is there
    with pytest.raises(ConfigError, match=f"{name} is {kind}"):
        explain(settings.updated(trials=24, replace=False))  # an explicit default is no search option


def test_explain_refuses_a_summary_that_does_not_read_before_training(tmp_path, data_dir, monkeypatch):
    """``explain`` read the report's summary.json with json.loads after the knockouts trained
    (a traceback); now it is read, and refused in one line, before any training."""
    from llmevo.evolve import explain, pipeline

    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "summary.json").write_text("not json")
    monkeypatch.setattr(pipeline, "open_storage", lambda *a, **k: pytest.fail("opened the study"))
    settings = EvolutionSettings(preset="smoke", seeds=[42], data_dir=data_dir, out=folder,
                                 storage=f"sqlite:///{tmp_path / 's.db'}", device="cpu", threads=1)
    (tmp_path / "s.db").write_bytes(b"")
    with pytest.raises(ConfigError, match="summary.json is there and is not a readable evolution summary; "
                                          "move it away or pass --out another folder$"):
        explain(settings)


@pytest.mark.parametrize(("values", "explaining", "message"), [
    ({"report": False, "out": "rep"}, False, "--out applies to the study report, and --no-report writes none"),
    ({"report": False, "replace": True}, False, "--replace applies to the study report, and --no-report"),
    ({"replace": True}, True, "--replace applies to a search's study report; --explain adds its knockouts"),
    ({"report": False, "seeds": [7], "final_tune": False}, False,
     "--seeds, --no-final-tune apply to the study report, and --no-report writes none"),
    ({"report": False, "publish": True, "allow_dirty": True}, False,
     "--publish, --allow-dirty apply to the study report"),
    ({"trials": 3, "population": 4, "tensorboard": "tb"}, True,
     "--trials, --population, --tensorboard do not apply to --explain"),
    ({"report": False, "path": "sequential"}, True, "--sequential does not apply to --explain.*with --no-report"),
])
def test_report_options_with_no_report_to_write_are_refused_before_any_work(values, explaining, message,
                                                                            tmp_path, data_dir, monkeypatch):
    """Issue 37 round 4: ``evolve --no-report --out DIR`` / ``--replace`` and ``--explain
    --replace`` ran, the option silently ignored."""
    from llmevo.evolve import explain, run

    monkeypatch.chdir(tmp_path)
    search = {} if explaining or values.get("report") is False else {"trials": 2, "seeds": [42]}
    settings = EvolutionSettings(preset="smoke", data_dir=data_dir, storage=f"sqlite:///{tmp_path / 's.db'}",
                                 device="cpu", threads=1, **search, **values)
    with pytest.raises(ConfigError, match=message):
        (explain if explaining else run)(settings)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
