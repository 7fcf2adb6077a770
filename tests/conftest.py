"""Shared fixtures. Tests may read the environment; the library may not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared data directory: ``$LLMEVO_DATA``, else ``<repo>/../shared/data``."""
    return Path(os.environ.get("LLMEVO_DATA", REPO_ROOT.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def reference_dir(data_dir: Path) -> Path:
    """The reference artifacts: ``$LLMEVO_REFERENCE_ARTIFACTS``, else ``<data_dir>/../reference-artifacts``."""
    folder = Path(
        os.environ.get("LLMEVO_REFERENCE_ARTIFACTS", data_dir.parent / "reference-artifacts")
    )
    if not folder.is_dir():
        pytest.fail(f"reference artifacts not found at {folder}; set LLMEVO_REFERENCE_ARTIFACTS")
    return folder
