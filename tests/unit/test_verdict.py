"""The verdict interface (experiments/verdict.py, `llmevo verdict`): the record's figures
against independent computations, the family reading against the leaderboard's, bad input."""

import json
from pathlib import Path

import pytest
from scipy import stats

from llmevo.experiments.verdict import VerdictRecord, VerdictService, verdict_record
from tests.cli_runner import assert_refused, run_cli

ROOT = Path(__file__).resolve().parents[2]
ROPE = ROOT / "docs" / "reproductions" / "2104.09864-rope" / "metrics" / "public-quick-tuned-seeds42-46.json"


@pytest.fixture(scope="module")
def service():
    return VerdictService(ROOT / "docs")


def test_a_published_row_reads_as_the_leaderboard_and_scipy_read_it(service):
    record = service.verdict(ROPE, budget_seconds=1000.0)
    artifact = json.loads(ROPE.read_text())
    changes = [100 * (row["method"]["lm_loss"] - row["baseline"]["lm_loss"]) / row["baseline"]["lm_loss"]
               for row in artifact["per_seed"]]
    test = stats.ttest_1samp(changes, 0.0)
    assert record.change_percent == pytest.approx(sum(changes) / len(changes), rel=1e-9)
    assert record.p_value == pytest.approx(test.pvalue, rel=1e-6)
    low, high = test.confidence_interval(0.95)
    assert (record.ci_low, record.ci_high) == (pytest.approx(low, rel=1e-6), pytest.approx(high, rel=1e-6))
    row = next(r for r in json.loads((ROOT / "docs" / "LEADERBOARD.json").read_text())["rows"]
               if r.get("holm") and r["source"].endswith("2104.09864-rope/metrics/public-quick-tuned-seeds42-46.json"))
    assert record.family.size == row["holm"]["family_size"] and record.family.replaces is None
    assert record.family.p_value == pytest.approx(row["holm"]["p_holm"], rel=1e-9)
    assert record.family.classification == row["holm"]["classification"] == "better"
    assert record.classification == "better" and record.formal and record.tuned and record.seeds == 5
    assert record.budget.runs == 2 * 5 + 2 * 5  # report runs, and a 5-point grid per arm on one tuning seed
    assert record.budget.left_seconds == pytest.approx(1000.0 - record.budget.wall_seconds)


def test_a_rerun_stands_in_for_its_published_row_and_an_old_artifact_gets_its_class(service):
    untuned = ROPE.with_name("public-quick-seeds42-44.json")
    record = service.verdict(untuned)
    assert record.family.size == 41 and record.family.replaces.endswith("public-quick-tuned-seeds42-46.json")
    standard = service.verdict(ROPE.with_name("public-standard-seeds42-44.json"))
    assert standard.family.size == 42 and standard.family.replaces is None  # another preset: a new row
    assert standard.classification == "better" and standard.no_verdict_reason is None


def test_an_external_experiment_and_a_record_without_an_interval(tmp_path):
    per_seed = [{"seed": s, "baseline": {"loss": b}, "method": {"loss": m}}
                for s, b, m in ((42, 2.0, 1.9), (43, 2.1, 2.0), (44, 2.05, 1.96))]
    changes = [100 * (r["method"]["loss"] - r["baseline"]["loss"]) / r["baseline"]["loss"] for r in per_seed]
    test = stats.ttest_1samp(changes, 0.0)
    low, high = test.confidence_interval(0.95)
    artifact = {
        "schema": "llmevo.external/1", "name": "tiny", "experiment": {"metric": "loss", "direction": "lower"},
        "protocol": {"margin_percent": 1.0, "tuning": None},
        "baseline": {"label": "norm=layernorm"}, "method": {"label": "norm=rmsnorm"},
        "runs": [{"cached": i < 2, "wall_s": 10.0} for i in range(6)], "per_seed": per_seed,
        "statistics": {"loss": {"paired_relative_change_percent": {
            "mean": sum(changes) / 3, "ci_low": low, "ci_high": high, "n": 3}}},
        "verdict": {"classification": "better", "noise_floor_percent": 2.4}, "verdict_withheld": None}
    path = tmp_path / "external.json"
    path.write_text(json.dumps(artifact))
    record = verdict_record(path, docs=None)
    assert record.kind == "external" and record.method == "norm=rmsnorm" and record.family is None
    assert record.p_value == pytest.approx(test.pvalue, rel=1e-6)
    # the 2 cached runs count at the time they took when they ran: the real cost of the evidence
    assert (record.budget.runs, record.budget.runs_cached, record.budget.wall_seconds) == (6, 2, 60.0)
    artifact |= {"per_seed": per_seed[:1], "statistics": None, "verdict": None,
                 "verdict_withheld": "2 of 3 report runs failed"}
    path.write_text(json.dumps(artifact))
    record = verdict_record(path, docs=None)
    assert record.classification is None and record.no_verdict_reason == "2 of 3 report runs failed"
    assert record.p_value is None and record.change_percent is None


def test_the_family_is_read_once_for_many_answers(monkeypatch):
    import llmevo.promotion as promotion

    calls = []
    real = promotion.family_entries
    monkeypatch.setattr(promotion, "family_entries", lambda docs: calls.append(docs) or real(docs))
    service = VerdictService(ROOT / "docs")
    records = service.many([ROPE, ROPE, ROPE.with_name("public-quick-seeds42-44.json")])
    assert len(calls) == 1 and len({r.family.p_value for r in records[:2]}) == 1


def test_the_command_prints_one_record_per_line_and_refuses_bad_input(capsys, tmp_path):
    assert run_cli(["verdict", str(ROPE), "--json", "--docs", str(ROOT / "docs")]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    record = VerdictRecord.model_validate_json(line)
    assert json.loads(line)["schema"] == "llmevo.verdict/1" and record.name == "rope"
    assert_refused(["verdict", str(tmp_path / "missing.json")], "no such artifact", capsys, tmp_path)
    (tmp_path / "bad.json").write_text("{")
    assert_refused(["verdict", str(tmp_path / "bad.json")], "not a readable JSON artifact", capsys, tmp_path)
    assert_refused(["verdict", str(ROPE), "--budget-seconds", "0"], "must be positive", capsys, tmp_path)
    assert_refused(["verdict", str(ROPE), "--docs", str(tmp_path / "nowhere")], "no such folder", capsys, tmp_path)
    assert_refused(["verdict", str(tmp_path)], "not a readable JSON artifact", capsys, tmp_path)
    # --docs with --no-family was silently ignored (issue 37): refused, naming both
    assert_refused(["verdict", str(ROPE), "--json", "--no-family", "--docs", str(tmp_path / "nowhere")],
                   "--docs names the published family, and --no-family reads none", capsys, tmp_path)
    assert run_cli(["verdict", str(ROPE), "--json", "--no-family"]) == 0
    assert json.loads(capsys.readouterr().out)["family"] is None
    # the declared cap shows in the table too (it was in the JSON record only)
    assert run_cli(["verdict", str(ROPE), "--no-family", "--budget-seconds", "100000"]) == 0
    assert capsys.readouterr().out.splitlines()[1].count("┳") == 10  # one column more: left of the cap


def test_a_record_says_its_regime_and_its_class_transfer_read_from_the_concordance(service):
    from llmevo.eval.concordance import concordance, load_references, measured_from_rows

    rows = json.loads((ROOT / "docs" / "LEADERBOARD.json").read_text())["rows"]
    found = concordance(measured_from_rows(rows), load_references())
    adam_mini = ROOT / "docs" / "reproductions" / "2406.16793-adam_mini" / "metrics" / \
        "public-quick-tuned-space-seeds42-46.json"
    record = service.verdict(adam_mini)
    worse = found.transfer("worse")
    assert record.classification == "worse" and record.transfer.class_ == "worse"
    assert (record.transfer.held, record.transfer.of, record.transfer.decision) == (worse.held, worse.of, False)
    assert record.regime.params == 139584 and record.regime.tuned == "space" and record.regime.layers == 2
    assert record.calibration.startswith("Measured at 139,584 parameters, 7.3 tokens per parameter, 2 layers, "
                                         "context 64, tuned: a declared space per arm")
    assert f"held in {worse.held} of {worse.of}" in record.calibration and "not a decision" in record.calibration
    data = json.loads(record.to_json())
    assert data["transfer"]["class"] == "worse" and data["regime"]["context"] == 64
    assert verdict_record(ROPE, docs=None).regime.tuned == "lr"  # --no-family: the checkout's table still


LADDER = ROOT / "docs" / "ladders" / "2104.09864-rope" / "ladder.json"


def test_a_ladder_reads_as_one_record_per_rung_labelled_by_its_size(service, tmp_path, capsys):
    ladder = json.loads(LADDER.read_text())
    records = service.records(LADDER)
    rungs = sorted(ladder["rungs"], key=lambda rung: rung["parameters"])
    assert [r.size for r in records] == [f"{rung['parameters']:,} parameters (rung {rung['rung']})" for rung in rungs]
    for record, rung in zip(records, rungs, strict=True):
        alone = service.verdict(LADDER.parent / rung["artifact"])
        assert record.model_copy(update={"size": None, "ladder": None}) == alone
        assert record.classification == rung["classification"] and record.ladder == str(LADDER)
        assert record.regime.params == rung["parameters"]
    with pytest.raises(Exception, match="a ladder file, one comparison per rung"):
        service.verdict(LADDER)
    # a rung artifact that is not the one the ladder file records is refused
    for name in [LADDER.name, *(rung["artifact"] for rung in rungs)]:
        (tmp_path / name).write_bytes((LADDER.parent / name).read_bytes())
    first = tmp_path / rungs[0]["artifact"]
    first.write_text(first.read_text() + "\n")
    assert_refused(["verdict", str(tmp_path / LADDER.name), "--no-family"], "sha256 differs", capsys, tmp_path)
    # the command labels each row with its size
    assert run_cli(["verdict", str(LADDER), "--no-family"]) == 0
    out = capsys.readouterr().out
    assert "size" in "".join(out.splitlines()[:6]) and "(rung 0)" in out
    assert run_cli(["verdict", str(LADDER), "--no-family", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [json.loads(line)["size"] for line in lines] == [r.size for r in records]


def test_an_external_ladder_reads_rung_by_rung(service):
    path = next((ROOT / "docs" / "external").glob("*/ladder-*/ladder.json"))
    ladder = json.loads(path.read_text())
    records = service.records(path)
    param = ladder["size"]["param"]
    assert [r.size for r in records] == [f"{param}={rung['size']}" for rung in ladder["rungs"]]
    assert all(r.kind == "external" and r.regime is None and r.transfer is None for r in records)
    assert "not measured for external scripts" in records[0].calibration
