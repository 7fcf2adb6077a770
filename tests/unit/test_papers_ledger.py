"""The paper ledger (typed, atomic, with its generated table) and its diff against the
registry; the committed ``docs/papers.json`` is checked as a ledger too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import files_under, run_cli

from llmevo.errors import ConfigError
from llmevo.papers.ledger import (
    Implemented,
    Ledger,
    Queued,
    Rejected,
    load_ledger,
    make_entry,
    normalize_arxiv_id,
    parse_decision,
    render_markdown,
    save_ledger,
)
from llmevo.papers.status import Registered, ledger_status

REPO = Path(__file__).resolve().parents[2]


def _entry(arxiv_id: str, decision, **fields):
    values = {"arxiv_id": arxiv_id, "title": f"Paper {arxiv_id}", "authors": ["A. Author"],
              "year": 2000 + int(arxiv_id[:2]), "categories": ["cs.CL"], "track": "attention",
              "source": "hand", "decision": decision, "why": "a reason"}
    return make_entry(values | fields)


@pytest.mark.parametrize(("text", "bare"), [
    ("2104.09864", "2104.09864"), ("arXiv:2104.09864v5", "2104.09864"),
    ("https://arxiv.org/abs/2410.05258v2", "2410.05258"), ("cs/0112017", "cs/0112017"),
    ("0704.0001", "0704.0001"),
])
def test_arxiv_ids_are_normalised(text, bare):
    assert normalize_arxiv_id(text) == bare


@pytest.mark.parametrize("text", ["2104.098", "21040.9864", "rope", "2104.09864v", ""])
def test_malformed_ids_are_refused(text):
    with pytest.raises(ConfigError, match="is not an arXiv id"):
        normalize_arxiv_id(text)


def test_decisions_parse_in_the_words_of_the_option():
    assert parse_decision("queued") == Queued()
    assert parse_decision("implemented:gelu, relu2") == Implemented(components=["gelu", "relu2"])
    assert parse_decision("rejected:needs 1000 layers") == Rejected(reason="needs 1000 layers")
    for bad, message in [("implemented:", "needs the component name"), ("rejected:", "needs a reason"),
                         ("queued:now", "expected queued"), ("implemented:Bad Name", "--decision")]:
        with pytest.raises(ConfigError, match=message):
            parse_decision(bad)


def test_an_entry_checks_its_year_against_its_id_and_its_fields():
    with pytest.raises(ConfigError, match="year 2020 does not match arXiv id 2104.09864"):
        _entry("2104.09864", Queued(), year=2020)
    with pytest.raises(ConfigError, match="why"):
        _entry("2104.09864", Queued(), why="two\nlines")
    with pytest.raises(ConfigError, match="'CS CL' is not an arXiv category"):
        _entry("2104.09864", Queued(), categories=["CS CL"])


def test_a_ledger_refuses_a_duplicate_and_keeps_ids_sorted(tmp_path):
    late, early = _entry("2410.05258", Queued()), _entry("1706.03762", Queued())
    assert [p.arxiv_id for p in Ledger(papers=[late, early]).papers] == ["1706.03762", "2410.05258"]
    path = tmp_path / "papers.json"
    path.write_text(json.dumps({"papers": [late.model_dump(mode="json")] * 2}))
    with pytest.raises(ConfigError, match=r"ledger .*papers.json: papers: Value error, paper 2410.05258 appears twice"):
        load_ledger(path)


def test_save_round_trips_and_writes_the_table_beside_it(tmp_path):
    ledger = Ledger(papers=[
        _entry("2104.09864", Implemented(components=["rope"]), track="position"),
        _entry("2410.05258", Queued(), title="Differential | Transformer", authors=["T. Ye", "L. Dong"]),
        _entry("2312.00752", Rejected(reason="a whole architecture"), source="arxiv"),
    ])
    path = tmp_path / "docs" / "papers.json"
    save_ledger(ledger, path)
    assert load_ledger(path) == ledger
    table = (tmp_path / "docs" / "papers.md").read_text()
    assert table == render_markdown(ledger)
    assert "3 papers: 1 implemented, 1 queued, 1 rejected." in table
    assert "| [2104.09864](https://arxiv.org/abs/2104.09864)† | 2021 | position | Paper 2104.09864 | A. Author | `rope` | a reason |" in table
    assert "Differential \\| Transformer | T. Ye et al. | a reason |" in table  # a pipe is escaped
    assert "| [2312.00752](https://arxiv.org/abs/2312.00752) | 2023 |" in table  # fetched: no †
    assert files_under(tmp_path) == {Path("docs"), Path("docs/papers.json"), Path("docs/papers.md")}


def test_status_sorts_every_decision_against_the_registry():
    ledger = Ledger(papers=[
        _entry("2104.09864", Implemented(components=["rope"])),
        _entry("2002.05202", Implemented(components=["swiglu", "geglu_v2"])),
        _entry("2410.05258", Queued()),
        _entry("2409.04431", Queued()),
        _entry("2312.00752", Rejected(reason="out of scope")),
    ])
    components = [Registered("position", "rope", "2104.09864", "builtin"),
                  Registered("feedforward", "swiglu", "2002.05202", "builtin"),
                  Registered("attention", "sigmoid_attn", "2409.04431", "builtin"),
                  Registered("feedforward", "scaled", "2103.17239", "llmevo-scaled"),
                  Registered("position", "learned", None, "builtin")]
    status = ledger_status(ledger, components)
    assert [(e.arxiv_id, [c.name for c in cs]) for e, cs in status.implemented] == [("2104.09864", ["rope"])]
    assert [(e.arxiv_id, names) for e, names in status.missing] == [("2002.05202", ["geglu_v2"])]
    assert [e.arxiv_id for e in status.queued] == ["2409.04431", "2410.05258"]
    assert [e.arxiv_id for e in status.rejected] == ["2312.00752"]
    assert [c.name for c in status.unledgered] == ["scaled"]
    # swiglu is named by its entry (whose other name is missing); sigmoid_attn's entry is queued
    assert [(c.name, e.arxiv_id) for c, e in status.undecided] == [("sigmoid_attn", "2409.04431")]
    assert [c.name for c in status.without_paper] == ["learned"]
    assert not status.consistent


def test_the_committed_ledger_holds_60_papers_and_agrees_with_the_registry(capsys):
    ledger = load_ledger(REPO / "docs" / "papers.json")
    assert len(ledger.papers) >= 60
    assert all(p.why for p in ledger.papers)
    assert (REPO / "docs" / "papers.md").read_text() == render_markdown(ledger)  # table up to date
    for arxiv_id in ("2410.05258", "2505.06708", "2408.00118", "2409.04431", "2405.04434",
                     "2503.10622", "2502.02732", "2203.00555", "2003.04887", "2409.19606",
                     "2101.03961", "2401.04088", "2204.02311", "2404.19737", "2409.11321",
                     "2406.16793", "2405.15682", "2409.03137", "2411.16085", "2404.06395"):
        assert ledger.require(arxiv_id).decision.status in {"queued", "implemented"}
    assert run_cli(["papers", "status", "--json", "--ledger", str(REPO / "docs" / "papers.json")]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert diff["missing"] == {} and diff["unledgered"] == [] and diff["undecided"] == {}
    assert diff["implemented"]["2104.09864"] == ["position/rope"]


def test_decide_changes_a_decision_offline_and_refuses_an_unknown_paper(tmp_path, capsys):
    path = tmp_path / "papers.json"
    save_ledger(Ledger(papers=[_entry("2410.05258", Queued())]), path)
    assert run_cli(["papers", "decide", "2410.05258", "--decision", "rejected:too slow on CPU",
                    "--why", "measured", "--ledger", str(path)]) == 0
    assert load_ledger(path).require("2410.05258").decision == Rejected(reason="too slow on CPU")
    before = path.read_bytes()
    capsys.readouterr()
    assert run_cli(["papers", "decide", "2409.04431", "--decision", "queued", "--why", "x",
                    "--ledger", str(path)]) == 2
    assert "paper 2409.04431 is not in the ledger; add it first with 'llmevo papers add" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_a_broken_ledger_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "papers.json"
    path.write_text("{not json")
    assert run_cli(["papers", "status", "--ledger", str(path)]) == 2
    assert "is not JSON" in capsys.readouterr().err


def test_the_scaffold_adds_a_line_after_its_slots_last_in_the_components_table():
    from llmevo.papers.scaffold import _with_entry

    table = ('x\nCOMPONENTS: tuple[tuple[str, str, str], ...] = (\n'
             '    ("norm", "rmsnorm", "norm.rmsnorm"),\n    ("norm", "dyt", "norm.dyt"),\n'
             '    ("block", "pre_norm", "block.pre_norm"),\n)\ny\n')
    assert _with_entry(table, "norm", "norm", "ln2") == table.replace(
        '"norm.dyt"),\n', '"norm.dyt"),\n    ("norm", "ln2", "norm.ln2"),\n')
    assert _with_entry(table, "optimizer", "optim", "lion2") == table.replace(
        '"block.pre_norm"),\n', '"block.pre_norm"),\n    ("optimizer", "lion2", "optim.lion2"),\n')
    with pytest.raises(ConfigError, match="COMPONENTS table was not found"):
        _with_entry("from llmevo.components.norm import dyt  # noqa: F401\n", "norm", "norm", "ln2")