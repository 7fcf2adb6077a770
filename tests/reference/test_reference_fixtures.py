"""The committed reference artifacts are the shared ones, byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reference-artifacts"


def test_reference_fixtures_match_the_shared_ones(data_dir: Path):
    shared = Path(os.environ.get("LLMEVO_REFERENCE_ARTIFACTS", data_dir.parent / "reference-artifacts"))
    if not shared.is_dir():
        pytest.skip(f"no shared reference artifacts at {shared} to compare with")
    committed = sorted(p.name for p in FIXTURES.glob("*.json"))
    assert committed == sorted(p.name for p in shared.glob("*.json"))
    for name in committed:
        assert (FIXTURES / name).read_bytes() == (shared / name).read_bytes(), name
