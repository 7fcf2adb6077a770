"""The lint is part of CI: ``.ci/run`` calls ``make test``, which runs ``ruff check src tests
scripts`` before the tests, and the ``dev`` extra (what ``make`` installs) brings ruff."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = "ruff check src tests scripts"


def test_ci_runs_make_test():
    # `make test`, or `make VENV=... test` in .ci/run's fresh clone (an environment built once)
    lines = [line.strip() for line in (REPO / ".ci/run").read_text().splitlines()]
    assert any(re.fullmatch(r"(time )?make( VENV=\S+)? test", line) for line in lines), lines


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_lints_before_the_tests():
    # -n prints the recipe without running it; -B: as on a fresh machine (venv recipe too)
    completed = subprocess.run(["make", "-n", "-B", "test", "VENV=.venv"], cwd=REPO, capture_output=True,
                               text=True, check=True, timeout=60)
    recipe = completed.stdout.splitlines()
    lint = [i for i, line in enumerate(recipe) if line.endswith(LINT)]
    tests = [i for i, line in enumerate(recipe) if re.search(r"python -m pytest\b", line)]
    install = [i for i, line in enumerate(recipe) if "pip install" in line and ".[dev]" in line]
    assert lint and tests and install, completed.stdout
    assert install[-1] < lint[0] < tests[0]  # ruff is installed, then lints, then the tests run


def test_the_dev_extra_installs_ruff():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = [re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower() for requirement in extras["dev"]]
    assert "ruff" in names
