"""What the tuning-measurement scripts share (``fidelity_regret.py``, ``rescore_regret.py``,
``sampler_vs_sobol.py``): the selection-noise study's comparisons, comma lists of integers, the
resumable runs file (one JSON record a line) and the data and cache folders from the
environment (scripts, like the CLI, may read it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELECTION_NOISE = "rope,lion,peri_ln,soap,qk_norm"  # the ninth session's selection-noise study


def ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def done_records(path: Path) -> list[dict]:
    """The records a runs file holds so far ([] before the first)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def data_and_cache_dirs() -> tuple[Path, Path]:
    """``LLMEVO_DATA`` (default: ``../shared/data`` beside the checkout) and ``LLMEVO_CACHE``
    (default: ``.cache/llmevo``)."""
    return (Path(os.environ.get("LLMEVO_DATA", ROOT.parent / "shared" / "data")),
            Path(os.environ.get("LLMEVO_CACHE", ".cache/llmevo")))
