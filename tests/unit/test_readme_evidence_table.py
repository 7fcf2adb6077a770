"""The generated evidence tables: the README's headline table and the results page's full
table (reports/evidence.py), and their regeneration (reports/leaderboard.py regenerate)."""


from llmevo.reports.evidence import (
    EVIDENCE_END,
    EVIDENCE_START,
    HEADLINE_END,
    HEADLINE_START,
    evidence_table,
    headline_table,
    replace_generated,
)


def _row(name, holm=True, against=None, **extra):
    row = {"kind": "reproduction", "name": name, "against": against, "metric": "lm_loss",
           "baseline": "llama_modern[position=learned]", "baseline_value": 4.2874, "method_value": 3.7696,
           "change_percent": -12.0557, "ci_low": -14.2053, "ci_high": -9.9060, "classification": "better",
           "narrow_advantage": False,
           "chosen_lr": {"baseline": {"lr": 0.00173, "extended": None, "on_edge": False, "confirmed": False},
                         "method": {"lr": 0.0156, "extended": "up", "on_edge": True, "confirmed": True}},
           "holm": {"ci_low": -16.9, "ci_high": -7.21, "classification": "better", "family_size": 2} if holm else None}
    return row | extra


def test_only_family_members_are_rows_with_their_holm_class_and_ladder():
    ladder = {"name": "rope", "against": None, "ladder_class": "holds", "trend": "shrinking", "rungs": [-2, 1],
              "bottom": {"delta_percent": -2.76}, "top": {"delta_percent": -8.1}}
    table = evidence_table([_row("rope"), _row("untuned", holm=False)], [ladder]).splitlines()
    assert len(table) == 3 and "(2 comparisons)" in table[0]
    cells = [cell.strip() for cell in table[2].split("|")[1:-1]]
    assert cells[:5] == ["rope", "learned", "4.287 → 3.770", "-12.06 [-14.21, -9.91]", "better"]
    assert cells[5] == "[-16.90, -7.21] better"
    assert cells[6] == "0.00173 / 0.0156 (grid extended up, on the edge, confirmed)"
    assert cells[7] == "—"  # no time to target in the row: curves not comparable (or absent)
    assert cells[8] == "holds, gap shrinking (rungs -2..1: -2.8% → -8.1%)"


def test_the_table_replaces_only_what_lies_between_the_markers():
    readme = f"intro\n{EVIDENCE_START}\nold table\n{EVIDENCE_END}\noutro\n"
    rows = [_row("rope")]
    assert replace_generated(readme, rows) == (f"intro\n{EVIDENCE_START}\n{evidence_table(rows)}\n{EVIDENCE_END}"
                                               "\noutro\n")
    assert replace_generated("no markers here", rows) is None


def test_the_headline_table_orders_by_the_adjusted_class_then_the_change():
    worse = _row("dyt", change_percent=30.0, classification="worse",
                 holm={"ci_low": 1.0, "ci_high": 9.0, "classification": "worse", "family_size": 2})
    small = _row("qk_norm", change_percent=-0.5, classification="non-inferior",
                 holm={"ci_low": -2.0, "ci_high": 0.9, "classification": "non-inferior", "family_size": 2})
    ladder = {"name": "rope", "against": None, "ladder_class": "emerges", "trend": "stable", "rungs": [-2, 0],
              "bottom": {"delta_percent": -2.76}, "top": {"delta_percent": -12.1}}
    table = headline_table([worse, small, _row("rope"), _row("untuned", holm=False)], [ladder]).splitlines()
    assert "after Holm (2)" in table[0] and len(table) == 5
    names = [line.split("|")[1].strip() for line in table[2:]]
    assert names == ["rope", "qk_norm", "dyt"]
    assert [cell.strip() for cell in table[2].split("|")[1:-1]] == [
        "rope", "learned", "-12.06 [-14.21, -9.91]", "better", "better", "emerges"]


def test_each_marker_pair_gets_its_own_table():
    rows = [_row("rope")]
    text = f"a\n{HEADLINE_START}\nold\n{HEADLINE_END}\nb\n{EVIDENCE_START}\nold\n{EVIDENCE_END}\n"
    new = replace_generated(text, rows)
    assert new == (f"a\n{HEADLINE_START}\n{headline_table(rows)}\n{HEADLINE_END}\nb\n"
                   f"{EVIDENCE_START}\n{evidence_table(rows)}\n{EVIDENCE_END}\n")
    assert replace_generated("no markers", rows) is None


def test_the_committed_tables_are_the_ones_the_committed_artifacts_give():
    """A stale or emptied table (one was committed once, with 0 comparisons) fails here:
    `llmevo leaderboard` regenerates both from docs/."""
    from pathlib import Path

    from llmevo.reports.decisions import DECISIONS_START, published_decision_accuracy
    from llmevo.reports.ladder import scan_ladders
    from llmevo.reports.leaderboard import (
        LADDERS_PAGE,
        RESULTS_PAGE,
        build_leaderboard,
        ladder_rows,
        scan_artifacts,
    )

    root = Path(__file__).resolve().parents[2]
    entries, _ = scan_artifacts([root / "docs"], references=[])
    rows = build_leaderboard(entries, root)
    ladders = ladder_rows(scan_ladders([root / "docs"]), root, entries)
    accuracy = published_decision_accuracy([root / "docs"], root)
    for page in (root / "README.md", root / RESULTS_PAGE, root / LADDERS_PAGE):
        text = page.read_text(encoding="utf-8")
        assert replace_generated(text, rows, ladders, accuracy) == text, \
            f"run `llmevo leaderboard` and commit {page.name}"
        assert "(0 comparisons)" not in text and "after Holm (0)" not in text
    assert HEADLINE_START in (root / "README.md").read_text(encoding="utf-8")
    assert EVIDENCE_START in (root / RESULTS_PAGE).read_text(encoding="utf-8")
    assert DECISIONS_START in (root / LADDERS_PAGE).read_text(encoding="utf-8")  # the README links to it


def test_the_committed_leaderboard_pair_is_one_write():
    """The leaderboard's page and JSON are written as a pair, the JSON naming the page's sha256
    (``write_pair``); the committed pair is checked the way a reader checks it (``check_pair``),
    so a pair torn between its two renames, or a page edited by hand, fails here."""
    from pathlib import Path

    from llmevo.reports.leaderboard import check_pair

    docs = Path(__file__).resolve().parents[2] / "docs"
    check_pair(docs / "LEADERBOARD.md", docs / "LEADERBOARD.json")
