"""``scripts/reference_rows.py``: the references beyond the development set, scored by the shared
rule on a folder of artifacts (two rows crafted from a published artifact), and on v3's
published rows (3 of the 7 agree, as the twenty-third session's LOG records)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("reference_rows", ROOT / "scripts" / "reference_rows.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["reference_rows"] = module
    spec.loader.exec_module(module)
    return module


def _row(template: dict, verdict: str, mean: float, low: float, high: float) -> dict:
    row = json.loads(json.dumps(template))
    row["verdict"]["classification"] = verdict
    row["statistics"][row["verdict"]["metric"]]["paired_relative_change_percent"].update(
        mean=mean, ci_low=low, ci_high=high)
    return row


def test_a_folder_is_scored_by_the_shared_rule(tmp_path):
    module = _script()
    template = json.loads(module.published("dyt").read_text())
    # dyt's reference is same: inconclusive within 1% agrees; sigmoid_attn's is same: better disagrees
    (tmp_path / "dyt.json").write_text(json.dumps(_row(template, "inconclusive", 0.6, -0.5, 1.7)))
    (tmp_path / "sigmoid_attn.json").write_text(json.dumps(_row(template, "better", -2.0, -3.0, -1.0)))
    scored = dict((line.split(":")[0], s) for line, s in module.rows(tmp_path))
    assert scored["dyt vs rmsnorm"] == "agree" and scored["sigmoid_attn vs mha"] == "disagree"
    assert sum(s is None for s in scored.values()) == len(scored) - 2  # the others: not run
    assert module.main([str(tmp_path / "none")]) == 2 and module.main([]) == 2


def test_the_published_rows_score_as_the_log_records():
    scores = [s for _, s in _script().rows(None)]
    assert len(scores) == 7 and scores.count("agree") == 3 and scores.count("disagree") == 4
