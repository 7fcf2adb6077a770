"""`llmevo reproduce --tune` end to end (smoke preset, few steps) and its bad input."""

from __future__ import annotations

import json

import pytest
from cli_runner import run_cli

from llmevo.artifacts import load_artifact


def test_tuned_smoke_reproduction_writes_tuning_block_class_and_plot(tmp_path, data_dir):
    out = tmp_path / "tuned.json"
    code = run_cli(["reproduce", "relu2", "--preset", "smoke", "--tune", "--seeds", "42,43,44",
                    "--steps", "3", "--tune-grid", "1e-3,3e-2,1e-2", "--device", "cpu",
                    "--data-dir", str(data_dir), "--out", str(out)])
    assert code == 0
    artifact = json.loads(out.read_text())
    load_artifact(out)  # the schema accepts the tuning block
    tuning = artifact["tuning"]
    assert tuning["grid"] == [1e-3, 1e-2, 3e-2] and tuning["seeds"] == [1000] and tuning["probe"] is True
    assert artifact["evaluation_protocol"]["seeds"] == [42, 43, 44]
    for label in ("baseline", "method"):
        block = tuning["arms"][label]
        means = {s["lr"]: s["mean"] for s in block["settings"]}
        assert len(means) >= 3
        # best by validation; after a confirmation at the stability edge, among the confirmed
        candidates = block.get("confirmed") or list(means)
        assert block["chosen"]["lr"] == min(candidates, key=means.get)
        assert artifact[label]["learning_rate"] == block["chosen"]["lr"]
        probe = block["probe"]  # the adequacy probe: two lattice steps above the grid's top
        below = max(lr for lr in means if lr < probe["top"])
        assert probe["lr"] == pytest.approx(probe["top"] * (probe["top"] / below) ** 2)
        assert probe["moved"] == any(s.get("probe") for s in block["settings"])
        assert (block["extended"] is not None) == (len(means) - (len(probe["added"]) + 1) * probe["moved"] == 4)
        budget = block["budget"]  # the arm's tuning budget, auditable beside the other's
        assert budget["runs"] == sum(len(s["validation"]) for s in block["settings"]) + (
            0 if probe["moved"] else len(probe["validation"]))
        assert budget["steps_per_run"] == 3 and budget["cpu_seconds"] >= 0
    assert artifact["verdict"]["classification"] in ("better", "non-inferior", "inconclusive", "worse")
    assert artifact["verdict"]["margin_percent"] == 1.0
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "## Tuning" in readme and (tmp_path / "report" / "plots" / "tuning_loss_vs_lr.png").exists()


@pytest.mark.parametrize("args, message", [
    (["--tune", "--tune-grid", "3e-3"], "at least 2"),
    (["--tune", "--tune-grid", "3e-3,0"], "positive"),
    (["--tune", "--tune-grid", "-1e-3,3e-3"], "positive"),
    (["--tune", "--tune-grid", "1e-3,abc"], "not a number"),
    (["--tune", "--seeds", "42,1000"], "disjoint seeds (e.g. --tune-seeds 2000)"),
    (["--tune", "--tune-seeds", "42", "--seeds", "42,43,44"], "disjoint"),
    (["--tune", "--tune-confirm", "-1"], "--tune-confirm"),
    (["--tune", "--tune-confirm", "99999999999"], "count 0 .. 16"),
    (["--tune-confirm", "2"], "--tune-confirm needs tuning"),
    (["--no-tune", "--tune-confirm", "0"], "--tune-confirm needs tuning"),
    (["--tune", "--tune-seeds", "abc"], "--tune-seeds: 'abc' is not an integer"),
    (["--tune", "--tune-seeds", "1000,1000"], "--tune-seeds: duplicate seeds"),
    (["--margin", "0"], "margin"),
    (["--margin", "nan"], "margin"),
    (["--no-tune", "--tune-grid", "1e-3,3e-3"], "--tune-grid needs tuning"),
])
def test_bad_tuning_input_is_one_line_and_exit_2(args, message, tmp_path, data_dir, capsys):
    out = tmp_path / "x.json"
    code = run_cli(["reproduce", "relu2", "--preset", "smoke", "--data-dir", str(data_dir),
                    "--out", str(out), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1
    assert not out.exists()
