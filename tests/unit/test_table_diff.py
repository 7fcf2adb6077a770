"""``scripts/table_diff.py``: a rebuilt table read against the published one, on a repository
made here (a published artifact committed, a checkout that rewrote it with another class)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACT = "docs/reproductions/2305.19466-nope/metrics/public-quick-tuned-seeds42-46.json"


def _script():
    spec = importlib.util.spec_from_file_location("table_diff", ROOT / "scripts" / "table_diff.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


def test_a_moved_class_is_named_and_the_core_hours_summed(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    (repo / ARTIFACT).parent.mkdir(parents=True)
    published = json.loads((ROOT / ARTIFACT).read_text())
    (repo / ARTIFACT).write_text(json.dumps(published))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "published")
    _git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "rebuilt"), "HEAD")
    rebuilt = json.loads(json.dumps(published))
    rebuilt["verdict"]["classification"] = "inconclusive"
    rebuilt["setup"]["cpu_seconds"] = 1800.0
    (tmp_path / "rebuilt" / ARTIFACT).write_text(json.dumps(rebuilt))
    module = _script()
    monkeypatch.setattr(module, "REPO", repo)
    assert module.main([str(tmp_path / "rebuilt"), "--markdown"]) == 0
    out = capsys.readouterr().out
    was = published["verdict"]["classification"]
    assert f"- 2305.19466-nope tuned-seeds42-46: {was} -> inconclusive" in out
    assert "1 artifacts rebuilt, 0.50 core-hours; 1 classes moved" in out
    change = published["statistics"]["lm_loss"]["paired_relative_change_percent"]["mean"]
    assert f"| {was} {change:+.2f} [" in out  # the published row, read at HEAD


def test_not_a_checkout_is_refused(tmp_path, capsys):
    assert _script().main([str(tmp_path)]) == 2
    assert "is not a git checkout" in capsys.readouterr().err
