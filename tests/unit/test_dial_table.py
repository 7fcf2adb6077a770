"""``scripts/dial_table.py``: the shared scoring rule, and protocol v3's published development rows
scored as the reference set's README states them (4 of 11 agree; *better* held 2 of 3, *worse*
0 of 2; 3 rows inconclusive where the reference decides)."""

from __future__ import annotations

import functools
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the development set's rows (../shared/reference-at-scale/dev-set.tsv), the columns the scorer reads
DEV_SET = """method\tvs\treference\tindependent\tstrength\tsource
muon\tadamw\tbetter\tyes\tstrong\t2509.02046: -1.07% at 520M, -0.62% at 1.2B
soap\tadamw\tbetter\tyes\tstrong\tsame source (soape): -0.81% at 520M, -0.22% at 1.2B
cautious_adamw\tadamw\tsame\tyes\tstrong\tsame source (cautious): +0.09% at 130M, -0.12% at 520M
adam_mini\tadamw\tsame\tyes\tmedium\tsame source (mini): +0.37% at 130M, +0.25% at 520M
lion\tadamw\tsame\tyes\tmedium\tsame source (lion): +0.57% at 130M, +0.11% at 520M
rezero\tpre_norm\tworse\tyes\tstrong\tNarang Table 1: 2.262+-0.003 vs 2.182+-0.005 (+3.7%), final +5.5%
geglu\tswiglu\tsame\tno\tstrong\tNarang Table 1: +0.14% early, +0.17% final
layernorm\trmsnorm\tsame\tyes\tstrong\tNarang Table 1: +0.69% early (2.182 vs 2.167), +0.93% final
geglu\tgelu\tbetter\tno\tstrong\tNarang Table 1: -2.25% early, -2.50% final
gelu\tswiglu\tworse\tyes\tstrong\tNarang Table 1: +2.44% early (2.179 vs 2.127, both +-0.003), +2.74% final
moe\tswiglu\tbetter\tyes\tmedium\tNarang Table 1 MoE/Switch at equal FLOPs -1.6..-4.4%; OLMoE
"""


@functools.cache
def _script():
    spec = importlib.util.spec_from_file_location("dial_table", ROOT / "scripts" / "dial_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["dial_table"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("verdict, reference, change, expected", [
    ("better", "better", -3.0, "agree"), ("better", "same", -3.0, "disagree"),
    ("worse", "worse", 2.0, "agree"), ("worse", "same", 2.0, "disagree"),
    ("non-inferior", "same", -0.5, "agree"), ("non-inferior", "better", -0.5, "agree"),
    ("non-inferior", "worse", -0.5, "disagree"),
    ("inconclusive", "same", 1.0, "agree"), ("inconclusive", "same", -1.01, "inconclusive"),
    ("inconclusive", "better", -0.1, "inconclusive"), ("no-op", "same", 0.0, "agree"),
])
def test_the_shared_rule(verdict, reference, change, expected):
    assert _script().score(verdict, reference, change) == expected


def test_the_reference_change_is_one_number_or_none():
    module = _script()
    assert module.reference_change("x (soape): -0.81% at 520M, -0.22% at 1.2B") == -0.81
    assert module.reference_change("2.262+-0.003 vs 2.182+-0.005 (+3.7%), final +5.5%") == 3.7
    assert module.reference_change("at equal FLOPs -1.6..-4.4%; OLMoE") is None
    assert module.reference_change("no number") is None


def test_v3_scores_as_the_readme_states_and_a_dial_folder_is_read(tmp_path, capsys):
    module = _script()
    dev = tmp_path / "dev-set.tsv"
    dev.write_text(DEV_SET)
    rows = module.read_dev_set(dev)
    v3 = module.summary(rows, module.dial_artifacts("v3", None, rows))
    assert (v3["rows"], v3["agree"], v3["disagree"], v3["inconclusive"]) == (11, 4, 4, 3)
    assert v3["better_held"] == [2, 3] and v3["worse_held"] == [0, 2]
    assert v3["ratios"]["muon"] == pytest.approx(-10.48 / -1.07, rel=1e-2)  # the "about 10x"
    assert "moe" not in v3["ratios"]  # its source names a range
    # a dial folder with two rows: lion's artifact rewritten to a tie inside the margin
    folder = tmp_path / "dial"
    folder.mkdir()
    published = ROOT / "docs" / "reproductions" / module.TAGS[("lion", "adamw")][1]
    lion = json.loads(published.read_text())
    lion["verdict"]["classification"] = "inconclusive"
    lion["statistics"]["lm_loss"]["paired_relative_change_percent"]["mean"] = 0.4
    (folder / "lion.json").write_text(json.dumps(lion))
    shutil.copy(ROOT / "docs" / "reproductions" / module.TAGS[("muon", "adamw")][1], folder / "muon.json")
    assert module.main(["--dev-set", str(dev), "--dial", f"a={folder}", "--markdown",
                        "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert "| a | 2 | 1 → 2 |" in out and "| lion vs adamw | same (+0.57) |" in out and "not run" in out
    figures = json.loads((tmp_path / "out.json").read_text())
    assert figures["a"]["scores"] == {"muon": "agree", "lion": "agree"}
    assert module.main(["--dev-set", str(dev), "--dial", "v3=" + str(folder)]) == 2
    assert module.main(["--dev-set", str(dev), "--base", "b"]) == 2
    assert module.main(["--dev-set", str(dev), "--dial", f"b={folder}", "--dial", f"a={folder}", "--base", "b",
                        "--markdown"]) == 0
    assert "| a | 2 | 2 → 2 |" in capsys.readouterr().out
    assert module.main(["--dev-set", str(tmp_path / "none.tsv")]) == 2


def test_the_protocol_page_quotes_the_dial_table_the_study_artifacts_give(tmp_path, capsys):
    """docs/protocol.md's dial tables are the script's output on the committed study artifacts."""
    page = (ROOT / "docs" / "protocol.md").read_text()
    start, end = "<!-- dial table: ", "<!-- end dial table -->"
    dev = tmp_path / "dev-set.tsv"
    dev.write_text(DEV_SET)
    head, tables = page.find(start), 0
    while head != -1:
        command = page[head + len(start):page.index(" -->", head)]
        quoted = page[page.index("\n", head) + 1:page.index(end, head)]
        args = command.split()[2:]  # python scripts/dial_table.py ...
        args = [a.replace("=docs/", f"={ROOT}/docs/") for a in args]
        assert _script().main(["--dev-set", str(dev), *args]) == 0
        assert capsys.readouterr().out == quoted, command
        head, tables = page.find(start, head + 1), tables + 1
    assert tables >= 2


@pytest.mark.parametrize("ci, expected", [
    ((-3.0, -1.5), "better"), ((-2.0, -0.5), "non-inferior"), ((0.2, 0.9), "non-inferior"),
    ((0.2, 1.3), "inconclusive"), ((1.2, 2.0), "worse"), ((-1.0, 1.0), "inconclusive"),
])
def test_the_what_if_reading_with_the_margin_on_both_sides(ci, expected):
    assert _script().practical_class(ci) == expected


def test_a_family_wise_reading_widens_each_interval_as_holm_or_bonferroni_would():
    """``--adjust``: the 95% interval of 5 seeds recovered (half-width / t(0.975, 4)) and widened to
    t(1 - 0.05 / (2N), 4) (scipy, independently of llmevo's multiplicity module) under
    bonferroni:N; under holm the smallest p-value's interval is at 1 - 0.05/m and its class reread."""
    from scipy import stats as scipy_stats

    module = _script()

    def measured(mean, half):
        return module.Measured("better", mean, (mean - half, mean + half), 0.0, "x", 5)

    rows = {"a": measured(-1.0, 0.9), "b": measured(-3.0, 0.5), "c": measured(0.4, 0.38)}
    wide = module.adjusted(rows, "bonferroni:41")
    se = 0.9 / scipy_stats.t.ppf(0.975, 4)
    half = scipy_stats.t.ppf(1 - 0.05 / 82, 4) * se
    assert wide["a"].ci == pytest.approx((-1.0 - half, -1.0 + half), rel=1e-9)
    assert wide["a"].llmevo_class == "inconclusive" and wide["b"].llmevo_class == "better"
    holm = module.adjusted(rows, "holm")
    se_b = 0.5 / scipy_stats.t.ppf(0.975, 4)
    assert holm["b"].ci[1] == pytest.approx(-3.0 + scipy_stats.t.ppf(1 - 0.05 / 6, 4) * se_b, rel=1e-9)
    assert holm["c"].llmevo_class == "non-inferior"  # [0.02, 0.78] at 95%: worse alone, not after Holm
    assert module.adjusted({"c": rows["c"]}, "holm")["c"].llmevo_class == "worse"  # a family of one
