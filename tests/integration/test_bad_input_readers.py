"""Bad input for the readers and the artifact writers (issue 23, causes 5, 8 and 9).

5. A file in an artifact folder that does not load is an error naming it, never a skipped
   row; JSON elsewhere is not an artifact by its location; no reader opens a named pipe,
   a device or a folder as an artifact (and so none blocks on one).
8. The leaderboard's links stay inside the repository (the folder it runs in); an artifact
   outside it is named, not linked, and no machine's path reaches the page.
9. ``diagnose`` and ``report`` write under ``runs/`` unless ``--publish`` (diagnose: from a
   clean tree unless ``--allow-dirty``); an artifact, or the leaderboard, is never replaced
   by one holding less without ``--replace``.

Every case runs through the command line in-process from an empty working folder (see
``test_bad_input.py``) and, where there is one, through the Python API.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from cli_runner import files_under, run_cli
from test_bad_input import assert_refused

from llmevo.artifacts import provenance
from llmevo.artifacts.schema import load_artifact
from llmevo.diagnostics import harness, pipeline
from llmevo.diagnostics.pipeline import DiagnoseRequest, diagnose
from llmevo.errors import ArtifactError, ConfigError
from llmevo.reports.leaderboard import build_leaderboard, scan_artifacts, write_leaderboard

REPO_ROOT = Path(__file__).resolve().parents[2]
ROPE = "reproductions/2104.09864-rope/metrics/public-quick-seeds42-44.json"
ALIBI = "reproductions/2108.12409-alibi/metrics/public-quick-seeds42-44.json"
RELAY = "foundation-models/2610.21126-rope-relay/metrics/component-cpu-seeds42-44.json"
ROPE_L1 = "foundation-models/2104.09864-rope/metrics/component-cpu-seeds42-44.json"
EVOLUTION = "evolution/evolve-quick/summary.json"


@pytest.fixture
def workdir(workdir, monkeypatch):
    """The shared empty working folder: the repository, as far as the leaderboard can tell."""
    monkeypatch.delenv("LLMEVO_REFERENCE_ARTIFACTS", raising=False)
    return workdir


def published(work: Path, *names: str) -> Path:
    """``work/docs`` holding copies of the repository's published files ``names``."""
    for name in names:
        target = work / "docs" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / "docs" / name, target)
    return work / "docs"


def snapshot(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


# --- 5: readers that silently skip --------------------------------------------------------

BROKEN = {
    "truncated": lambda raw: raw[: len(raw) // 2],
    "empty": lambda raw: b"",
    "an empty object": lambda raw: b"{}",
    "no method": lambda raw: json.dumps(
        {key: value for key, value in json.loads(raw).items() if key != "method"}).encode(),
    "a list": lambda raw: b"[]",
    "not UTF-8": lambda raw: b"\xff" + raw,
}


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_the_leaderboard_refuses_a_published_artifact_that_does_not_load(case, capsys, workdir):
    docs = published(workdir, ROPE, ALIBI, EVOLUTION)
    assert run_cli(["leaderboard", "--root", "docs"]) == 0
    capsys.readouterr()
    target = docs / ROPE
    target.write_bytes(BROKEN[case](target.read_bytes()))
    before = snapshot(workdir)
    err = assert_refused(["leaderboard", "--root", "docs"], capsys, workdir)
    assert ROPE in err, err
    assert snapshot(workdir) == before  # LEADERBOARD.md/.json not rewritten
    with pytest.raises(ArtifactError, match=re.escape(ROPE)):
        scan_artifacts([Path("docs")])


def test_json_outside_the_artifact_folders_is_not_an_artifact_by_rule(capsys, workdir):
    """The leaderboard's own JSON and an evolution summary are not artifacts because of
    where they are (not in a ``metrics/`` folder), even when they do not parse."""
    docs = published(workdir, ROPE, EVOLUTION)
    (docs / EVOLUTION).write_text("{truncated")
    assert run_cli(["leaderboard", "--root", "docs"]) == 0
    assert "outside metrics/" in capsys.readouterr().out
    found, skipped = scan_artifacts([Path("docs")])
    assert [path.as_posix() for path, _ in found] == [f"docs/{ROPE}"]
    assert sorted(path.as_posix() for path in skipped) == [
        "docs/LEADERBOARD.json", f"docs/{EVOLUTION}"]


def test_a_folder_of_artifacts_gives_at_least_one(capsys, workdir):
    (workdir / "empty").mkdir()
    published(workdir, EVOLUTION)  # JSON, but no artifact folder
    for args in (["leaderboard", "--root", "empty"], ["leaderboard", "--root", "docs"]):
        assert_refused(args, capsys, workdir, message="no artifacts")
    published(workdir, ROPE)
    assert_refused(["leaderboard", "--root", "docs", "--reference", "empty"], capsys, workdir,
                   message="no artifacts")
    with pytest.raises(ArtifactError, match="no artifacts"):
        scan_artifacts([workdir / "empty"])


def test_the_same_artifact_reached_twice_is_one_row(workdir):
    published(workdir, ROPE)
    found, _ = scan_artifacts([Path("docs"), Path("docs"), Path("docs/reproductions")])
    assert len(found) == 1


@pytest.fixture
def fifo(workdir) -> Path:
    path = workdir / "pipe.json"
    os.mkfifo(path)
    return path


@pytest.mark.timeout(60)
def test_no_reader_blocks_on_a_named_pipe(fifo, capsys, workdir):
    docs = published(workdir, ROPE)
    for args in (["show", str(fifo)], ["compare", str(fifo), str(docs / ROPE)],
                 ["compare", str(docs / ROPE), str(fifo)],
                 ["report", str(fifo), "--out", "r"], ["leaderboard", "--root", str(fifo)]):
        assert_refused(args, capsys, workdir, message="not a regular file (a named pipe)")
    with pytest.raises(ArtifactError, match="pipe.json: not a regular file"):
        load_artifact(fifo)


@pytest.mark.timeout(60)
def test_a_named_pipe_in_an_artifact_folder_is_an_error_naming_it(capsys, workdir):
    docs = published(workdir, ROPE)
    os.mkfifo(docs / "reproductions/2104.09864-rope/metrics/pipe.json")
    for args in (["leaderboard", "--root", "docs"], ["components", "--docs", "docs"]):
        assert_refused(args, capsys, workdir,
                       message="metrics/pipe.json: not a regular file (a named pipe)")
    with pytest.raises(ArtifactError, match="pipe.json: not a regular file"):
        scan_artifacts([docs])


@pytest.mark.timeout(60)
def test_an_existing_leaderboard_that_is_a_named_pipe_is_refused(capsys, workdir):
    docs = published(workdir, ROPE)
    os.mkfifo(docs / "LEADERBOARD.json")
    assert_refused(["leaderboard", "--root", "docs"], capsys, workdir,
                   message="LEADERBOARD.json: not a regular file")


@pytest.mark.timeout(60)
def test_devices_and_folders_are_not_artifacts(capsys, workdir):
    assert_refused(["show", "/dev/zero"], capsys, workdir, message="not a regular file (a device)")
    (workdir / "folder.json").mkdir()
    assert_refused(["show", "folder.json"], capsys, workdir, message="not a regular file (a folder)")
    docs = published(workdir, ROPE)
    (docs / "reproductions/2104.09864-rope/metrics/x.json").mkdir()
    assert_refused(["leaderboard", "--root", "docs"], capsys, workdir, message="metrics/x.json")


def test_components_refuses_a_docs_folder_that_does_not_exist(capsys, workdir):
    assert_refused(["components", "--docs", "nosuch"], capsys, workdir, message="--docs nosuch")


# --- 8: links out of the repository ---------------------------------------------------------

def _links(markdown: str) -> list[str]:
    return re.findall(r"\]\(([^)]*)\)", markdown)


def _check_page(work: Path, reference: Path) -> None:
    markdown = (work / "docs" / "LEADERBOARD.md").read_text()
    links = _links(markdown)
    assert links, markdown
    for target in links:
        path = (work / "docs" / target).resolve()
        assert path.is_relative_to(work.resolve()) and path.is_file(), target
    for machine_path in {str(reference), str(reference.resolve()), str(work)}:
        assert machine_path not in markdown
    assert "`reference-artifacts/2104.09864-rope.public-seed42.json` (outside the repository)" \
        in markdown
    rows = json.loads((work / "docs" / "LEADERBOARD.json").read_text())["rows"]
    sources = {row["source"]: row["in_repository"] for row in rows}
    assert sources[f"docs/{ROPE}"] is True
    assert sources["reference-artifacts/2104.09864-rope.public-seed42.json"] is False
    assert not any(source.startswith(("/", "..")) for source in sources)


def test_leaderboard_links_stay_inside_the_repository(capsys, workdir, reference_dir):
    published(workdir, ROPE, RELAY)
    assert run_cli(["leaderboard", "--root", "docs", "--reference", str(reference_dir)]) == 0
    _check_page(workdir, reference_dir)
    # the same through the Python API, the page written elsewhere in the repository
    found, _ = scan_artifacts([Path("docs")], references=[reference_dir])
    rows = build_leaderboard(found, workdir)
    (workdir / "pages").mkdir()
    write_leaderboard(rows, workdir / "pages" / "LB.md", workdir / "pages" / "LB.json", workdir)
    links = _links((workdir / "pages" / "LB.md").read_text())
    assert links == [f"../docs/{ROPE}", f"../docs/{RELAY}"]


def test_a_data_folder_reached_through_a_symbolic_link_leaves_no_machine_path(
        capsys, workdir, reference_dir, monkeypatch, tmp_path):
    published(workdir, ROPE)
    shared = tmp_path / "elsewhere" / "shared"
    shared.parent.mkdir()
    shared.symlink_to(reference_dir.parent, target_is_directory=True)
    monkeypatch.setenv("LLMEVO_DATA", str(shared / "data"))
    assert run_cli(["leaderboard", "--root", "docs"]) == 0
    _check_page(workdir, shared / "reference-artifacts")
    # a link inside the repository to a folder outside it: the files are not in the repository
    (workdir / "refs").symlink_to(reference_dir, target_is_directory=True)
    assert run_cli(["leaderboard", "--root", "docs", "--reference", "refs", "--replace"]) == 0
    markdown = (workdir / "docs" / "LEADERBOARD.md").read_text()
    assert "refs/" not in "".join(_links(markdown))
    assert "`refs/2104.09864-rope.public-seed42.json` (outside the repository)" in markdown


def test_a_page_outside_the_repository_links_nothing(tmp_path, reference_dir):
    repository = tmp_path / "repository"
    (repository / "metrics").mkdir(parents=True)
    shutil.copyfile(REPO_ROOT / "docs" / ROPE, repository / "metrics" / "a.json")
    rows = build_leaderboard(scan_artifacts([repository], references=[reference_dir])[0],
                             repository)
    write_leaderboard(rows, repository / "LB.md", repository / "LB.json", repository)
    assert _links((repository / "LB.md").read_text()) == ["metrics/a.json"]
    write_leaderboard(rows, tmp_path / "LB.md", tmp_path / "LB.json", repository)
    markdown = (tmp_path / "LB.md").read_text()
    assert _links(markdown) == [] and "| `metrics/a.json` |" in markdown


# --- 9: writers that replace published evidence ---------------------------------------------

@pytest.fixture
def no_work(monkeypatch):
    def started(*_args, **_kwargs):
        raise AssertionError("the diagnostic ran before its output was checked")

    monkeypatch.setattr(pipeline, "run_diagnostic", started)


@pytest.fixture
def fast_diagnostics(monkeypatch):
    """``rope`` and ``rope-relay`` return fixed rows at once (what is checked is where the
    artifact goes and what it replaces, not the numbers)."""
    for name in ("rope", "rope-relay"):
        registered = harness.DIAGNOSTICS[name]
        row = {"max_abs_error": 1e-7, "passes": True}
        monkeypatch.setitem(harness.DIAGNOSTICS, name, dataclasses.replace(
            registered, run_seed=lambda config, seed, device, row=row: dict(row)))


@pytest.fixture
def dirty(monkeypatch):
    monkeypatch.setattr(provenance, "git_state", lambda root, ignore=None: ("0" * 40, True))
    monkeypatch.setattr(provenance, "git_head", lambda root: "0" * 40)  # the write-time check's reader


def test_diagnose_writes_under_runs_unless_published(capsys, workdir, fast_diagnostics, dirty):
    default = Path("runs/foundation-models/2104.09864-rope/metrics/component-cpu-seeds42.json")
    assert run_cli(["diagnose", "rope", "--seed", "42", "--device", "cpu", "--threads", "1"]) == 0
    assert f"wrote {default}" in capsys.readouterr().out
    assert files_under(workdir) == {
        *default.parents, default} - {Path(".")}, files_under(workdir)
    assert json.loads(default.read_text())["provenance"].get("allow_dirty") is None
    outcome = diagnose(DiagnoseRequest(name="rope", seeds=[43], device="cpu"))
    assert outcome.path == default.with_name("component-cpu-seeds43.json")
    assert outcome.path.is_file() and not (workdir / "docs").exists()
    # --publish: under docs/, refused from a dirty tree unless --allow-dirty (recorded)
    assert_refused(["diagnose", "rope", "--seed", "42", "--device", "cpu", "--publish"],
                   capsys, workdir, message="cannot publish")
    with pytest.raises(ConfigError, match="cannot publish"):
        diagnose(DiagnoseRequest(name="rope", seeds=[42], device="cpu", publish=True))
    assert run_cli(["diagnose", "rope", "--seed", "42", "--device", "cpu", "--publish",
                    "--allow-dirty"]) == 0
    written = json.loads(Path(f"docs/{ROPE_L1}").with_name("component-cpu-seeds42.json").read_text())
    assert written["provenance"]["allow_dirty"] is True
    assert written["provenance"]["artifact_path"].startswith("docs/foundation-models/")


def test_allow_dirty_without_publish_is_refused(capsys, workdir, no_work):
    assert_refused(["diagnose", "rope", "--allow-dirty"], capsys, workdir, message="--publish")
    with pytest.raises(ConfigError, match="--publish"):
        DiagnoseRequest(name="rope", allow_dirty=True)


def test_diagnose_never_replaces_the_published_l2_experiment(capsys, workdir, no_work):
    """The case that lost 143 lines: ``diagnose rope-relay --seeds 42,43,44`` over the
    published artifact that holds the L2 streaming experiment."""
    docs = published(workdir, RELAY)
    before = snapshot(docs)
    args = ["diagnose", "rope-relay", "--seeds", "42,43,44", "--device", "cpu", "--publish",
            "--allow-dirty"]
    err = assert_refused(args, capsys, workdir, message="--replace")
    assert RELAY in err and "L2 experiment (full_experiment)" in err, err
    with pytest.raises(ConfigError, match="full_experiment"):
        diagnose(DiagnoseRequest(name="rope-relay", device="cpu", publish=True, allow_dirty=True))
    assert snapshot(docs) == before


def test_diagnose_never_replaces_an_artifact_with_fewer_seeds(capsys, workdir, no_work):
    target = published(workdir, ROPE_L1) / ROPE_L1
    before = target.read_bytes()
    assert_refused(["diagnose", "rope", "--seeds", "42,43", "--device", "cpu", "--out", str(target)],
                   capsys, workdir, message="seed 44")
    with pytest.raises(ConfigError, match="seeds 43, 44"):
        diagnose(DiagnoseRequest(name="rope", seeds=[42], device="cpu", out=target))
    assert target.read_bytes() == before


def test_diagnose_never_overwrites_a_file_that_is_not_an_artifact(capsys, workdir, no_work):
    (workdir / "notes.json").write_text("my notes")
    assert_refused(["diagnose", "rope", "--out", "notes.json"], capsys, workdir,
                   message="--replace")
    assert (workdir / "notes.json").read_text() == "my notes"


def test_replace_replaces(capsys, workdir, fast_diagnostics):
    target = published(workdir, ROPE_L1) / ROPE_L1
    assert run_cli(["diagnose", "rope", "--seeds", "42,43", "--device", "cpu", "--out",
                    str(target), "--replace"]) == 0
    assert json.loads(target.read_text())["seeds"] == [42, 43]
    (workdir / "notes.json").write_text("my notes")
    outcome = diagnose(DiagnoseRequest(name="rope", seeds=[1], device="cpu",
                                       out=workdir / "notes.json", replace=True))
    assert load_artifact(outcome.path).seeds == [1]


def test_diagnose_may_replace_an_artifact_with_one_holding_as_much(capsys, workdir,
                                                                   fast_diagnostics):
    target = Path("runs/foundation-models/2104.09864-rope/metrics/component-cpu-seeds42-44.json")
    for _ in range(2):
        assert run_cli(["diagnose", "rope", "--device", "cpu", "--threads", "1"]) == 0
    assert target.is_file()


def test_report_writes_under_runs_unless_published(capsys, workdir):
    docs = published(workdir, ROPE)
    before = snapshot(docs)
    assert run_cli(["report", f"docs/{ROPE}"]) == 0
    assert "wrote runs/reproductions/2104.09864-rope/README.md" in capsys.readouterr().out
    assert snapshot(docs) == before
    assert run_cli(["report", f"docs/{ROPE}", "--publish"]) == 0
    assert (docs / "reproductions/2104.09864-rope/README.md").is_file()
    assert_refused(["report", f"docs/{ROPE}", "--publish", "--out", "r"], capsys, workdir,
                   message="--publish")


def test_the_leaderboard_never_drops_a_row_it_lists(capsys, workdir, reference_dir,
                                                    monkeypatch):
    """A clone without the reference folder, or an artifact deleted: the page keeps its rows
    unless ``--replace`` says they go."""
    docs = published(workdir, ROPE, ALIBI)
    assert run_cli(["leaderboard", "--root", "docs", "--reference", str(reference_dir)]) == 0
    monkeypatch.setenv("LLMEVO_DATA", str(workdir / "no-shared" / "data"))  # as in a clone
    before = snapshot(docs)
    err = assert_refused(["leaderboard", "--root", "docs"], capsys, workdir, message="--replace")
    assert "reference-artifacts/2104.09864-rope.public-seed42.json" in err, err
    (docs / ALIBI).unlink()
    before = snapshot(docs)
    err = assert_refused(["leaderboard", "--root", "docs", "--reference", str(reference_dir)],
                         capsys, workdir, message=f"docs/{ALIBI}")
    assert snapshot(docs) == before
    found, _ = scan_artifacts([Path("docs")])
    with pytest.raises(ConfigError, match="--replace"):
        write_leaderboard(build_leaderboard(found, workdir), docs / "LEADERBOARD.md",
                          docs / "LEADERBOARD.json", workdir)
    assert run_cli(["leaderboard", "--root", "docs", "--replace"]) == 0
    rows = json.loads((docs / "LEADERBOARD.json").read_text())["rows"]
    assert [row["source"] for row in rows] == [f"docs/{ROPE}"]


def test_an_existing_leaderboard_that_does_not_load_is_replaced_only_when_asked(capsys, workdir):
    docs = published(workdir, ROPE)
    (docs / "LEADERBOARD.json").write_text("{trunc")
    assert_refused(["leaderboard", "--root", "docs"], capsys, workdir,
                   message="LEADERBOARD.json: not valid JSON")
    assert run_cli(["leaderboard", "--root", "docs", "--replace"]) == 0


TUNED = "reproductions/1911.02150-mqa/metrics/public-quick-tuned-seeds42-46.json"
SPACE = "reproductions/2502.16982-muon/metrics/public-quick-tuned-space-seeds42-46.json"
BUDGET = {"runs": 5, "trained": 5, "steps_per_run": 100, "cpu_seconds": 12.5, "wall_seconds": 13.0}


@pytest.mark.parametrize(("source", "field", "value", "message"), [
    (TUNED, "budget", "x", "tuning.arms.baseline.budget: Input should be a valid dictionary"),
    (TUNED, "budget", {"runs": 1}, "tuning.arms.baseline.budget.trained: Field required"),
    (TUNED, "budget", {**BUDGET, "runs": "a"}, "tuning.arms.baseline.budget.runs: Input should be a valid integer"),
    (TUNED, "budget", [1], "tuning.arms.baseline.budget: Input should be a valid dictionary"),
    (SPACE, "grid_floor", "x", "tuning.arms.baseline.grid_floor: Input should be a valid dictionary"),
    (SPACE, "grid_floor", {"grid_best": "y", "held": False}, "tuning.arms.baseline.grid_floor.grid: Field required"),
    (SPACE, "grid_floor", [1], "tuning.arms.baseline.grid_floor: Input should be a valid dictionary"),
])
@pytest.mark.parametrize("command", [["show"], ["report", "--out", "report"], ["verdict", "--no-family"]])
def test_a_malformed_tuning_budget_or_grid_floor_is_one_line(source, field, value, message, command, capsys,
                                                              workdir):
    """Issue 37 round 4: the tuning block's ``budget`` and ``grid_floor`` were untyped extras
    read by key, so ``show`` and ``report`` ended in a KeyError or TypeError traceback on a
    malformed one; now typed, so the artifact is refused when it loads. The published
    artifacts, written before them, load as they are."""
    data = json.loads((REPO_ROOT / "docs" / source).read_text())
    data["tuning"]["arms"]["baseline"][field] = value
    path = workdir / "a.json"
    path.write_text(json.dumps(data))
    assert_refused([*command, str(path)], capsys, workdir, message=message)


def test_a_tuning_budget_reads_back_typed_and_old_artifacts_lack_it(workdir):
    data = json.loads((REPO_ROOT / "docs" / TUNED).read_text())
    for arm in data["tuning"]["arms"].values():  # as written before the budget was recorded
        arm.pop("budget", None)
    path = workdir / "a.json"
    path.write_text(json.dumps(data))
    assert load_artifact(path).tuning.arms["baseline"].budget is None
    data["tuning"]["arms"]["baseline"]["budget"] = BUDGET
    path.write_text(json.dumps(data))
    loaded = load_artifact(path)
    assert loaded.tuning.arms["baseline"].budget.runs == 5
    from llmevo.artifacts.schema import dump_artifact
    assert dump_artifact(loaded) == data  # nothing added, nothing reordered


@pytest.mark.parametrize("command", [["show"], ["report", "--out", "report"], ["verdict", "--no-family"]])
def test_an_evolution_summary_or_a_ladder_given_as_an_artifact_says_what_it_is(command, capsys, workdir):
    """Before: "method: expected an object (reproduction artifact) or a string ..."."""
    docs = published(workdir, EVOLUTION)
    assert_refused([*command, str(docs / EVOLUTION)], capsys, workdir,
                   message="an evolution study's summary (its comparison artifact is final-comparison.json beside it)")
    ladder = REPO_ROOT / "docs/ladders/2104.09864-rope/ladder.json"
    if command[0] == "show":  # report renders a ladder file, verdict reads it rung by rung (tests/unit/test_verdict.py)
        assert_refused([*command, str(ladder)], capsys, workdir, message="a ladder file (llmevo report reads it)")
