"""A reproduction whose source tree changes between its start and its write: refused when
published (one line, exit status 2, nothing written), recorded with a warning when not.

The code state is read from a temporary git checkout instead of the package (monkeypatching
where the pipeline reads it, ``pipeline.code_state``); the change is made to a real file of
that checkout while the reproduction trains (two steps, one seed).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_runner import files_under, run_cli

from llmevo.artifacts.provenance import capture_code_state
from llmevo.artifacts.schema import load_artifact
from llmevo.errors import CodeChangedError, CodeChangedWarning
from llmevo.experiments import ReproductionRequest, pipeline, reproduce, reproduction


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo), *args],
                   check=True, capture_output=True)


@pytest.fixture
def tree(tmp_path: Path, monkeypatch) -> dict:
    """A committed checkout whose package the pipeline's code state watches; ``edit`` set to a
    text changes its module while the arms train."""
    repo = tmp_path / "repo"
    package = repo / "src" / "pkg"
    package.mkdir(parents=True)
    module = package / "component.py"
    module.write_text("SCALE = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "init")
    state = {"repo": repo, "edit": None}
    monkeypatch.setattr(pipeline, "code_state",
                        lambda plan: capture_code_state([module], module, repo, package_root=package))
    trained = reproduction.run_reproduction

    def run_reproduction(plan, **kwargs):
        outcome = trained(plan, **kwargs)
        if state["edit"] is not None:  # edited (or committed) while the run trained
            module.write_text(state["edit"])
        return outcome

    monkeypatch.setattr(reproduction, "run_reproduction", run_reproduction)
    return state


def _request(data_dir: Path, out: Path, repo: Path, publish: bool) -> ReproductionRequest:
    return ReproductionRequest(name="rope", steps=2, seeds=[42], device="cpu", threads=1, report=False,
                               arm_cache=False, data_dir=data_dir, out=out,
                               publish=publish, repo_root=repo)


def test_a_publication_whose_code_changed_while_it_trained_is_refused(tree, tmp_path, data_dir):
    out = tmp_path / "out" / "a.json"
    tree["edit"] = "SCALE = 2\n"
    with pytest.raises(CodeChangedError, match=r"1 source file changed \(src/pkg/component.py\).*nothing was "
                                               r"written.*arm cache"):
        reproduce(_request(data_dir, out, tree["repo"], publish=True))
    assert not out.exists()


def test_an_unchanged_tree_publishes(tree, tmp_path, data_dir):
    out = tmp_path / "out" / "a.json"
    artifact = reproduce(_request(data_dir, out, tree["repo"], publish=True))
    assert out.exists() and artifact.provenance.code_changed is None
    assert "code_changed" not in load_artifact(out).to_json_dict()["provenance"]


def test_an_unpublished_run_records_the_change(tree, tmp_path, data_dir):
    out = tmp_path / "out" / "a.json"
    tree["edit"] = "SCALE = 2\n"
    with pytest.warns(CodeChangedWarning):
        reproduce(_request(data_dir, out, tree["repo"], publish=False))
    recorded = load_artifact(out).provenance.code_changed
    assert recorded is not None and (recorded.commit_now, recorded.files) == (None, ["src/pkg/component.py"])


def test_the_command_line_refuses_in_one_line_and_warns_in_one_line(tree, tmp_path, data_dir, monkeypatch,
                                                                       capsys):
    from llmevo.experiments import sections

    monkeypatch.setattr(sections, "REPO_ROOT", tree["repo"])  # not read: the check below is the start's
    monkeypatch.setattr(sections, "check_publishable", lambda *args, **kwargs: None)  # this checkout's state
    out = tmp_path / "out" / "a.json"
    common = ["reproduce", "rope", "--steps", "2", "--seeds", "42", "--device", "cpu", "--threads", "1",
              "--no-report", "--no-arm-cache", "--data-dir", str(data_dir), "--out", str(out)]
    tree["edit"] = "SCALE = 2\n"
    before = files_under(tmp_path)
    assert run_cli([*common, "--publish"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: cannot publish") and "Traceback" not in err
    assert not out.exists() and files_under(tmp_path) == before
    tree["edit"] = "SCALE = 3\n"
    assert run_cli(common) == 0
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "src/pkg/component.py" in warned[0], err
    assert load_artifact(out).provenance.code_changed is not None
