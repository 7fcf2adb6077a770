"""Provenance: every field filled, digests equal hashlib's, git state read correctly."""

from __future__ import annotations

import hashlib
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from llmevo.artifacts import collect_provenance, module_files, schema, sha256_file
from llmevo.artifacts.provenance import NOT_A_CHECKOUT, combined_sha256
from llmevo.artifacts.schema import MeanStd, Provenance, ReproductionArtifact, load_artifact
from llmevo.errors import ArtifactError, CodeChangedWarning

FIELDS = [
    "artifact_path",
    "code_commit",
    "code_dirty",
    "implementation_sha256",
    "implementation_files",
    "runner_sha256",
    "command",
    "accelerator",
    "library_versions",
    "numerics",
    "dataset_fingerprint",
    "created_at",
]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def _collect(repo: Path, files: list[Path], runner: Path) -> dict:
    return collect_provenance(
        command="llmevo reproduce rope --seeds 42",
        implementation_files=files,
        runner_file=runner,
        dataset_fingerprint="f" * 64,
        accelerator="CPU",
        artifact_path="runs/x/metrics.json",
        repo_root=repo,
    )


def test_sha256_file_matches_hashlib(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 9000  # > 1 MiB: crosses the read-chunk boundary
    path = tmp_path / "blob.bin"
    path.write_bytes(payload)
    assert sha256_file(path) == hashlib.sha256(payload).hexdigest()


def test_provenance_in_a_git_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    component, runner = repo / "src" / "rope.py", repo / "run.py"
    component.write_text("ROPE = 1\n")
    runner.write_text("print('run')\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "init")

    provenance = _collect(repo, [component, runner], runner)
    assert list(provenance) == FIELDS
    # the machine's numerics: the CPU (on Linux from /proc/cpuinfo) and the threads now
    assert set(provenance["numerics"]) == {"cpu", "cpu_capability", "machine", "threads",
                                           "float32_matmul_precision"}
    assert provenance["numerics"]["cpu"]["model"] and provenance["numerics"]["threads"] >= 1
    assert provenance["code_commit"] == _git(repo, "rev-parse", "HEAD")
    assert provenance["code_dirty"] is False
    expected_files = {
        "run.py": hashlib.sha256(runner.read_bytes()).hexdigest(),
        "src/rope.py": hashlib.sha256(component.read_bytes()).hexdigest(),
    }
    assert provenance["implementation_files"] == expected_files
    manual = hashlib.sha256(
        "".join(f"{p}\0{d}\n" for p, d in sorted(expected_files.items())).encode()
    ).hexdigest()
    assert provenance["implementation_sha256"] == manual == combined_sha256(expected_files)
    assert provenance["runner_sha256"] == expected_files["run.py"]
    assert set(provenance["library_versions"]) == {
        "python",
        "torch",
        "numpy",
        "tokenizers",
        "pydantic",
        "optuna",
        "llmevo",
    }
    assert provenance["library_versions"]["pydantic"].startswith("2.")
    assert datetime.fromisoformat(provenance["created_at"]).utcoffset() is not None
    Provenance.model_validate(provenance)  # fits the schema's provenance block

    component.write_text("ROPE = 2\n")
    dirty = _collect(repo, [component], runner)
    assert dirty["code_dirty"] is True
    assert dirty["implementation_sha256"] != provenance["implementation_sha256"]


def test_provenance_outside_a_checkout(tmp_path: Path) -> None:
    runner = tmp_path / "run.py"
    runner.write_text("pass\n")
    provenance = _collect(tmp_path, [], runner)
    assert provenance["code_commit"] == NOT_A_CHECKOUT
    assert provenance["code_dirty"] is None


def test_module_files_maps_and_deduplicates() -> None:
    schema_file = Path(schema.__file__).resolve()
    files = module_files(
        [ReproductionArtifact, load_artifact, schema, MeanStd(mean=1.0, std=0.0, n=1)]
    )
    assert files == [schema_file]
    assert module_files([pytest.raises, schema])[1] == schema_file
    with pytest.raises(ArtifactError, match="no Python source file"):
        module_files([len])


def test_publishing_refuses_a_dirty_tree_unless_allowed(tmp_path: Path) -> None:
    from llmevo.artifacts.provenance import check_publishable
    from llmevo.errors import ConfigError

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("A = 1\n")
    with pytest.raises(ConfigError, match="not a git checkout"):
        check_publishable(repo, allow_dirty=False)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "init")
    check_publishable(repo, allow_dirty=False)  # clean: fine
    (repo / "new.py").write_text("B = 2\n")  # an untracked file makes it dirty
    with pytest.raises(ConfigError, match="uncommitted changes"):
        check_publishable(repo, allow_dirty=False)
    check_publishable(repo, allow_dirty=True)
    recorded = collect_provenance(command="c", implementation_files=[], runner_file=repo / "a.py",
                                  dataset_fingerprint="f", accelerator="CPU", artifact_path=None,
                                  repo_root=repo, allow_dirty=True)
    assert recorded["code_dirty"] is True and recorded["allow_dirty"] is True
    assert Provenance.model_validate(recorded).allow_dirty is True
    assert "allow_dirty" not in _collect(repo, [], repo / "a.py")  # unpublished: not recorded


def test_code_state_is_the_one_captured_when_the_run_started(tmp_path: Path) -> None:
    """An edit (or commit) made while a long run trains must not reach its provenance."""
    from llmevo.artifacts.provenance import capture_code_state

    repo = tmp_path / "repo"
    repo.mkdir()
    component = repo / "rope.py"
    component.write_text("ROPE = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "init")
    started = capture_code_state([component], component, repo)
    commit = _git(repo, "rev-parse", "HEAD")
    component.write_text("ROPE = 2\n")  # edited and committed during training
    _git(repo, "commit", "-qam", "edit")
    with pytest.warns(CodeChangedWarning):  # and says so (tests/unit/test_code_changes.py)
        provenance = collect_provenance(command="c", code=started, dataset_fingerprint="f",
                                        accelerator="CPU", artifact_path=None)
    assert provenance["code_commit"] == commit and provenance["code_dirty"] is False
    assert provenance["code_changed"]["files"] == ["rope.py"]
    assert provenance["implementation_files"] == {"rope.py": hashlib.sha256(b"ROPE = 1\n").hexdigest()}
    assert _collect(repo, [component], component)["code_commit"] != commit


def test_a_publications_own_output_folder_does_not_make_the_tree_dirty(tmp_path: Path) -> None:
    """``evolve --explain --publish`` adds to the study report the search just wrote there."""
    from llmevo.artifacts.provenance import check_publishable
    from llmevo.errors import ConfigError

    repo = tmp_path / "repo"
    (repo / "docs" / "evolution" / "study").mkdir(parents=True)
    (repo / "a.py").write_text("A = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "a.py")
    _git(repo, "commit", "-q", "-m", "init")
    own = repo / "docs" / "evolution" / "study"
    (own / "summary.json").write_text("{}\n")  # untracked, inside the publication's own folder
    check_publishable(repo, allow_dirty=False, own_output=own)
    with pytest.raises(ConfigError, match="uncommitted changes"):  # without it: dirty
        check_publishable(repo, allow_dirty=False)
    with pytest.raises(ConfigError, match="uncommitted changes"):  # a folder outside the checkout
        check_publishable(repo, allow_dirty=False, own_output=tmp_path / "elsewhere")
    (repo / "a.py").write_text("A = 2\n")  # a code edit still counts
    with pytest.raises(ConfigError, match="uncommitted changes"):
        check_publishable(repo, allow_dirty=False, own_output=own)


def test_the_imports_memo_gives_what_parsing_gives(tmp_path: Path, monkeypatch) -> None:
    """The on-disk memo of parsed import lists: a pipeline's closure is the same with it cold,
    warm and off; a warm closure parses nothing; changed bytes, a package flag or a broken
    memo file are misses, never another answer."""
    import ast
    import json

    from llmevo.artifacts import provenance

    def closure(memo: str) -> list[str]:
        monkeypatch.setattr(provenance, "_memo_path", None if memo == "off" else Path(memo))
        monkeypatch.setattr(provenance, "_memo", None)
        monkeypatch.setattr(provenance, "_parsed", {})
        return provenance.pipeline_modules("llmevo.experiments.reproduction", follow_catalog=True)

    memo = tmp_path / "imports.json"
    parsed = closure("off")
    assert not memo.exists()
    assert closure(str(memo)) == parsed and len(json.loads(memo.read_text())) >= len(parsed) - 5
    real_parse = ast.parse
    parses = []
    monkeypatch.setattr(ast, "parse", lambda *a, **k: parses.append(a) or real_parse(*a, **k))
    assert closure(str(memo)) == parsed and parses == []
    package = tmp_path / "pkg" / "llmevo"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "__init__.py").write_text("from . import leaf\n")
    (package / "sub" / "leaf.py").write_text("import os\n")
    monkeypatch.setattr(provenance, "_parsed", {})
    assert provenance.pipeline_modules("llmevo.sub", package_root=package) == ["llmevo.sub", "llmevo.sub.leaf"]
    (package / "sub" / "leaf.py").write_text("from llmevo.sub import other\n")
    (package / "sub" / "other.py").write_text("")
    monkeypatch.setattr(provenance, "_parsed", {})
    assert provenance.pipeline_modules("llmevo.sub", package_root=package) == [
        "llmevo.sub", "llmevo.sub.leaf", "llmevo.sub.other"]
    memo.write_text("{not json")
    parses.clear()
    assert closure(str(memo)) == parsed and parses


def test_the_closure_finds_module_files_from_folder_listings_as_module_path_does(tmp_path: Path) -> None:
    """``pipeline_modules`` looks names up in folder listings; ``module_path`` stats the two
    candidate files. The same answer for every name the whole closure's files import (modules,
    packages, classes imported from them), for a package and a module of the same name, and
    for a folder named like a module file."""
    from llmevo.artifacts import provenance

    names = set()
    for name in provenance.pipeline_modules("llmevo.experiments.reproduction", follow_catalog=True):
        names |= provenance._imports(name, provenance.module_path(name)) | {name}
    package = tmp_path / "pkg" / "llmevo"
    (package / "both").mkdir(parents=True)
    (package / "both" / "__init__.py").write_text("")
    (package / "both.py").write_text("")
    (package / "fake.py").mkdir()
    (package / "nofile").mkdir()
    listings: dict = {}
    for root, candidates in ((provenance.PACKAGE_ROOT, sorted(names)),
                             (package, ["llmevo.both", "llmevo.fake", "llmevo.nofile", "llmevo.none"])):
        for name in candidates:
            assert provenance._listed_module_path(name, root, listings) == provenance.module_path(name, root), name
    assert len(names) > 300  # the control: the walk saw the closure
