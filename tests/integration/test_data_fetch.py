"""``llmevo data fetch`` / ``data check`` against a loopback mirror of the public sources."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from data_mirror import serve_mirror
from typer.testing import CliRunner

from llmevo.cli import app
from llmevo.data.fetch import (
    ALL_PINS,
    PARTIAL_DIR,
    REMOTE_FILES,
    check_data,
    fetch_data,
    upstream_piece_bytes,
)
from llmevo.data.pins import LM_FILE_SHA256 as PINNED_SHA256
from llmevo.data.pins import SUITE_FILE_SHA256, verified_path
from llmevo.data.store import EMBEDDED_FILES, MARKER
from llmevo.digests import sha256_file as file_sha256
from llmevo.errors import DataError

SMALL = "tinyshakespeare/input.txt"
SPLIT = "wikitext-2-raw/wiki.train.raw"  # five consecutive pieces (not embedded)
TOKENS_SPLIT = "wikitext-2/wiki.train.tokens"  # ten consecutive pieces (embedded)
GZ = "hh-rlhf/harmless-base/test.jsonl"


def _need(data_dir, target: str) -> None:
    """Read ``target`` checked: without a full data folder, a set the package does not embed
    skips the test (conftest's ``_skip_without_full_data``)."""
    verified_path(data_dir, target, ALL_PINS)


def _url_path(target: str, index: int = 0) -> str:
    remote = next(r for r in REMOTE_FILES if r.target == target)
    piece = remote.pieces[index]
    return f"/{piece.repo}/{piece.commit}/{piece.path}"


def test_every_pinned_file_has_a_source():
    assert {r.target for r in REMOTE_FILES} == set(PINNED_SHA256) | set(SUITE_FILE_SHA256)
    assert all(r.sha256 == ALL_PINS[r.target] for r in REMOTE_FILES)


def test_fetch_rebuilds_pieces_byte_exact(tmp_path, data_dir):
    _need(data_dir, TOKENS_SPLIT)
    with serve_mirror(data_dir) as mirror:
        statuses = fetch_data(tmp_path / "d", mirror.base_url, targets=[SMALL, TOKENS_SPLIT])
    assert [s.state for s in statuses] == ["ok", "ok"]
    for target in (SMALL, TOKENS_SPLIT):
        assert file_sha256(tmp_path / "d" / target) == ALL_PINS[target]
    assert len({path for path, _ in mirror.requests}) == 1 + 10
    assert not (tmp_path / "d" / PARTIAL_DIR).exists()


def test_fetch_rebuilds_raw_pieces_and_gzip_byte_exact(tmp_path, data_dir):
    _need(data_dir, SPLIT)
    _need(data_dir, GZ)
    with serve_mirror(data_dir) as mirror:
        statuses = fetch_data(tmp_path / "d", mirror.base_url, targets=[SPLIT, GZ])
    assert [s.state for s in statuses] == ["ok", "ok"]
    for target in (SPLIT, GZ):
        assert file_sha256(tmp_path / "d" / target) == file_sha256(data_dir / target)
    assert len({path for path, _ in mirror.requests}) == 5 + 1


def test_altered_in_transit_is_refused_and_nothing_is_left(tmp_path, data_dir):
    dest = tmp_path / "d"
    _need(data_dir, TOKENS_SPLIT)
    with serve_mirror(data_dir, alter={_url_path(TOKENS_SPLIT, 3)}) as mirror:
        with pytest.raises(DataError, match="wiki.train.tokens.*pinned"):
            fetch_data(dest, mirror.base_url, targets=[TOKENS_SPLIT])
    assert [p for p in dest.rglob("*") if p.is_file()] == []


def test_interrupted_download_resumes_with_a_range_request(tmp_path, data_dir):
    dest, path = tmp_path / "d", _url_path(SMALL)
    with serve_mirror(data_dir, cut_once={path}) as mirror:
        with pytest.raises(DataError, match="interrupted"):
            fetch_data(dest, mirror.base_url, targets=[SMALL])
        assert not (dest / SMALL).exists()  # never half-written
        statuses = fetch_data(dest, mirror.base_url, targets=[SMALL])
    assert statuses[0].state == "ok"
    ranges = [header for p, header in mirror.requests if p == path]
    size = (data_dir / SMALL).stat().st_size
    assert ranges == [None, f"bytes={size // 2}-"]
    assert file_sha256(dest / SMALL) == ALL_PINS[SMALL]


def test_interrupted_download_restarts_when_the_server_ignores_ranges(tmp_path, data_dir):
    dest, path = tmp_path / "d", _url_path(SMALL)
    with serve_mirror(data_dir, cut_once={path}, ignore_range=True) as mirror:
        with pytest.raises(DataError, match="interrupted"):
            fetch_data(dest, mirror.base_url, targets=[SMALL])
        fetch_data(dest, mirror.base_url, targets=[SMALL])
    assert file_sha256(dest / SMALL) == ALL_PINS[SMALL]  # not the first half appended twice
    assert not (dest / PARTIAL_DIR).exists()


def test_check_names_missing_and_altered_files(tmp_path, data_dir):
    shutil.copy(data_dir / SMALL, tmp_path / "input.txt")
    (tmp_path / "tinyshakespeare").mkdir()
    altered = (tmp_path / "input.txt").read_bytes().replace(b"First", b"Frist", 1)
    (tmp_path / "tinyshakespeare" / "input.txt").write_bytes(altered)
    states = {s.target: s.state for s in check_data(tmp_path)}
    assert states[SMALL] == "altered" and states[GZ] == "missing"
    result = CliRunner().invoke(app, ["data", "check", str(tmp_path)])
    assert isinstance(result.exception, DataError)  # main() turns it into exit status 2
    assert "altered: tinyshakespeare/input.txt" in str(result.exception)
    present = {s.target for s in check_data(data_dir) if s.state == "ok"}
    assert present == {s.target for s in check_data(data_dir) if s.state != "missing"}
    assert present >= set(EMBEDDED_FILES)
    if (data_dir / MARKER).is_file():  # the tests' embedded-only folder (no data folder given)
        return
    assert present == set(ALL_PINS)  # a given data folder is complete


def test_cli_fetch_everything_then_check_passes(tmp_path, data_dir, monkeypatch):
    for target in ALL_PINS:
        _need(data_dir, target)
    dest = tmp_path / "data"
    with serve_mirror(data_dir) as mirror:
        monkeypatch.setenv("LLMEVO_DATA_URL", mirror.base_url)
        result = CliRunner().invoke(app, ["data", "fetch", "--to", str(dest)])
    assert result.exit_code == 0, result.output
    check = CliRunner().invoke(app, ["data", "check", str(dest)])
    assert check.exit_code == 0 and "all 11 files" in " ".join(check.output.split())  # rich may wrap


def test_missing_data_directory_names_the_fetch_command(tmp_path):
    result = CliRunner().invoke(
        app, ["reproduce", "rope", "--preset", "smoke", "--data-dir", str(tmp_path / "nowhere")]
    )
    assert result.exit_code != 0
    assert f"download it with: llmevo data fetch --to {tmp_path / 'nowhere'}" in str(result.exception)


def test_mirror_pieces_have_the_upstream_sizes(data_dir):
    _need(data_dir, SPLIT)
    # Byte sizes of wyshi/sdp_transformers' train_split_5 pieces, as recorded in SOURCE.md.
    remote = next(r for r in REMOTE_FILES if r.target == SPLIT)
    sizes = [len(upstream_piece_bytes(data_dir, remote, i)) for i in range(5)]
    assert sizes == [2_146_554, 2_193_292, 2_189_779, 2_128_849, 2_282_273]
    lines = (data_dir / SPLIT).read_bytes().splitlines(keepends=True)
    reference = [len(b"".join(part)) for part in np.array_split(np.array(lines, dtype=object), 5)]
    assert sizes == reference
