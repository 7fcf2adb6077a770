"""``llmevo components``: the table, the JSON listing and the artifact flag."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from llmevo.cli import app

RUNNER = CliRunner()


def test_json_lists_every_component_with_artifact_flag(tmp_path: Path) -> None:
    metrics = tmp_path / "reproductions" / "2108.12409-alibi" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "public-seed42.json").write_text('{"manifest_ref": "reproduction:alibi"}')
    (tmp_path / "reproductions" / "2305.19466-nope" / "metrics").mkdir(parents=True)  # empty

    result = RUNNER.invoke(app, ["components", "--json", "--docs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    records = {(r["slot"], r["name"]): r for r in json.loads(result.output)}
    assert records[("position", "alibi")]["has_artifact"] is True
    assert records[("position", "nope")]["has_artifact"] is False
    assert records[("position", "alibi")]["tier_reached"] == "l2_public_dataset"  # from the file
    assert records[("position", "nope")]["tier_reached"] == "none"
    assert "evaluation_tier" not in records[("position", "alibi")]  # not a manifest flag
    assert records[("optimizer", "muon")]["paper"]["arxiv_id"] == "2502.16982"
    assert records[("optimizer", "muon")]["ablation"] == "adamw"
    assert {"position", "attention", "feedforward", "norm", "block", "optimizer"} <= {
        slot for slot, _ in records
    }


def test_table_shows_slots_names_and_papers(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["components", "--docs", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("value_residual", "2410.17897", "sandwich", "lion", "registered components"):
        assert text in result.output
