"""``llmevo components``: the table, the JSON listing and the artifact flag."""

from __future__ import annotations

import json
from pathlib import Path

from test_reports_writing import synthetic_artifact  # a valid reproduction artifact
from typer.testing import CliRunner

from llmevo.cli import app
from llmevo.errors import ArtifactError

RUNNER = CliRunner()


def test_json_lists_every_component_with_artifact_flag(tmp_path: Path) -> None:
    metrics = tmp_path / "reproductions" / "2108.12409-alibi" / "metrics"
    metrics.mkdir(parents=True)
    artifact = synthetic_artifact()
    artifact["manifest_ref"] = "reproduction:alibi"
    (metrics / "public-seed42.json").write_text(json.dumps(artifact))
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
    # which components can train as batched replicas (BLT cannot; the contract suite checks the rest)
    assert records[("architecture", "blt-bytes")]["batched_replicas"] is False
    assert records[("optimizer", "lion")]["batched_replicas"] is True
    assert records[("position", "rope")]["batched_replicas"] is True


def test_an_invalid_file_in_a_metrics_folder_is_an_error_not_an_artifact(tmp_path: Path) -> None:
    metrics = tmp_path / "reproductions" / "2108.12409-alibi" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "public-seed42.json").write_text("{}")  # used to count as a published artifact
    result = RUNNER.invoke(app, ["components", "--json", "--docs", str(tmp_path)])
    assert isinstance(result.exception, ArtifactError)
    assert "public-seed42.json: method: expected an object" in str(result.exception)


def test_table_shows_slots_names_and_papers(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["components", "--docs", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("value_residual", "2410.17897", "sandwich", "lion", "registered components"):
        assert text in result.output
