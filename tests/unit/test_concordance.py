"""The concordance with references at scale (eval/concordance.py): the shared scoring rule,
held by hand-worked cases from its text, and the development set's published figure,
reproduced from the published artifacts."""

import csv
from pathlib import Path

import pytest

from llmevo.errors import ConfigError
from llmevo.eval.concordance import (
    Measured,
    Reference,
    Transfer,
    arm_choice,
    calibration_sentence,
    concordance,
    load_references,
    regime_of,
    score,
)

ROOT = Path(__file__).resolve().parents[2]
DEV_SET = ROOT.parent / "shared" / "reference-at-scale" / "dev-set.tsv"

# (llmevo class, reference, llmevo's change %, score) worked by hand from the rule's text
# (../shared/reference-at-scale/README.md, "How a row is scored")
RULE_CASES = [
    ("better", "better", -10.0, "agree"),
    ("better", "same", -4.0, "disagree"),
    ("better", "worse", -2.0, "disagree"),
    ("worse", "worse", 3.0, "agree"),
    ("worse", "same", 2.0, "disagree"),
    ("worse", "better", 2.0, "disagree"),
    ("non-inferior", "same", -0.6, "agree"),
    ("non-inferior", "better", -1.3, "agree"),
    ("non-inferior", "worse", -1.3, "disagree"),
    ("inconclusive", "same", 0.4, "agree"),
    ("inconclusive", "same", -1.0, "agree"),  # |Δ| ≤ 1%: the margin's edge is inside
    ("inconclusive", "same", 1.01, "inconclusive"),  # just past it: a miss
    ("inconclusive", "same", -2.2, "inconclusive"),
    ("inconclusive", "better", -0.1, "inconclusive"),  # the reference decides: never agreement
    ("inconclusive", "worse", 0.0, "inconclusive"),
    (None, "better", None, None),  # no class: not scored
    ("no-op", "same", 0.0, None),
]


@pytest.mark.parametrize(("cls", "reference", "change", "expected"), RULE_CASES)
def test_the_shared_rule_scores_each_hand_worked_case(cls, reference, change, expected):
    assert score(cls, reference, change) == expected


def test_an_unknown_reference_direction_is_refused():
    with pytest.raises(ConfigError, match="better, same or worse"):
        score("better", "faster", -1.0)


def _family():
    from llmevo.promotion import family_entries, verdict_class
    return [(artifact, Measured(artifact.name, arm_choice(artifact.baseline.name), verdict_class(artifact),
                                artifact.headline_change.percent))
            for _, artifact in family_entries(ROOT / "docs")]


def test_the_development_set_reproduces_its_published_figure_from_the_artifacts():
    """The shared README's figure for the headline table at abc7dea, read from the published
    artifacts themselves (not the generated pages)."""
    found = concordance([measured for _, measured in _family()], load_references()).development()
    assert found.summary() == ("4 of 11 rows agree (36%); 'better' held 2 of 3, 'worse' held 0 of 2; "
                               "3 rows inconclusive where the reference decides")
    assert (found.decided.agreed, found.decided.total) == (4, 8)
    assert [row.method for row in (r.reference for r in found.rows if r.score == "agree")] == \
        ["muon", "soap", "geglu", "layernorm"]
    worse = found.transfer("worse")
    assert (worse.held, worse.of, worse.decision) == (0, 2, False)
    assert found.transfer("better").decision and found.transfer(None) is None


def test_the_references_file_holds_the_development_set_row_for_row():
    references = [ref for ref in load_references() if ref.development]
    assert len(references) == 11
    if not DEV_SET.is_file():
        pytest.skip("no ../shared/reference-at-scale/dev-set.tsv beside this checkout")
    with DEV_SET.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert [(row["method"], row["vs"], row["reference"], row["independent"] == "yes", row["strength"])
            for row in rows] == [(ref.method, ref.vs, ref.reference, ref.independent, ref.strength)
                                 for ref in references]


def test_a_references_file_is_checked(tmp_path):
    entry = ('[[reference]]\nmethod = "m"\nvs = "v"\nreference = "better"\ndelta_percent = {delta}\n'
             'independent = true\nstrength = "strong"\nsource = "s"\n')
    path = tmp_path / "references.toml"
    path.write_text(entry.format(delta=0.5), encoding="utf-8")
    with pytest.raises(ConfigError, match="better is a negative change"):
        load_references(path)
    path.write_text(entry.format(delta=-0.5) * 2, encoding="utf-8")
    with pytest.raises(ConfigError, match="m vs v given twice"):
        load_references(path)
    path.write_text(entry.format(delta=-0.5).replace('strength = "strong"', 'strength = "huge"'), encoding="utf-8")
    with pytest.raises(ConfigError, match="reference 1: strength"):
        load_references(path)
    path.write_text(entry.format(delta=-0.5), encoding="utf-8")
    assert load_references(path)[0].delta_percent == -0.5


def test_a_reference_without_a_row_is_listed_not_scored_and_ratios_need_two_numbers():
    references = [Reference(method="a", vs="b", reference="better", delta_percent=-1.0, independent=True,
                            strength="strong", source="s"),
                  Reference(method="c", vs="b", reference="same", independent=True, strength="strong", source="s")]
    found = concordance([Measured("a", "b", "better", -10.0), Measured("c", "b", "inconclusive", 0.5)], references)
    assert [row.score for row in found.rows] == ["agree", "agree"]
    assert [row.ratio for row in found.rows] == [10.0, None]
    alone = concordance([], references)
    assert [row.score for row in alone.rows] == [None, None] and alone.strict.total == 0


def test_the_regime_is_read_from_what_a_published_artifact_records():
    by_name = {artifact.name: artifact for artifact, _ in _family()}
    muon = regime_of(by_name["muon"])
    assert (muon.params, muon.tokens, muon.layers, muon.context, muon.tuned) == (139584, 1013760, 2, 64, "space")
    assert round(muon.tokens_per_parameter, 2) == 7.26
    assert muon.tuned_axes["method"][:2] == ["lr", "momentum"]
    rope = regime_of(by_name["rope"])
    assert rope.tuned == "lr" and rope.params == 143680 and rope.method_params == 139584
    assert rope.describe() == ("143,680 parameters (method 139,584), 7.1 tokens per parameter, 2 layers, "
                               "context 64, tuned: lr only")


def test_a_class_below_one_half_is_not_called_a_decision():
    low = calibration_sentence(None, Transfer("worse", 1, 8, 0.02, 0.47))
    assert "held in 1 of 8 (12%" in low and "not a decision" in low
    high = calibration_sentence(None, Transfer("better", 10, 13, 0.5, 0.92))
    assert "held in 10 of 13 (77%" in high and "decision" not in high
    assert "not measured for external scripts" in calibration_sentence(None, None, external=True)


def test_the_generated_sections_say_each_rows_score_and_mark_a_class_below_one_half():
    import json

    from llmevo.reports.concordance import concordance_lines, concordance_summary

    rows = json.loads((ROOT / "docs" / "LEADERBOARD.json").read_text(encoding="utf-8"))["rows"]
    summary = concordance_summary(rows)
    assert summary.startswith("**7 of 18 rows agree** (39% [20, 61])")
    assert "*worse* 1/6 (not a decision at scale)" in summary and "*better* 4/6," in summary
    assert "Agree: muon, soap, geglu vs swiglu, layernorm, schedule_free_adamw, peri_ln, gated_attn." in summary
    lines = concordance_lines(rows)
    assert "| worse | 6 | 1/6: 17% [3, 56] | **not a decision** at scale (below one half) |" in lines
    assert "| better | 6 | 4/6: 67% [30, 90] | may be read as a decision, at this rate |" in lines
    # the development set's own figure stays beside the whole set's
    assert any("Development set (11 rows): 4 of 11 rows agree (36%)" in line for line in lines)
    table = [line for line in lines if line.startswith("| muon (dev) | adamw |")]
    assert len(table) == 1 and "| better | -1.07 | 520M · 10B | tuned · 1 | yes | agree | 9.8× |" in table[0]
