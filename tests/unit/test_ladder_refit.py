"""A published ladder file refitted from its stored per-seed values (experiments.ladder.refit_ladder,
`llmevo report --refit`): the rung-level trend, leave-one-rung-out, the degenerate one-head rung."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmevo.artifacts.ladder import load_ladder
from llmevo.cli import main
from llmevo.errors import ConfigError
from llmevo.eval import scaling
from llmevo.experiments.ladder import refit_ladder, rung_result
from llmevo.reports.ladder import ladder_readme, ladder_row, ladder_section

LADDERS = Path(__file__).resolve().parents[2] / "docs" / "ladders"


NEW_FIELDS = ("slots", "trend_fit", "degenerate", "lr_transfer")


@pytest.fixture
def published(tmp_path):
    """A published ladder folder copied, its ladder file as written before the rung-level
    trend (the new fields removed, the trend the seed bootstrap's class)."""
    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(LADDERS / name, target)
        path = target / "ladder.json"
        data = json.loads(path.read_text())
        if data.get("trend_fit"):
            data["trend"] = data["trend_fit"]["seed_only_trend"]
        for key in NEW_FIELDS:
            data.pop(key, None)
        data["provenance"].pop("refit", None)
        for rung in data["rungs"]:
            rung.pop("n_heads", None)
        path.write_text(json.dumps(data))
        return path
    return copy


def test_refitting_a_refitted_file_changes_nothing(published):
    path = published("2104.09864-rope")
    once = refit_ladder(load_ladder(path), path.parent)
    path.write_text(json.dumps(once.to_json_dict()))
    assert refit_ladder(load_ladder(path), path.parent).to_json_dict() == once.to_json_dict()


def test_a_position_ladder_leaves_its_one_head_rung_out(published):
    path = published("2104.09864-rope")
    ladder = load_ladder(path)
    refit = refit_ladder(ladder, path.parent)
    assert refit.slots == ["position"] and [r.n_heads for r in refit.rungs] == [1, 2, 3, 4]
    assert refit.degenerate is not None and refit.degenerate.rungs == [-3] and refit.degenerate.excluded
    assert refit.trend_fit is not None and refit.trend_fit.rungs == [-2, -1, 0] and refit.trend_fit.df == 1
    expected = scaling.trend_fit([rung_result(r) for r in ladder.rungs[1:]])
    assert refit.trend_fit.slope.value == pytest.approx(expected.slope, rel=1e-12)
    assert [t["rung"] for t in refit.transfers] == [-1]  # the pair from rung -3 is gone
    assert len(refit.rungs) == 4  # the table keeps it
    assert "degenerate rung(s) -3" in ladder_readme(refit) and "| -3 (degenerate) |" in ladder_readme(refit)
    kept = refit_ladder(ladder, path.parent, include_degenerate=True)
    assert kept.trend_fit.rungs == [-3, -2, -1, 0] and not kept.degenerate.excluded
    # the figure for rope over all four rungs: about [-13.8, +2.9]
    assert kept.trend_fit.slope.low == pytest.approx(-13.2, abs=0.1)
    assert kept.trend_fit.slope.high == pytest.approx(2.5, abs=0.1)
    assert kept.trend_fit.seed_only_trend == "growing" and kept.trend == "stable"


def test_an_optimizer_ladder_keeps_every_rung_and_its_stored_fits(published):
    path = published("2502.16982-muon")
    ladder = load_ladder(path)
    refit = refit_ladder(ladder, path.parent)
    assert refit.slots == ["optimizer"] and refit.degenerate is None
    assert refit.fits == ladder.fits and refit.gap_slope_per_decade == ladder.gap_slope_per_decade
    assert refit.compute_multiplier == ladder.compute_multiplier and refit.transfers == ladder.transfers
    # without rung -3 the slope turns positive: the trend is unstable
    loro = {r.left_out: r for r in refit.trend_fit.leave_one_out}
    assert refit.trend_fit.slope.value < 0 < loro[-3].slope.value and loro[-3].sign_flip
    assert refit.trend == "unstable" and refit.trend_fit.unstable


def test_a_genome_ladder_reads_its_slots_from_the_rungs_genomes(published):
    path = published("evolve-quick-fair-champion")
    refit = refit_ladder(load_ladder(path), path.parent)
    assert "position" in refit.slots and "optimizer" in refit.slots and "data" not in refit.slots
    assert refit.degenerate.rungs == [-3]


def test_refit_checks_the_rung_artifacts_it_reads(published):
    path = published("2302.05442-qk_norm")
    artifact = path.parent / "rung0.json"
    data = json.loads(artifact.read_text())
    data["provenance"]["command"] = "edited"
    artifact.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="sha256"):
        refit_ladder(load_ladder(path), path.parent)
    artifact.unlink()
    with pytest.raises(ConfigError, match="missing"):
        refit_ladder(load_ladder(path), path.parent)


def test_report_refit_writes_the_ladder_file_back_and_it_loads(published, capsys):
    path = published("2410.17897-value_residual")
    before = load_ladder(path)
    assert before.trend_fit is None  # written before the rung-level trend
    main(["report", str(path), "--refit"])
    after = load_ladder(path)
    assert after.trend_fit is not None and after.provenance["refit"]["rule"] == scaling.TREND_METHOD
    assert [r.baseline for r in after.rungs] == [r.baseline for r in before.rungs]
    assert "leave one rung out" in (path.parent / "README.md").read_text()
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(path), "--include-degenerate"])
    assert exit_info.value.code == 2 and "--refit only" in capsys.readouterr().err


def test_the_leaderboard_section_reads_the_trend_of_record(published):
    rows = []
    for name in ("2104.09864-rope", "2502.16982-muon"):
        path = published(name)
        refit = refit_ladder(load_ladder(path), path.parent)
        rows.append(ladder_row(path, refit, "docs"))
    rope, muon = rows
    assert rope["rungs"] == [-2, -1, 0] and rope["degenerate_rungs"] == [-3] and rope["trend_rule"] == "rung-level"
    assert muon["leave_one_out_flips"] is True
    text = "\n".join(ladder_section(rows, lambda row: row["name"]))
    assert "(rung -3 left out)" in text and "unstable" in text



def test_a_refit_reads_the_lr_drift_from_the_stored_rungs(published):
    """Muon's ladder: baseline 9e-3, 9e-3, 3e-3, 3e-3 (lattice steps 2, 2, 0, 0 of 3e-3·3^(k/2)),
    Muon 1.56e-2 ×2, 4.68e-2, 2.7e-2 (steps 3, 3, 5, 4); the rule's 4- and 8-point grids at rungs
    -1 and 0 against the full grid's 5, weighted by those rungs' 6ND compute (by hand)."""
    path = published("2502.16982-muon")
    record = refit_ladder(load_ladder(path), path.parent).lr_transfer
    assert record.parametrization == "standard"
    assert record.steps == {"baseline": [2, 2, 0, 0], "method": [3, 3, 5, 4]}
    assert record.drift_steps == {"baseline": 2, "method": 2}
    assert record.ruled_rungs == [-1, 0]
    spent, full = 4 * 312311808000.0 + 8 * 849028055040.0, 5 * (312311808000.0 + 849028055040.0)
    assert record.saved_share == pytest.approx(1 - spent / full)
    assert record.saved_share < 0  # the arms predicted 5 steps apart at the top: an 8-point grid, more than 5
