"""Paper intake through the ``arxiv`` client, against recorded API responses served from a
loopback server (``tests/arxiv_server.py``): no test touches the network."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from arxiv_server import FakeArxiv, serve_arxiv
from cli_runner import files_under, run_cli

from llmevo.errors import ConfigError
from llmevo.papers import intake
from llmevo.papers.intake import ArxivUnavailable, build_query, fetch, parse_since, search, settings
from llmevo.papers.ledger import Implemented, load_ledger


def _fast(url: str, **overrides) -> intake.ArxivSettings:
    return settings(api_url=url, page_size=2, delay_seconds=0.0, **overrides)


def test_search_follows_the_pages_of_a_result_set():
    with serve_arxiv() as fake:
        records = search("attention", max_results=10, config=_fast(fake.url))
    assert [r.arxiv_id for r in records] == ["2409.04431", "2410.05258", "2505.06708"]
    assert [q["start"] for q in fake.queries] == ["0", "2"]  # two pages of 2, total 3
    assert all(q["max_results"] == "2" and q["search_query"] == "all:attention" for q in fake.queries)
    first = records[0]
    assert first.title == "Theory, Analysis, and Best Practices for Sigmoid Self-Attention"  # one line
    assert first.authors[:2] == ["Jason Ramapuram", "Federico Danieli"]
    assert (first.published, first.primary_category, first.categories) == (
        date(2024, 9, 6), "cs.LG", ["cs.LG", "cs.AI"])


def test_search_stops_at_max_results():
    with serve_arxiv() as fake:
        records = search("attention", max_results=2, config=_fast(fake.url))
    assert len(records) == 2 and len(fake.queries) == 1


def test_a_503_is_retried_by_the_client():
    with serve_arxiv(FakeArxiv(fail_first=1)) as fake:
        record = fetch("arXiv:2409.04431v2", _fast(fake.url))
    assert fake.statuses == [503, 200]
    assert record.arxiv_id == "2409.04431" and record.year == 2024


def test_an_api_that_keeps_failing_is_one_line():
    with serve_arxiv(FakeArxiv(fail_first=10)) as fake, pytest.raises(ArxivUnavailable) as caught:
        fetch("2409.04431", _fast(fake.url, num_retries=2))
    assert fake.statuses == [503, 503, 503]  # the first try and two retries
    assert str(caught.value) == (f"the arXiv API at {fake.url} answered HTTP 503 (3 tries); "
                                 "try again later")


def test_an_unknown_id_is_a_clear_error():
    with serve_arxiv() as fake, pytest.raises(ConfigError, match="arXiv has no paper 2501.99999"):
        fetch("2501.99999", _fast(fake.url))
    assert fake.queries[0]["id_list"] == "2501.99999"


def test_a_malformed_id_is_refused_before_any_request():
    with serve_arxiv() as fake, pytest.raises(ConfigError, match="'25.1' is not an arXiv id"):
        fetch("25.1", _fast(fake.url))
    assert fake.queries == []


def test_query_syntax_words_categories_and_dates():
    assert build_query("sigmoid attention", [], None) == "all:sigmoid AND all:attention"
    assert build_query("ti:softmax", ["cs.CL", "cs.LG"], date(2024, 6, 1), until=date(2025, 1, 2)) == (
        "(ti:softmax) AND (cat:cs.CL OR cat:cs.LG) AND submittedDate:[202406010000 TO 202501022359]")


def test_since_filters_and_reaches_the_query():
    with serve_arxiv() as fake:
        records = search("attention", since=date(2024, 10, 1), max_results=10, config=_fast(fake.url))
    assert [r.arxiv_id for r in records] == ["2410.05258", "2505.06708"]  # 2409.04431 is older
    assert "submittedDate:[202410010000 TO " in fake.queries[0]["search_query"]


@pytest.mark.parametrize("text", ["2024-13-01", "yesterday", "2024/06/01", ""])
def test_a_bad_since_date_is_refused(text):
    with pytest.raises(ConfigError, match=r"--since .*not a date; expected YYYY-MM-DD"):
        parse_since(text)


def test_cli_bad_since_exits_2_without_a_request(capsys, tmp_path):
    with serve_arxiv() as fake:
        code = run_cli(["papers", "search", "attention", "--since", "2024-02-30",
                        "--api-url", fake.url, "--ledger", str(tmp_path / "papers.json")])
    assert code == 2 and fake.queries == []
    assert "--since 2024-02-30: not a date" in capsys.readouterr().err


def test_cli_search_json_and_category(capsys, tmp_path):
    with serve_arxiv() as fake:
        code = run_cli(["papers", "search", "attention", "--category", "cs.CL,cs.LG", "--max", "3",
                        "--json", "--api-url", fake.url, "--page-size", "2", "--delay", "0",
                        "--ledger", str(tmp_path / "papers.json")])
    assert code == 0
    assert [r["arxiv_id"] for r in json.loads(capsys.readouterr().out)] == [
        "2409.04431", "2410.05258", "2505.06708"]
    assert fake.queries[0]["search_query"] == "(all:attention) AND (cat:cs.CL OR cat:cs.LG)"
    assert files_under(tmp_path) == set()  # search writes nothing


@pytest.mark.parametrize(("args", "message"), [
    (["--category", "CS CL"], "--category CS CL: not an arXiv category"),
    (["--max", "0"], "--max 0: must be at least 1"),
    (["--page-size", "5000"], "page_size: Input should be less than or equal to 2000"),
])
def test_cli_search_bad_options_exit_2(capsys, tmp_path, args, message):
    with serve_arxiv() as fake:
        code = run_cli(["papers", "search", "attention", *args, "--api-url", fake.url, "--delay", "0"])
    assert code == 2 and fake.queries == []
    assert message in capsys.readouterr().err


def test_cli_add_writes_the_entry_and_its_table(capsys, tmp_path):
    ledger = tmp_path / "docs" / "papers.json"
    with serve_arxiv() as fake:
        code = run_cli(["papers", "add", "2409.04431", "--decision", "implemented:sigmoid_attn",
                        "--why", "Softmax-free attention with a bias; cheap to test at our size.",
                        "--track", "attention", "--ledger", str(ledger), "--api-url", fake.url,
                        "--delay", "0"])
    assert code == 0, capsys.readouterr().err
    entry = load_ledger(ledger).require("2409.04431")
    assert entry.title == "Theory, Analysis, and Best Practices for Sigmoid Self-Attention"
    assert (entry.year, entry.categories, entry.source) == (2024, ["cs.LG", "cs.AI"], "arxiv")
    assert entry.decision == Implemented(components=["sigmoid_attn"])
    table = (tmp_path / "docs" / "papers.md").read_text()
    assert "| [2409.04431](https://arxiv.org/abs/2409.04431) | 2024 | attention |" in table
    assert "`sigmoid_attn`" in table


def test_cli_add_refuses_and_writes_nothing(capsys, tmp_path):
    ledger = tmp_path / "papers.json"
    common = ["--ledger", str(ledger), "--delay", "0"]
    with serve_arxiv() as fake:
        assert run_cli(["papers", "add", "2501.99999", "--why", "x", "--api-url", fake.url, *common]) == 2
        assert "arXiv has no paper 2501.99999" in capsys.readouterr().err
        assert run_cli(["papers", "add", "2409.04431", "--why", "x", "--decision", "maybe",
                        "--api-url", fake.url, *common]) == 2
        assert "--decision 'maybe': expected queued" in capsys.readouterr().err
        assert run_cli(["papers", "add", "2409.04431", "--why", " ", "--api-url", fake.url, *common]) == 2
        assert "--why: String should have at least 1 character" in capsys.readouterr().err
        assert len(fake.queries) == 1  # only the unknown id reached the server
        assert files_under(tmp_path) == set()
        assert run_cli(["papers", "add", "2409.04431", "--why", "x", "--api-url", fake.url, *common]) == 0
        capsys.readouterr()
        assert run_cli(["papers", "add", "2409.04431", "--why", "x", "--api-url", fake.url, *common]) == 2
        assert "already in the ledger (queued); pass --update" in capsys.readouterr().err


@contextlib.contextmanager
def _server(answer):
    """A loopback HTTP server whose GET handler is ``answer(handler)``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            answer(self)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api/query"
    finally:
        server.shutdown()
        server.server_close()


def _reply(body: bytes, content_type: str):
    def answer(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return answer


@pytest.mark.parametrize("command", [["search", "attention"], ["add", "2409.04431", "--why", "x"]])
def test_a_server_that_never_answers_times_out_as_one_line(command, capsys, tmp_path):
    """The client passed no timeout: a server that accepts and never answers hung the command,
    even with --retries 0."""
    release = threading.Event()
    with _server(lambda handler: release.wait(30)) as url:
        started = time.perf_counter()
        code = run_cli(["papers", *command, "--api-url", url, "--delay", "0", "--retries", "0",
                        "--timeout", "0.5", "--ledger", str(tmp_path / "papers.json")])
        elapsed = time.perf_counter() - started
        release.set()
    err = capsys.readouterr().err
    assert code == 2 and elapsed < 10, (code, elapsed, err)
    assert len(err.strip().splitlines()) == 1 and "did not answer within 0.5 s (--timeout)" in err, err
    assert files_under(tmp_path) == set()


@pytest.mark.parametrize(("body", "found"), [
    (b"<!doctype html><html><body><h1>Welcome to the portal</h1></body></html>",
     "a reply that is not XML (text/html)"),
    (b"<html><body><p>Welcome</p></body></html>", "a <html> document (text/html)"),
    (b"this is not xml at all", "a reply that is not XML (text/html)"),
    (b'<?xml version="1.0"?><rss version="2.0"><channel></channel></rss>', "a <rss> document (text/html)"),
])
@pytest.mark.parametrize("command", [["search", "attention"], ["add", "2409.04431", "--why", "x"]])
def test_a_reply_that_is_not_an_atom_feed_is_an_error(body, found, command, capsys, tmp_path):
    """An HTML page with status 200 was read as a feed of no papers: exit 0, '0 papers'."""
    with _server(_reply(body, "text/html")) as url:
        code = run_cli(["papers", *command, "--api-url", url, "--delay", "0", "--retries", "0",
                        "--ledger", str(tmp_path / "papers.json")])
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    assert len(err.strip().splitlines()) == 1 and f"answered with {found}, not an Atom feed" in err, err
    assert files_under(tmp_path) == set()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_bad_timeout_is_refused_before_any_request(value, capsys):
    with serve_arxiv() as fake:
        code = run_cli(["papers", "search", "attention", "--api-url", fake.url, "--timeout", value])
    assert code == 2 and fake.queries == []
    assert "timeout_seconds" in capsys.readouterr().err


def test_a_real_feed_still_reads_with_the_timeout():
    with serve_arxiv() as fake:
        record = fetch("2409.04431", settings(api_url=fake.url, delay_seconds=0, timeout_seconds=5))
    assert record.arxiv_id == "2409.04431"
