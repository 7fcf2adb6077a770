"""The default data folder: the embedded sets unpack with no network, every other set is
fetched on first use from a local HTTP server (a good file, a wrong-sha file, a missing file),
and a failed fetch is one line that says what to do, with nothing left behind."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import threading
import tomllib
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest
from cli_runner import run_cli

from llmevo.cli.common import resolve_data_dir
from llmevo.data import store
from llmevo.data.fetch import ALL_PINS, PARTIAL_DIR, REMOTE_FILES
from llmevo.data.pins import read_pinned, verified_path
from llmevo.errors import DataError

REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL = "tinyshakespeare/input.txt"
URL_PATH = next(
    f"{piece.repo}/{piece.commit}/{piece.path}"
    for remote in REMOTE_FILES if remote.target == SMALL for piece in remote.pieces
)


@contextlib.contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """``http.server`` serving ``folder`` on 127.0.0.1 (an ephemeral port), in a thread."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


@pytest.fixture
def fetched_small(monkeypatch) -> bytes:
    """Tiny Shakespeare's bytes, the file then treated as one the package does not carry."""
    data = store.embedded_bytes(SMALL)
    monkeypatch.setattr(store, "EMBEDDED_FILES", tuple(f for f in store.EMBEDDED_FILES if f != SMALL))
    return data


def test_embedded_files_are_the_pinned_bytes_and_declared_package_data(tmp_path):
    written = store.unpack_embedded(tmp_path)
    assert written == list(store.EMBEDDED_FILES)
    for relative in store.EMBEDDED_FILES:
        assert hashlib.sha256((tmp_path / relative).read_bytes()).hexdigest() == ALL_PINS[relative]
        assert (REPO_ROOT / "src/llmevo/data/embedded" / relative).with_name(  # licence, source
            "SOURCE.md").is_file()
    assert store.unpack_embedded(tmp_path) == []  # present: not written again
    globs = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["llmevo.data"]
    shipped = [f"embedded/{relative}.xz" for relative in store.EMBEDDED_FILES]
    shipped += [f"embedded/{relative.split('/')[0]}/SOURCE.md" for relative in store.EMBEDDED_FILES]
    assert all(any(fnmatch(name, glob) for glob in globs) for name in shipped)


def test_a_missing_embedded_file_is_unpacked_on_first_use_with_no_network(tmp_path):
    folder = store.prepare_managed(tmp_path / "data", "http://127.0.0.1:9")
    path = verified_path(folder, "wikitext-2/wiki.valid.tokens")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ALL_PINS["wikitext-2/wiki.valid.tokens"]
    assert read_pinned(folder, "alpaca/alpaca_5000.json")[:1] == b"["
    assert _files(folder) == {store.MARKER, "wikitext-2", "wikitext-2/wiki.valid.tokens",
                              "alpaca", "alpaca/alpaca_5000.json"}  # no lock, no partial


def test_a_folder_given_explicitly_is_read_as_it_is(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        verified_path(tmp_path, "wikitext-2/wiki.valid.tokens")
    assert _files(tmp_path) == set()


def test_a_set_not_embedded_is_fetched_on_first_use(tmp_path, fetched_small, capsys):
    served = tmp_path / "served"
    (served / URL_PATH).parent.mkdir(parents=True)
    (served / URL_PATH).write_bytes(fetched_small)
    with serve_folder(served) as url:
        folder = store.prepare_managed(tmp_path / "data", url)
        path = verified_path(folder, SMALL)
    assert path.read_bytes() == fetched_small
    assert _files(folder) == {store.MARKER, "tinyshakespeare", SMALL}
    assert f"fetched {SMALL}" in capsys.readouterr().err


@pytest.mark.parametrize("served_bytes", ["altered", "missing"])
def test_a_failed_fetch_is_one_line_saying_what_to_do_and_leaves_nothing(
        tmp_path, fetched_small, served_bytes):
    served = tmp_path / "served"
    served.mkdir()
    if served_bytes == "altered":
        (served / URL_PATH).parent.mkdir(parents=True)
        (served / URL_PATH).write_bytes(fetched_small.replace(b"First", b"Frist", 1))
    with serve_folder(served) as url:
        folder = store.prepare_managed(tmp_path / "data", url)
        with pytest.raises(DataError) as caught:
            verified_path(folder, SMALL)
    message = str(caught.value)
    assert "\n" not in message
    assert ("not the pinned" if served_bytes == "altered" else "HTTP 404") in message
    assert "llmevo data fetch --to DIR" in message and "LLMEVO_DATA" in message
    assert _files(folder) == {store.MARKER}  # no file, no partial, no empty folder
    assert PARTIAL_DIR not in _files(folder)


def test_without_network_the_cli_refuses_in_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LLMEVO_DATA", raising=False)
    monkeypatch.setenv("LLMEVO_DATA_URL", "http://127.0.0.1:9")
    monkeypatch.setattr(store, "default_data_dir", lambda: tmp_path / "cache" / "data")
    assert run_cli(["data", "fetch"]) == 2  # embedded sets unpack, the next set cannot come
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cannot connect" in err
    folder = tmp_path / "cache" / "data"
    assert all((folder / relative).is_file() for relative in store.EMBEDDED_FILES)
    assert not any(p.is_file() for p in folder.rglob("*") if p.name not in
                   {store.MARKER, *(Path(r).name for r in store.EMBEDDED_FILES)})


def test_the_default_data_folder_is_the_user_cache_not_a_shared_folder_beside(
        tmp_path, monkeypatch):
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.delenv("LLMEVO_DATA", raising=False)
    monkeypatch.setenv("LLMEVO_DATA_URL", "ftp://example.org")
    monkeypatch.setattr(store, "default_data_dir", lambda: tmp_path / "cache" / "data")
    with pytest.raises(Exception, match="expected http:// or https://"):  # checked first
        resolve_data_dir(None)
    assert not (tmp_path / "cache").exists()
    monkeypatch.delenv("LLMEVO_DATA_URL")
    folder = resolve_data_dir(None)
    assert folder == (tmp_path / "cache" / "data").resolve()
    assert (folder / store.MARKER).is_file()
    monkeypatch.setenv("LLMEVO_DATA", str(tmp_path / "shared" / "data"))
    assert resolve_data_dir(None) == (tmp_path / "shared" / "data").resolve()
    assert resolve_data_dir(tmp_path / "work") == (tmp_path / "work").resolve()
