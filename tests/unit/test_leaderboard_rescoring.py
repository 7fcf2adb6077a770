"""The leaderboard says what each arm's multi-seed re-scoring did (``ArmTuning.rescoring``):
how many settings were re-scored on how many seeds, and whether the choice moved from the
tuning seeds' best; nothing for a clear winner or an artifact written before the record.

The artifacts are hand-made from a published one: its tuning block is rewritten by hand
(one tuning seed, two confirmation seeds, so every re-scored setting is on 3 seeds)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from llmevo.artifacts.schema import validate_artifact
from llmevo.reports.evidence import evidence_table
from llmevo.reports.leaderboard import build_leaderboard

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "reproductions" / "2104.09864-rope" / "metrics" / "public-quick-tuned-seeds42-46.json"
NOISE = {"spread_percent": 1.42, "threshold_percent": 1.42, "source": "default", "seeds": 1,
         "why": "one tuning seed measures nothing: the declared default"}


@pytest.fixture(scope="module")
def published() -> dict:
    data = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    for arm in data["tuning"]["arms"].values():  # as an artifact from before the record (the row now has one)
        arm.pop("rescoring", None)
    assert data["tuning"]["seeds"] == [1000]
    return data


def _with_rescoring(data: dict, baseline: dict | None, method: dict | None) -> dict:
    changed = copy.deepcopy(data)
    for arm, record in (("baseline", baseline), ("method", method)):
        if record is not None:
            changed["tuning"]["arms"][arm]["rescoring"] = record
    return changed


def _row(data: dict, tmp_path: Path) -> dict:
    path = tmp_path / "docs" / "reproductions" / "x" / "metrics" / "a.json"
    artifact = validate_artifact(data, str(path))
    (row,) = build_leaderboard([(path, artifact)], tmp_path)
    return row


def _lrs(data: dict, arm: str) -> list[float]:
    return sorted(setting["lr"] for setting in data["tuning"]["arms"][arm]["settings"])


def test_a_moved_choice_and_a_kept_one_are_said_per_arm(published, tmp_path):
    chosen = {arm: published["tuning"]["arms"][arm]["chosen"]["lr"] for arm in ("baseline", "method")}
    other = {arm: next(lr for lr in _lrs(published, arm) if lr != chosen[arm]) for arm in chosen}
    # the method's tuning-seed best was another lr; the three-seed mean chose the recorded one
    method = {"noise": NOISE, "top": 3, "seeds": [1001, 1002],
              "settings": [{"lr": other["method"], "gap_percent": 0.0, "why": "best on the tuning seeds"},
                           {"lr": chosen["method"], "gap_percent": 0.8, "why": "within the seed noise"}],
              "next": None, "outcome": "chosen among the re-scored by the lowest mean over all tuning seeds"}
    # the baseline re-scored three settings and kept its tuning-seed best
    baseline = {"noise": NOISE, "top": 3, "seeds": [1001, 1002],
                "settings": [{"lr": chosen["baseline"], "gap_percent": 0.0, "why": "best on the tuning seeds"},
                             {"lr": _lrs(published, "baseline")[0], "gap_percent": 1.0, "why": "within"},
                             {"lr": _lrs(published, "baseline")[-1], "gap_percent": 1.3, "why": "within"}],
                "next": None, "outcome": "chosen among the re-scored by the lowest mean over all tuning seeds"}
    row = _row(_with_rescoring(published, baseline, method), tmp_path)
    assert row["rescoring"] == {
        "baseline": {"settings": 3, "seeds": 3, "key": "lr", "before": chosen["baseline"],
                     "chosen": chosen["baseline"], "changed": False},
        "method": {"settings": 2, "seeds": 3, "key": "lr", "before": other["method"],
                   "chosen": chosen["method"], "changed": True}}
    family_row = {**row, "holm": {"ci_low": -1.0, "ci_high": 1.0, "classification": "inconclusive",
                                  "family_size": 1}}
    cell = [cell.strip() for cell in evidence_table([family_row]).splitlines()[2].split("|")[1:-1]][6]
    assert f"{chosen['baseline']:.3g} (" in cell and "re-scored: 3 settings on 3 seeds, kept" in cell
    assert f"re-scored: 2 settings on 3 seeds, {other['method']:.3g} → {chosen['method']:.3g})" in cell
    assert "confirmed" not in cell  # every re-scored choice is confirmed: said once


def test_a_clear_winner_and_an_older_artifact_add_nothing(published, tmp_path):
    old = _row(published, tmp_path)
    assert "rescoring" not in old  # the published rows (and LEADERBOARD.json) stay as they were
    clear = {"noise": NOISE, "top": 3, "seeds": [],
             "settings": [{"lr": published["tuning"]["arms"]["baseline"]["chosen"]["lr"], "gap_percent": 0.0,
                           "why": "best on the tuning seeds"}],
             "next": {"lr": 0.001, "gap_percent": 5.0}, "outcome": "a clear winner: nothing re-scored"}
    row = _row(_with_rescoring(published, clear, None), tmp_path)
    assert row["rescoring"] == {"baseline": None, "method": None}
    holm = {"ci_low": -1.0, "ci_high": 1.0, "classification": "inconclusive", "family_size": 1}
    assert evidence_table([{**row, "holm": holm}]) == evidence_table([{**old, "holm": holm}])


def test_a_space_arm_names_trials(published, tmp_path):
    """Under space tuning the contenders are trials: the mark names the trial numbers."""
    row = _row(published, tmp_path)
    row["rescoring"] = {"baseline": None, "method": {"settings": 2, "seeds": 3, "key": "trial", "before": 4,
                                                     "chosen": 7, "changed": True}}
    row["holm"] = {"ci_low": -1.0, "ci_high": 1.0, "classification": "inconclusive", "family_size": 1}
    cell = [cell.strip() for cell in evidence_table([row]).splitlines()[2].split("|")[1:-1]][6]
    assert cell.endswith("(re-scored: 2 settings on 3 seeds, trial 4 → trial 7)")
