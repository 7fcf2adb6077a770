"""Decision accuracy over the ladders (eval/decisions.py, reports/decisions.py): the Wilson
interval against the textbook formula, the counts on made-up ladders with known answers (a
shared arm left out), the counts read from ladder files and their top rungs' genomes, and the
published figure regenerated from the published artifacts."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest
from cli_runner import run_cli

from llmevo.errors import ArtifactError, ConfigError
from llmevo.eval.decisions import (
    ALL_SLOTS,
    Agreement,
    LadderDecisions,
    decision_accuracy,
    shared_arms,
    wilson_interval,
)
from llmevo.reports.decisions import accuracy_table, published_decision_accuracy

ROOT = Path(__file__).resolve().parents[2]
LADDERS = ROOT / "docs" / "ladders"


def _wilson_by_hand(agreed: int, total: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """(p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n) (Wilson 1927; Agresti & Coull 1998)."""
    p = agreed / total
    centre = p + z * z / (2 * total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return (centre - half) / (1 + z * z / total), (centre + half) / (1 + z * z / total)


def test_the_wilson_interval_is_the_textbook_one():
    low, high = wilson_interval(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.490, 0.943)  # the usual worked example
    for agreed, total in ((8, 10), (0, 1), (1, 1), (10, 11), (3, 5), (12, 16)):
        assert wilson_interval(agreed, total) == pytest.approx(_wilson_by_hand(agreed, total), abs=1e-12)
    low, high = wilson_interval(10, 10)
    assert high == pytest.approx(1.0) and low == pytest.approx(10 / (10 + 1.959963984540054 ** 2))
    assert wilson_interval(0, 0) is None
    assert Agreement.of(0, 0).rate is None and Agreement.of(0, 0).low is None
    with pytest.raises(ConfigError, match="not a proportion"):
        wilson_interval(11, 10)


def _ladder(label, slot, classes, components, runs=()):
    return LadderDecisions(label=label, source=f"docs/ladders/{label}/ladder.json", slot=slot,
                           classes=tuple(classes), components=None if components is None else frozenset(components),
                           runs=tuple(runs))


# four made-up ladders; the counts written out beside each
ROPE = _ladder("rope", "position", [(-2, "better"), (-1, "better"), (0, "non-inferior")],
               [("position", "rope"), ("position", "learned")])  # next: 1/2 same, 1/2 b/w; top: 0/2, 0/2
QK = _ladder("qk", "attention", [(-3, "inconclusive"), (-2, "worse"), (-1, "worse"), (0, "worse")],
             [("attention", "qk_norm"), ("attention", "mha")],
             runs=[(0, (42, 43), (3.80, 3.70))])  # next: 2/3, 2/2; top: 2/3, 2/2
VR = _ladder("vr", "attention", [(-1, "better"), (0, "better")],
             [("attention", "value_residual"), ("attention", "mha")],  # shares mha with QK
             runs=[(0, (42, 43), (3.80 * (1 + 1e-6), 3.70))])  # the same runs, rerun: 1/1, 1/1; 1/1, 1/1
MUON = _ladder("muon", "optimizer", [(-1, "inconclusive"), (0, "inconclusive")],
               [("optimizer", "muon"), ("optimizer", "adamw")])  # 1/1 same, 0/0 b/w; 1/1, 0/0


def _counts(row):
    return [(a.agreed, a.total) for a in (row.next_same, row.next_better_worse, row.top_same, row.top_better_worse)]


def test_the_counts_on_made_up_ladders_are_the_ones_written_out():
    found = decision_accuracy([ROPE, QK, VR, MUON])
    assert _counts(found.row()) == [(5, 7), (4, 5), (4, 7), (3, 5)]
    # qk and vr share the baseline mha: left out of the independent count
    assert found.shared_arms == {"qk": {"vr": ["attention=mha"]}, "vr": {"qk": ["attention=mha"]}}
    assert found.independent == ("rope", "muon")
    assert _counts(found.row(independent=True)) == [(2, 3), (1, 2), (1, 3), (0, 2)]
    assert _counts(found.row("attention")) == [(3, 4), (3, 3), (3, 4), (3, 3)]
    assert found.row("attention", independent=True).ladders == ()
    assert _counts(found.row("position", independent=True)) == _counts(found.row("position"))
    assert found.shared_runs == {"qk": ["vr"], "vr": ["qk"]}  # equal within the tolerance
    overall = found.row().next_same
    assert (overall.low, overall.high) == pytest.approx(_wilson_by_hand(5, 7))
    table = accuracy_table(found)
    assert "| all slots | every ladder | 4 | 5/7: 71% [36, 92] |" in table
    assert "| attention | every ladder (each shares an arm) |" in table
    assert "| position | every ladder (none shares an arm) |" in table
    assert table.count("| attention |") == 1  # an empty no-shared-arm row is not printed


def test_an_arm_is_shared_across_roles_and_a_ladder_without_genomes_counts_as_sharing():
    against = _ladder("alibi vs rope", "position", [(0, "worse")], [("position", "alibi"), ("position", "rope")])
    external = _ladder("external", "model", [(-1, "better"), (0, "better")], None)
    arms = shared_arms([ROPE, against, external])
    assert arms["rope"] == {"alibi vs rope": ["position=rope"]}  # one's method, the other's baseline
    assert arms["external"] == {}
    found = decision_accuracy([ROPE, against, external])
    assert found.independent == ()
    with pytest.raises(ConfigError, match="given twice"):
        decision_accuracy([ROPE, ROPE])


def _copy(tmp_path: Path, names: list[str]) -> Path:
    """The published ladder folders ``names`` (ladder file and rung artifacts) under tmp/docs/ladders."""
    docs = tmp_path / "docs"
    for name in names:
        target = docs / "ladders" / name
        target.mkdir(parents=True)
        for path in (LADDERS / name).glob("*.json"):
            shutil.copy(path, target / path.name)
    return docs


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_the_counts_read_ladder_files_and_their_top_rungs_genomes(tmp_path):
    names = ["2104.09864-rope", "2302.05442-qk_norm", "2410.17897-value_residual", "2502.16982-muon"]
    docs = _copy(tmp_path, names)
    classes = {"2104.09864-rope": ["better", "better", "better", "worse"],  # -3 degenerate (left out)
               "2302.05442-qk_norm": ["worse", "better", "better", "better"],
               "2410.17897-value_residual": ["inconclusive", "worse", "worse", "inconclusive"],
               "2502.16982-muon": ["better", "non-inferior", "better", "better"]}
    for name, wanted in classes.items():
        _edit(docs / "ladders" / name / "ladder.json",
              lambda data, wanted=wanted: [rung.update(classification=cls)
                                           for rung, cls in zip(data["rungs"], wanted, strict=True)])
    found = published_decision_accuracy([docs], tmp_path)
    # (same class, better/worse) at the next rung; at the top rung:
    # rope -2..0 b,b,w: 1/2, 1/2; 0/2, 0/2    qk_norm -2..0 b,b,b: 2/2, 2/2; 2/2, 2/2
    # value_residual -2..0 w,w,i: 1/2, 1/2; 0/2, 0/2
    # muon -3..0 b,ni,b,b: 1/3, 1/2 (non-inferior carries no direction); 2/3, 2/2
    assert _counts(found.row()) == [(5, 9), (5, 8), (4, 9), (4, 8)]
    # qk_norm and value_residual both compare mha (their genomes say so): left out
    assert found.independent == ("rope", "muon")
    assert _counts(found.row(independent=True)) == [(2, 5), (2, 4), (2, 5), (2, 4)]
    assert {ladder.source for ladder in found.ladders} == {f"docs/ladders/{name}/ladder.json" for name in names}

    # value_residual's top rung compared against gqa instead: no arm shared any more
    top = docs / "ladders" / "2410.17897-value_residual" / "rung0.json"
    _edit(top, lambda data: data["baseline"]["genome"]["model"]["attention"].update(name="gqa"))
    digest = hashlib.sha256(top.read_bytes()).hexdigest()
    _edit(docs / "ladders" / "2410.17897-value_residual" / "ladder.json",
          lambda data: data["rungs"][-1].update(artifact_sha256=digest))
    assert published_decision_accuracy([docs], tmp_path).independent == ("rope", "qk_norm", "value_residual", "muon")

    # a top rung that is not the artifact the ladder file names is refused
    _edit(top, lambda data: data["baseline"]["genome"]["model"]["attention"].update(name="mqa"))
    with pytest.raises(ArtifactError, match="sha256"):
        published_decision_accuracy([docs], tmp_path)


def test_the_published_figure_regenerates_from_the_published_artifacts():
    """docs/LEADERBOARD.json's decision accuracy is what the published ladders give now
    (`llmevo leaderboard` rewrites it; the README's and the ladders page's sections are checked
    in test_readme_evidence_table.py)."""
    found = published_decision_accuracy([ROOT / "docs"], ROOT)
    published = json.loads((ROOT / "docs" / "LEADERBOARD.json").read_text(encoding="utf-8"))
    assert published["decision_accuracy"] == json.loads(json.dumps(found.to_json()))
    assert len(found.ladders) == len(list(LADDERS.glob("*/ladder.json")))
    # the better/worse count is each ladder file's own record of its transfers, pooled
    from llmevo.artifacts.ladder import load_ladder

    transfers = [pair for path in sorted(LADDERS.glob("*/ladder.json")) for pair in load_ladder(path).transfers]
    overall = found.row(ALL_SLOTS).next_better_worse
    assert (overall.agreed, overall.total) == (sum(pair["held"] for pair in transfers), len(transfers))


def test_ladder_accuracy_prints_the_figure_and_trains_nothing(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert run_cli(["ladder", "--accuracy"]) == 0
    printed = capsys.readouterr().out
    overall = published_decision_accuracy([ROOT / "docs"], ROOT).row()
    assert f"{overall.next_same.agreed}/{overall.next_same.total}:" in printed and "Wilson" in printed
    assert run_cli(["ladder", "rope", "--accuracy"]) == 2
    assert "trains nothing" in capsys.readouterr().err
    assert run_cli(["ladder", "rope", "--root", "docs"]) == 2
    assert "--accuracy only" in capsys.readouterr().err


def test_the_same_comparison_published_twice_is_counted_twice_and_shares_its_arms(tmp_path):
    docs = _copy(tmp_path, ["2502.16982-muon"])
    shutil.copytree(docs / "ladders" / "2502.16982-muon", docs / "ladders" / "muon-again")
    found = published_decision_accuracy([docs], tmp_path)
    assert [ladder.label for ladder in found.ladders] == ["muon (2502.16982-muon)", "muon (muon-again)"]
    assert found.independent == () and found.row().next_same.total == 2 * (len(found.ladders[0].classes) - 1)


@pytest.mark.parametrize(("args", "message"), [
    (["--rungs", "-1,0", "--publish"], "--rungs, --publish do not apply to --accuracy"),
    (["--seeds", "1,2"], "--seeds does not apply to --accuracy"),
    (["--storage", "sqlite:///x.db", "--out", "x"], "--out, --storage do not apply to --accuracy"),
    (["--root", "{empty}"], "no ladder file (ladders/*/ladder.json) under"),
    (["--root", "docs", "--root", "{empty}"], "no ladder file (ladders/*/ladder.json) under"),
])
def test_ladder_accuracy_refuses_options_it_would_ignore_and_a_root_without_ladders(args, message, tmp_path,
                                                                                    capsys, monkeypatch):
    """Issue 37 round 4: the ladder options were silently ignored with --accuracy (exit 0),
    and a ladders/ folder with no ladder in it printed a table of "0 published ladders"."""
    monkeypatch.chdir(ROOT)
    (tmp_path / "ladders").mkdir()
    args = [str(tmp_path) if arg == "{empty}" else arg for arg in args]
    assert run_cli(["ladder", "--accuracy", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err
    assert not Path("x.db").exists() and not Path("x").exists()


def test_ladder_accuracy_outside_the_repository_says_where_it_looked(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli(["ladder", "--accuracy"]) == 2
    assert capsys.readouterr().err.strip() == ("error: no published ladders here (docs/ladders/, the default "
                                               "--root): run it in the repository, or pass --root DIR")
