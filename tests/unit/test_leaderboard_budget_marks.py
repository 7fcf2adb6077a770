"""What the leaderboard says beside each row (issue 48, items 5 and 6): each arm's tuning budget
in the full evidence table, the fragile and dirty-tree marks on LEADERBOARD.md, and the
ladders page's generated per-ladder section with what each rung 0 is to its evidence row."""

import json
from pathlib import Path

from llmevo.artifacts.ladder import load_ladder
from llmevo.artifacts.schema import load_artifact
from llmevo.reports.evidence import budget_cells, evidence_table
from llmevo.reports.ladder import ladder_details, same_runs
from llmevo.reports.leaderboard import DIRTY_MARK, _rung_zero, render_markdown

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _arm(runs, trained, cpu):
    return {"runs": runs, "trained": trained, "steps_per_run": 330, "cpu_seconds": cpu, "wall_seconds": cpu}


def test_the_budget_cells_give_each_arms_runs_and_cpu_seconds():
    row = {"tuning_budget": {"baseline": _arm(6, 0, 0.4), "method": _arm(10, 10, 436.2)}}
    # 10 runs against 6: (10 - 6) / 6 = 0.667, so the method had 67% more
    assert budget_cells(row) == ("6 / 10 (method +67%)", "0 (all cached) / 436")
    row = {"tuning_budget": {"baseline": _arm(19, 14, 315.0), "method": _arm(17, 17, 402.0)}}
    assert budget_cells(row) == ("19 / 17 (method -11%)", "315 (14 of 19 trained) / 402")
    assert budget_cells({"tuning_budget": {"baseline": _arm(6, 6, 1.0), "method": _arm(6, 6, 2.0)}})[0] == "6 / 6"
    assert budget_cells({"tuning_budget": {"baseline": None, "method": _arm(6, 6, 2.0)}}) == ("—", "—")
    assert budget_cells({}) == ("—", "—")  # an untuned row


def test_the_full_table_carries_the_budget_columns_of_the_published_rows():
    """Every published family member's cells are its artifact's ``tuning.arms.<arm>.budget``."""
    rows = json.loads((DOCS / "LEADERBOARD.json").read_text(encoding="utf-8"))["rows"]
    members = [row for row in rows if row["kind"] == "reproduction" and row.get("holm")]
    table = evidence_table(members).splitlines()
    assert table[0].endswith("| tuning runs, baseline / method | tuning core-s, baseline / method |")
    for row, line in zip(members, table[2:], strict=True):
        tuning = load_artifact(ROOT / row["source"]).tuning
        runs = [tuning.arms[arm].budget.runs for arm in ("baseline", "method")]
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        assert cells[-2].startswith(f"{runs[0]} / {runs[1]}")
        assert cells[-1].split(" / ")[1].split(" ")[0] == f"{tuning.arms['method'].budget.cpu_seconds:.0f}"


def test_the_leaderboard_marks_fragile_classes_and_dirty_artifacts():
    rows = json.loads((DOCS / "LEADERBOARD.json").read_text(encoding="utf-8"))["rows"]
    clean = next(row for row in rows if row["kind"] == "reproduction" and row.get("holm") and not row["fragile_seeds"])
    fragile = {**clean, "fragile_seeds": [43, 45], "code_dirty": True}
    page = render_markdown([clean, fragile], DOCS / "LEADERBOARD.md", ROOT)
    lines = [line for line in page.splitlines() if line.startswith(f"| {clean['name']} |")]
    reproductions, family = lines[:2], lines[2:]
    assert "(fragile" not in reproductions[0] and DIRTY_MARK not in reproductions[0]
    assert f"| {clean['classification']} (fragile: seed 43, 45) |" in reproductions[1]
    assert reproductions[1].endswith(f"){DIRTY_MARK} |")
    assert any("(fragile: seed 43, 45)" in line for line in family)
    # the published page: every artifact whose provenance has code_dirty: true is marked, and only those
    published = (DOCS / "LEADERBOARD.md").read_text(encoding="utf-8")
    dirty = [row["source"] for row in rows if row.get("code_dirty")]
    assert dirty and all(load_artifact(ROOT / source).provenance.code_dirty for source in dirty)
    for source in dirty:
        assert any(Path(source).name in line and line.endswith(f"{DIRTY_MARK} |")
                   for line in published.splitlines() if source.split("/")[-3] in line)
    assert published.count(DIRTY_MARK) == len(dirty)


def test_a_rung_zero_is_the_rows_runs_a_rerun_with_its_figures_or_its_own_run():
    def rung0(folder):
        return next(r for r in load_ladder(DOCS / "ladders" / folder / "ladder.json").rungs if r.rung == 0)

    def row(folder, name="public-quick-tuned-seeds42-46"):
        return load_artifact(DOCS / "reproductions" / folder / "metrics" / f"{name}.json")

    peri = row("2502.02732-peri_ln")
    assert same_runs(rung0("2502.02732-peri_ln"), peri) and _rung_zero(rung0("2502.02732-peri_ln"), peri) == "same runs"
    relu2 = row("2109.08668-relu2", "public-quick-tuned-vs-swiglu-seeds42-46")
    record = rung0("2109.08668-relu2-vs-swiglu")
    # a rerun: seed 42's baseline differs in the sixth decimal, the printed change does not
    assert record.baseline[0] != relu2.per_seed[0].baseline["lm_loss"]
    assert abs(record.baseline[0] - relu2.per_seed[0].baseline["lm_loss"]) < 1e-4
    assert not same_runs(record, relu2) and _rung_zero(record, relu2) == "same figures"
    muon = row("2502.16982-muon", "public-quick-tuned-space-seeds42-46")
    assert _rung_zero(rung0("2502.16982-muon"), muon) == "other figures"


def _ladder(name, rungs, top, quick, trend="stable"):
    return {"name": name, "against": None, "baseline": "llama_modern", "source": f"docs/ladders/0000.00000-{name}/ladder.json",
            "in_repository": True, "all_rungs": rungs, "trend": trend, "trend_df": len(rungs) - 2,
            "trend_interval": {"value": 1.0, "low": -1.0, "high": 3.0}, "ladder_class": "holds", "quick_row": quick,
            "per_rung": [{"rung": r, "parameters": 1000 * (r + 4), "delta_percent": -1.0, "ci_low": -2.0,
                          "ci_high": -0.5, "class": "better", "fitted": r != rungs[0] or top} for r in rungs]}


def test_the_ladder_details_count_what_the_ladders_hold():
    rows = [_ladder("a", [-3, -2, -1, 0], True, "same runs"), _ladder("b", [-3, -2, -1, 0, 1], True, "other figures"),
            _ladder("c", [-2, -1, 0], False, None, trend="unstable")]
    text = ladder_details(rows)
    lines = text.splitlines()
    assert lines[0].startswith("3 published ladders; the highest rung each reaches: 2 to rung 0; 1 to rung 1. "
                               "Of the 2 whose comparison has a row in the [evidence table](index.md), 1 have")
    assert "0 a rerun" in lines[0] and "and 1 a run of their own" in lines[0]
    assert lines[0].endswith("stable in 2, unstable in 1.")
    body = lines[4:]
    assert len(body) == 3 and "(3 df)" in body[1] and "(1 df)" in body[2]
    assert "rung -2 (2,000): -1.00 [-2.00, -0.50] better (left out of the fits)" in body[2]
    assert body[0].startswith("| a |") and "the quick row's runs" in body[0]
    assert "[report](../ladders/0000.00000-b/README.md)" in body[1]
    assert ladder_details([]) == "No ladder is published."
