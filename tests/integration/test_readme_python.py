"""The README's "Use it from Python" example runs as written, and says what the artifact says."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.slow


def python_example(text: str) -> str:
    """The first ```python block after the "Use it from Python" heading."""
    section = text.split("## Use it from Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "no python block in the README's 'Use it from Python' section"
    return match.group(1)


def test_python_example_is_found():
    code = python_example("# x\n## Use it from Python\ntext\n```python\nprint(1)\n```\n```python\nno\n```\n")
    assert code == "print(1)\n"


def test_readme_python_example_runs(tmp_path, data_dir, cache_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMEVO_DATA", str(data_dir))
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "llmevo").symlink_to(cache_dir)  # the example's default cache_dir
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(python_example(README.read_text(encoding="utf-8")), str(README), "exec"), {})
    written = json.loads((tmp_path / "runs/python-example/rope-seed42.json").read_text())
    lines = printed.getvalue().splitlines()
    assert lines[0] == written["verdict"]["summary"]
    assert lines[1] == (f"lm_loss: baseline {written['baseline']['lm_loss']:.4f}, "
                        f"rope {written['method']['lm_loss']:.4f}")
    assert written["evaluation_protocol"]["seeds"] == [42]
    assert written["provenance"]["command"].startswith("python: llmevo.experiments.reproduce('rope'")
    assert not (tmp_path / "runs/python-example/report").exists()  # report=False
