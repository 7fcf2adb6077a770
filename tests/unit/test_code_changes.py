"""The write-time code check: a run's start state against real files and a real git HEAD.

A temporary git checkout holds a small package; ``capture_code_state`` reads it, the test
changes it the ways a long run's tree can change (an edit, a new module, a removed one, a
commit), and ``code_changes`` / ``collect_provenance`` must say so, or say nothing when the
bytes are the same again. Digests are checked against ``hashlib`` directly.
"""

from __future__ import annotations

import hashlib
import subprocess
import warnings
from pathlib import Path

import pytest

from llmevo.artifacts import collect_provenance
from llmevo.artifacts.provenance import capture_code_state, code_changes
from llmevo.artifacts.schema import Provenance
from llmevo.errors import CodeChangedError, CodeChangedWarning, ConfigError


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo), *args],
        check=True, capture_output=True, text=True,
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A committed checkout ``repo`` with a package ``repo/src/pkg`` of three modules."""
    repo = tmp_path / "repo"
    package = repo / "src" / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "runner.py").write_text("RUN = 1\n")
    (package / "sub" / "lazy.py").write_text("LAZY = 1\n")  # imported late (a worker, a lazy import)
    (repo / "README.md").write_text("readme\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "init")
    return repo, package


def _start(repo: Path, package: Path):
    runner = package / "runner.py"
    return capture_code_state([runner], runner, repo, package_root=package)


def _provenance(start, publish: bool, allow_dirty: bool | None = None) -> dict:
    return collect_provenance(command="c", code=start, dataset_fingerprint="f", accelerator="CPU",
                              artifact_path="docs/x.json", allow_dirty=allow_dirty, publish=publish)


def test_the_start_state_watches_every_source_file_of_the_package_by_its_bytes(checkout):
    repo, package = checkout
    start = _start(repo, package)
    expected = {str(path.resolve()): hashlib.sha256(path.read_bytes()).hexdigest()
                for path in (package / "__init__.py", package / "runner.py", package / "sub" / "lazy.py")}
    assert start.watched == expected
    assert start.commit == _git(repo, "rev-parse", "HEAD")
    assert code_changes(start) is None
    provenance = _provenance(start, publish=True)  # unchanged: published, nothing recorded
    assert "code_changed" not in provenance and provenance["code_commit"] == start.commit


def test_an_edit_to_a_module_outside_the_recorded_files_refuses_publishing(checkout):
    repo, package = checkout
    start = _start(repo, package)
    (package / "sub" / "lazy.py").write_text("LAZY = 2\n")  # not an implementation file: still read
    change = code_changes(start)
    assert change is not None and change.commit_now is None
    assert change.files == ["src/pkg/sub/lazy.py"]
    with pytest.raises(CodeChangedError, match=r"cannot publish docs/x.json: the code changed while the "
                                                r"run trained \(1 source file changed \(src/pkg/sub/lazy.py\)\)"):
        _provenance(start, publish=True, allow_dirty=False)
    assert issubclass(CodeChangedError, ConfigError)  # one line, exit status 2 at the command line


def test_the_same_bytes_again_are_no_change(checkout):
    repo, package = checkout
    start = _start(repo, package)
    lazy = package / "sub" / "lazy.py"
    lazy.write_text("LAZY = 2\n")
    lazy.write_text("LAZY = 1\n")  # edited and put back: a new mtime, the same bytes
    assert code_changes(start) is None


def test_a_new_and_a_removed_module_are_changes(checkout):
    repo, package = checkout
    start = _start(repo, package)
    (package / "sub" / "added.py").write_text("NEW = 1\n")
    (package / "sub" / "lazy.py").unlink()
    change = code_changes(start)
    assert change is not None and change.files == ["src/pkg/sub/added.py", "src/pkg/sub/lazy.py"]


def test_a_commit_during_the_run_refuses_publishing_even_with_no_source_change(checkout):
    repo, package = checkout
    start = _start(repo, package)
    (repo / "README.md").write_text("edited\n")
    _git(repo, "commit", "-qam", "docs only")
    head = _git(repo, "rev-parse", "HEAD")
    change = code_changes(start)
    assert change is not None and (change.commit_now, change.files) == (head, [])
    with pytest.raises(CodeChangedError, match=f"HEAD moved from {start.commit[:12]} to {head[:12]}"):
        _provenance(start, publish=True, allow_dirty=False)


def test_an_unpublished_run_records_the_change_and_warns(checkout):
    repo, package = checkout
    start = _start(repo, package)
    (package / "runner.py").write_text("RUN = 2\n")
    with pytest.warns(CodeChangedWarning, match="the code changed while the run trained"):
        provenance = _provenance(start, publish=False)
    assert provenance["code_changed"] == {"commit_now": None, "files": ["src/pkg/runner.py"]}
    # the recorded code is the start's, as before
    assert provenance["runner_sha256"] == hashlib.sha256(b"RUN = 1\n").hexdigest()
    block = Provenance.model_validate(provenance)  # the schema's optional block
    assert block.code_changed is not None and block.code_changed.files == ["src/pkg/runner.py"]
    # published with --allow-dirty: recorded as an unpublished run is, not refused
    with pytest.warns(CodeChangedWarning):
        assert _provenance(start, publish=True, allow_dirty=True)["code_changed"]["files"] == ["src/pkg/runner.py"]


def test_an_artifact_without_the_block_still_loads():
    block = Provenance.model_validate({"artifact_path": None, "dataset_fingerprint": "f", "code_commit": "a"})
    assert block.code_changed is None


def test_a_state_read_now_is_checked_against_a_start_given_as_since(checkout):
    """A pipeline that reads its code state at write time (the diagnostics) compares it with the
    state it read at the start."""
    repo, package = checkout
    start = _start(repo, package)
    runner = package / "runner.py"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # unchanged: no warning
        read_now = collect_provenance(command="c", implementation_files=[runner], runner_file=runner,
                                      repo_root=repo, dataset_fingerprint="f", accelerator="CPU",
                                      artifact_path=None, publish=True, allow_dirty=False, since=start)
    assert "code_changed" not in read_now
    (package / "__init__.py").write_text("X = 1\n")
    with pytest.raises(CodeChangedError, match="src/pkg/__init__.py"):
        collect_provenance(command="c", implementation_files=[runner], runner_file=runner, repo_root=repo,
                           dataset_fingerprint="f", accelerator="CPU", artifact_path=None, publish=True,
                           allow_dirty=False, since=start)
