"""A pytest that a test starts (``components check`` runs the contract suite on this tree) must
not wipe the session's arm cache: under pytest-xdist that wipe landed between the two runs of
another worker's test, which then retrained what it expected to load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_nested_pytest_leaves_the_session_arm_cache_alone(cache_dir):
    marker = cache_dir / "arms" / "nested-pytest-marker"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("kept")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
             "tests/contract"], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        assert marker.read_text() == "kept"
    finally:
        marker.unlink(missing_ok=True)
