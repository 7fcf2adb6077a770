"""``reproduce --val-every N``: each report run's validation curve, in the artifact, the arm
cache, time to target, the report and the leaderboard.

At smoke the full evaluation reads the validation split's first 32 windows and the curve's
subset is all of them, so each curve's last point must be the run's validation ``lm_loss``
(an independent computation: ``evaluate_lm`` after training). The option changes no number of
the comparison; a cached run without the curve is a miss when the curve is asked for, and a
run with one serves a later run without it (which then records none).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cache_support import fresh_cache
from cli_runner import assert_refused

from llmevo.artifacts import load_artifact
from llmevo.errors import ConfigError
from llmevo.eval.time_to_target import artifact_time_to_target, describe
from llmevo.evolve.pipeline import EvolutionSettings
from llmevo.experiments import ReproductionRequest, reproduce
from llmevo.reports.leaderboard import build_leaderboard, scan_artifacts
from llmevo.reports.readme import write_report

SEEDS = [42, 43, 44]


def _reproduce(tmp_path: Path, data_dir: Path, cache: Path, name: str, **changes) -> dict:
    request = ReproductionRequest(name="rope", preset="smoke", seeds=SEEDS, threads=1, device="cpu",
                                  path="batched", data_dir=data_dir, cache_dir=cache, report=False,
                                  out=tmp_path / "runs" / f"{name}.json", **changes)
    return reproduce(request).to_json_dict()


def _cached_seeds(artifact: dict) -> list[int]:
    return sorted(seed for block in (artifact.get("cache") or {}).values() for seed in block["report_seeds"])


def test_the_curves_are_recorded_cached_and_read_by_time_to_target(tmp_path, data_dir, cache_dir):
    cache = fresh_cache(tmp_path, cache_dir)
    plain = _reproduce(tmp_path, data_dir, cache, "plain")
    curved = _reproduce(tmp_path, data_dir, cache, "curved", val_every=5)
    again = _reproduce(tmp_path, data_dir, cache, "again")

    assert "validation_curves" not in plain
    assert _cached_seeds(curved) == []  # entries without the curve: misses, trained again
    assert _cached_seeds(again) == sorted(SEEDS * 2)  # the curve's entries serve a run without it
    assert "validation_curves" not in again
    for label in ("baseline", "method"):  # the same numbers with and without the curve
        assert [row[label] for row in curved["per_seed"]] == [row[label] for row in plain["per_seed"]]
        assert curved["training_curves"][label] == plain["training_curves"][label]

    curves = curved["validation_curves"]
    assert (curves["every"], curves["windows"], curves["window_tokens"]) == (5, 32, 65)
    for label in ("baseline", "method"):
        assert curves[label]["steps"] == [5, 10, 12]  # every fifth step and the last (smoke: 12)
        for row in curved["per_seed"]:  # smoke's subset is its whole evaluation
            last = curves[label]["per_seed"][str(row["seed"])][-1]
            assert last == pytest.approx(row[label]["lm_loss"], rel=1e-6)

    loaded = load_artifact(tmp_path / "runs" / "curved.json")
    on_validation = artifact_time_to_target(loaded)
    assert on_validation["curve"] == "validation" and on_validation["every"] == 5
    assert artifact_time_to_target(load_artifact(tmp_path / "runs" / "plain.json"))["curve"] == "training"
    assert describe(on_validation).endswith("on validation")

    write_report(loaded, tmp_path / "runs" / "curved.json", tmp_path / "report")
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "Time to target:" in readme and "final validation loss" in readme
    assert "read on the validation curves: 32 fixed validation windows every 5 steps" in readme

    entries, _ = scan_artifacts([], references=[tmp_path / "runs"])
    rows = {Path(row["source"]).name: row for row in build_leaderboard(entries, tmp_path)}
    assert rows["curved.json"]["time_to_target"]["curve"] == "validation"
    assert rows["plain.json"]["time_to_target"]["curve"] == "training"


def test_val_every_is_refused_where_no_curve_is_read(capsys, workdir):
    assert_refused(["reproduce", "sft", "--val-every", "2"], "--val-every", capsys, workdir)
    assert_refused(["reproduce", "--all", "--only", "rope", "--preset", "smoke", "--val-every", "2"],
                   "--val-every applies to one comparison", capsys, workdir)
    assert_refused(["reproduce", "rope", "--val-every", "0"], "val_every", capsys, workdir)
    with pytest.raises(ConfigError, match="--val-every does not apply here"):
        EvolutionSettings(data_dir=workdir, val_every=2)


def test_a_shared_ladder_names_its_validation_curve(data_dir):
    """Two ladder workers asking for different curves write different artifacts, so they are
    two studies: the description the shared study is named and checked by holds val_every."""
    from llmevo.experiments.ladder import LadderRequest

    def description(**changes):
        return LadderRequest(name="rope", rungs=[-2, -1], data_dir=data_dir, **changes).description(None)

    assert "val_every" not in description()
    assert description(val_every=10)["val_every"] == 10
    assert description(val_every=10) != description(val_every=20)
