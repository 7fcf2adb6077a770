"""Faults while writing, and input that does not decode: one line, exit 2, nothing half-written.

Issue 23, causes 3 and 7, through the command line and, where one exists, the Python API.

A full disk is simulated by making ``os.fsync`` fail with ENOSPC: every file llmevo writes is
fsynced before it counts as written (an atomic file before its rename, a streamed one when
it is closed), which is also where a real full disk with delayed allocation reports it. The
safetensors library writes in Rust; its full-disk error is raised here exactly as the library
raises it. A write that fails while it writes (not at fsync) uses the real ``/dev/full``. A
read-only folder is ``/proc`` (read-only for every user, root included); a ``chmod`` folder
binds only when the tests do not run as root, and is skipped otherwise.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import re
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_bad_input
from cli_runner import files_under, run_cli
from data_mirror import serve_mirror
from test_bad_input import READ_ONLY, REPO_ROOT, assert_refused

from llmevo.errors import ConfigError, DataError, LlmevoError

checkpoint = test_bad_input.checkpoint  # a real (untrained) llama_modern checkpoint

FULL = "no space left on device"
SMOKE = ["--preset", "smoke", "--steps", "2", "--seeds", "42", "--threads", "1", "--device", "cpu"]


@pytest.fixture
def disk_full(monkeypatch):
    """``disk_full(n)``: the first ``n`` files written succeed, every later one finds the disk full."""
    real_fsync = os.fsync

    def arm(files_ok: int = 0) -> None:
        count = itertools.count()

        def fsync(fd: int) -> None:
            if next(count) >= files_ok:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)

    return arm


@pytest.fixture
def safetensors_disk_full(monkeypatch):
    """``safetensors_disk_full()``: from now on safetensors finds the disk full, with the error
    its Rust writer raises."""
    import safetensors.torch
    from safetensors import SafetensorError

    def full(*_args, **_kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    return lambda: monkeypatch.setattr(safetensors.torch, "save_file", full)


def files_only(folder: Path) -> set[Path]:
    return {p for p in files_under(folder) if (folder / p).is_file()}


def refused_leaving_no_file(args: list[str], capsys, work: Path, message: str) -> str:
    """Like ``assert_refused``, where the command may leave empty folders (no file)."""
    before = files_only(work)
    status = run_cli(args)
    err = capsys.readouterr().err
    assert status == 2, f"{args}: exit {status}, stderr {err!r}"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(message, " ".join(err.split())), err
    assert files_only(work) == before, f"{args}: wrote {files_only(work) - before}"
    return err


def one_line(err: str) -> str:
    return " ".join(err.split())


def at(path: Path) -> str:
    """``path`` as a regular expression that matches it literally."""
    return re.escape(str(path))


def _read_only_by_permissions(folder: Path) -> Path:
    folder.mkdir()
    folder.chmod(0o555)
    probe = folder / "probe"
    try:
        probe.touch()
    except PermissionError:
        return folder
    probe.unlink()
    folder.chmod(0o755)
    pytest.skip("folder permissions do not bind here (running as root)")


# --- export ----------------------------------------------------------------------------------

def test_export_on_a_full_disk_names_the_weights_file(checkpoint, capsys, workdir,
                                                      safetensors_disk_full):
    from llmevo.hf.export import export_hf

    out = workdir / "exported"
    safetensors_disk_full()
    err = assert_refused(["export", str(checkpoint), "--out", str(out)], capsys, workdir)
    assert f"cannot write {out}/model.safetensors: {FULL}" in one_line(err)
    with pytest.raises(LlmevoError, match=re.escape(f"cannot write {out}/model.safetensors: {FULL}")):
        export_hf(checkpoint, out)
    assert files_under(workdir) == set()


def test_export_on_a_disk_that_fills_after_the_weights_leaves_nothing(checkpoint, capsys, workdir,
                                                                      disk_full):
    from llmevo.hf.export import export_hf

    out = workdir / "exported"
    disk_full(files_ok=2)
    err = assert_refused(["export", str(checkpoint), "--out", str(out)], capsys, workdir)
    assert re.search(rf"cannot write {at(out)}/\S+\.json: {FULL}", one_line(err)), err
    disk_full(files_ok=2)
    with pytest.raises(LlmevoError, match=rf"cannot write {at(out)}/\S+\.json: {FULL}"):
        export_hf(checkpoint, out)
    assert files_under(workdir) == set()


def test_export_into_a_read_only_folder(checkpoint, capsys, workdir):
    from llmevo.hf.export import export_hf

    assert_refused(["export", str(checkpoint), "--out", f"{READ_ONLY}/exported"], capsys, workdir,
                   message="--out")
    with pytest.raises(LlmevoError, match=re.escape(f"cannot write {READ_ONLY}/exported: ")):
        export_hf(checkpoint, f"{READ_ONLY}/exported")


def test_export_into_a_folder_without_write_permission(checkpoint, tmp_path):
    from llmevo.hf.export import export_hf

    locked = _read_only_by_permissions(tmp_path / "locked")
    with pytest.raises(LlmevoError, match=re.escape(f"cannot write {locked}/exported: permission denied")):
        export_hf(checkpoint, locked / "exported")


# --- checkpoints -----------------------------------------------------------------------------

def test_save_checkpoints_on_a_full_disk_is_one_line_and_leaves_nothing(capsys, workdir,
                                                                        safetensors_disk_full):
    args = ["reproduce", "rope", *SMOKE, "--no-report", "--out", str(workdir / "runs" / "a.json"),
            "--save-checkpoints", str(workdir / "ckpt")]
    safetensors_disk_full()
    err = assert_refused(args, capsys, workdir)
    assert re.search(rf"cannot write {at(workdir)}/ckpt/(baseline|method)/model\.safetensors: {FULL}",
                     one_line(err)), err


def _model():
    from llmevo.catalog import build_model
    from llmevo.model.config import ModelConfig

    config = ModelConfig()
    return build_model(config), config


@pytest.mark.parametrize("files_ok", [0, 1, 2])  # the weights, the tokenizer, the config fail
def test_save_checkpoint_is_all_or_nothing(tmp_path, disk_full, files_ok):
    from llmevo.inference.checkpoint import save_checkpoint

    model, config = _model()
    folder = tmp_path / "ckpt"
    disk_full(files_ok)
    failing = ["model.safetensors", "tokenizer.json", "config.json"][files_ok]
    with pytest.raises(LlmevoError, match=re.escape(f"cannot write {folder}/{failing}: {FULL}")):
        save_checkpoint(folder, model, config, tokenizer_json="{}")
    assert list(tmp_path.iterdir()) == []  # no folder, no staging left beside it


def test_a_failed_checkpoint_write_keeps_the_checkpoint_that_was_there(tmp_path,
                                                                       safetensors_disk_full):
    from llmevo.inference.checkpoint import load_checkpoint, save_checkpoint

    model, config = _model()
    folder = tmp_path / "ckpt"
    save_checkpoint(folder, model, config, tokenizer_json="{}", metadata={"run": 1})
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    safetensors_disk_full()
    with pytest.raises(LlmevoError, match=re.escape(f"cannot write {folder}/model.safetensors: {FULL}")):
        save_checkpoint(folder, model, config, tokenizer_json="{}", metadata={"run": 2})
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert load_checkpoint(folder).metadata == {"run": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


# --- caches written before work: the tokenizer and the token arrays ---------------------------

def test_tokenizer_cache_on_a_full_disk_names_the_file(tmp_path, capsys, workdir, disk_full,
                                                       monkeypatch):
    from llmevo.data.tokenizer import TOKENIZER_NAME, load_or_train_bpe

    cache = tmp_path / "cache"
    disk_full()
    with pytest.raises(LlmevoError, match=rf"cannot write {at(cache)}/tokenizers/\w+/{TOKENIZER_NAME}: {FULL}"):
        load_or_train_bpe({"text": "0" * 64}, ["The river runs to the sea. " * 50], cache, 300)
    assert not [p for p in cache.rglob("*") if p.is_file()]
    monkeypatch.setenv("LLMEVO_CACHE", str(cache))
    refused_leaving_no_file(["reproduce", "rope", *SMOKE, "--out", str(workdir / "a.json")], capsys,
                            workdir, rf"cannot write {at(cache)}/tokenizers/\w+/{TOKENIZER_NAME}: {FULL}")


def test_token_cache_on_a_full_disk_names_the_file(tmp_path, data_dir, cache_dir, smoke_corpus,
                                                   disk_full):
    import shutil

    from llmevo.data.lm import load_lm_corpus
    from llmevo.runner.presets import get_preset

    cache = tmp_path / "cache"
    shutil.copytree(cache_dir / "tokenizers", cache / "tokenizers")  # the tokenizer is cached
    disk_full()
    with pytest.raises(LlmevoError, match=rf"cannot write {at(cache)}/tokens/\w+\.npz: {FULL}"):
        load_lm_corpus(data_dir, "tokens", get_preset("smoke").budgets, cache)
    assert not list((cache / "tokens").glob("*"))


# --- reports and TensorBoard -------------------------------------------------------------------

def _docs_artifact() -> Path:
    return sorted((REPO_ROOT / "docs" / "reproductions").glob("*/metrics/*.json"))[0]


@pytest.mark.parametrize("files_ok", [0, 1])
def test_report_on_a_full_disk_names_the_file(capsys, workdir, disk_full, files_ok):
    """A report is several files, each written atomically, README.md last: a full disk stops
    it with one line naming the file; no file is half-written and no README points at plots
    that were not written."""
    from llmevo.artifacts.schema import load_artifact
    from llmevo.reports.readme import write_report

    out = workdir / "report"
    failed = rf"cannot write {at(out)}/(plots/\S+\.png|README\.md): {FULL}"
    disk_full(files_ok)
    status = run_cli(["report", str(_docs_artifact()), "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(failed, one_line(err)), err
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert len(written) == files_ok and "README.md" not in written
    disk_full(files_ok)
    with pytest.raises(LlmevoError, match=failed):
        write_report(load_artifact(_docs_artifact()), _docs_artifact(), out)


def test_tensorboard_on_a_full_disk_is_one_line_and_keeps_no_torn_log(tmp_path, capfd, disk_full):
    pytest.importorskip("tensorboard")
    from llmevo.train.logging import StepRecord, TensorBoardLogs

    run = TensorBoardLogs(tmp_path / "tb").run("method-seed42")
    for step in range(3):
        run.log_step(StepRecord(step, 1.0, 1e-3, 0.5, 64))
    disk_full()
    with pytest.raises(LlmevoError, match=rf"cannot write {at(tmp_path)}/tb/method-seed42/events\.out\.tfevents\.\S+: {FULL}"):
        run.close()
    assert not [p for p in (tmp_path / "tb").rglob("*") if p.is_file()]
    assert "Traceback" not in capfd.readouterr().err  # no writer thread printing its own


def test_reproduce_tensorboard_on_a_full_disk(capsys, workdir, disk_full, smoke_corpus):
    pytest.importorskip("tensorboard")
    disk_full()
    refused_leaving_no_file(
        ["reproduce", "rope", *SMOKE, "--no-report", "--out", str(workdir / "a.json"),
         "--tracker", "tensorboard", "--tracker-dir", str(workdir / "tb")], capsys, workdir,
        rf"cannot write {at(workdir)}/tb/{workdir.name}/a/\w+-seed42/events\.out\.tfevents\.\S+: {FULL}")


# --- data fetch: the disk -------------------------------------------------------------------

# the first file `data fetch` downloads: the first pinned file the package does not carry (those
# it carries are unpacked, never downloaded)
FIRST_PIECE = ".partial/wikitext-2-raw__wiki.train.raw.0"


def test_data_fetch_on_a_full_disk_says_so_not_resume(capsys, full_data_dir, workdir):  # full_data_dir first: workdir sets LLMEVO_DATA
    """The disk fills while a piece is written (the real /dev/full): the message names the
    file and the cause; no "interrupted … run again to resume", nothing kept."""
    if not Path("/dev/full").exists() or not stat.S_ISCHR(Path("/dev/full").stat().st_mode):
        pytest.skip("no /dev/full here")
    dest = workdir / "data"
    (dest / ".partial").mkdir(parents=True)
    (dest / FIRST_PIECE).symlink_to("/dev/full")  # where the first piece is written
    with serve_mirror(full_data_dir) as mirror:
        status = run_cli(["data", "fetch", "--to", str(dest), "--base-url", mirror.base_url])
    err = one_line(capsys.readouterr().err)
    assert status == 2 and "Traceback" not in err, err
    assert f"cannot write {dest / FIRST_PIECE}: {FULL}" in err
    assert "interrupted" not in err and "resume" not in err
    assert files_under(workdir) == {Path("data")}


def test_data_fetch_api_on_a_full_disk_keeps_nothing(tmp_path, data_dir, disk_full):
    from llmevo.data.fetch import fetch_data

    dest = tmp_path / "data"
    with serve_mirror(data_dir) as mirror:
        disk_full()
        with pytest.raises(LlmevoError, match=re.escape(f"cannot write {dest}/.partial/tinyshakespeare__input.txt.0: {FULL}")):
            fetch_data(dest, mirror.base_url, targets=["tinyshakespeare/input.txt"])
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_data_fetch_into_a_read_only_folder(capsys, workdir):
    from llmevo.data.fetch import fetch_data

    assert_refused(["data", "fetch", "--to", f"{READ_ONLY}/data"], capsys, workdir, message="--to")
    with pytest.raises(LlmevoError, match=re.escape(f"cannot write {READ_ONLY}/data: ")):
        fetch_data(Path(READ_ONLY) / "data", targets=["tinyshakespeare/input.txt"])


# --- data fetch: the URL and a stalled server -------------------------------------------------

BAD_URLS = ["not a url", "http://[::1", "ftp://example.org/mirror", "http://", "file:///tmp",
            "http://example.org:99999", "http://example.org:port", "http://example.org/?q=1",
            "http://exa mple.org", ""]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_bad_base_url_is_refused_before_anything_is_written(url, capsys, workdir):
    from llmevo.data.fetch import fetch_data

    assert_refused(["data", "fetch", "--to", str(workdir / "data"), "--base-url", url], capsys,
                   workdir, message="data mirror URL")
    with pytest.raises(ConfigError, match="data mirror URL"):
        fetch_data(workdir / "data", url)
    assert files_under(workdir) == set()


def test_a_bad_base_url_from_the_environment_is_refused(capsys, workdir, monkeypatch):
    monkeypatch.setenv("LLMEVO_DATA_URL", "http://[::1")
    assert_refused(["data", "fetch", "--to", str(workdir / "data")], capsys, workdir,
                   message="data mirror URL 'http://[::1'")


@contextlib.contextmanager
def silent_server(send: bytes = b"", lifetime: float = 30.0) -> Iterator[str]:
    """A server on 127.0.0.1 that accepts every connection, reads the request, sends ``send``
    and then nothing, until the block ends (or ``lifetime`` seconds, whichever is first)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop, held = threading.Event(), []

    def serve() -> None:
        deadline = time.monotonic() + lifetime
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connection.settimeout(1.0)
            with contextlib.suppress(OSError):
                connection.recv(65536)
                connection.sendall(send)
            held.append(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for connection in held:
            connection.close()
        listener.close()


def test_a_server_that_never_answers_is_named_after_the_timeout(capsys, workdir):
    from llmevo.data.fetch import fetch_data

    with silent_server() as url:
        host = url.removeprefix("http://")
        started = time.monotonic()
        err = assert_refused(["data", "fetch", "--to", str(workdir / "data"), "--base-url", url,
                              "--timeout", "0.5"], capsys, workdir)
        assert time.monotonic() - started < 10
        assert f"{host} did not answer within 0.5 s" in one_line(err), err
        with pytest.raises(DataError, match=f"{host} did not answer within 0.5 s"):
            fetch_data(workdir / "data", url, targets=["tinyshakespeare/input.txt"], timeout=0.5)
    assert files_under(workdir) == set()


def test_a_server_that_stops_sending_is_named_and_the_download_resumable(tmp_path):
    from llmevo.data.fetch import fetch_data

    headers = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 10
    with silent_server(send=headers) as url:
        host = url.removeprefix("http://")
        with pytest.raises(DataError, match=f"{host} sent nothing for 0.5 s.*resume"):
            fetch_data(tmp_path, url, targets=["tinyshakespeare/input.txt"], timeout=0.5)


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf"])
def test_a_bad_timeout_is_refused(timeout, capsys, workdir):
    from llmevo.data.fetch import fetch_data

    assert_refused(["data", "fetch", "--to", str(workdir / "data"), f"--timeout={timeout}"], capsys,
                   workdir, message="timeout")
    with pytest.raises(ConfigError, match="timeout"):
        fetch_data(workdir / "data", timeout=float(timeout))


# --- input that does not decode ---------------------------------------------------------------

# Python hands command-line bytes that are not UTF-8 to sys.argv as lone surrogates
# (b"\xff" -> "\udcff"); so does the shell's $'\xed\xa0\x80' (an encoded surrogate).
NOT_UTF8 = {"byte 0xff": "The \udcff river", "encoded surrogate": "\udced\udca0\udc80"}


@pytest.mark.parametrize("prompt", list(NOT_UTF8.values()), ids=list(NOT_UTF8))
def test_generate_refuses_a_prompt_that_is_not_utf8(prompt, checkpoint, capsys, workdir):
    assert_refused(["generate", "--checkpoint", str(checkpoint), "--prompt", prompt, "--threads",
                    "1", "--device", "cpu", "--max-tokens", "2"], capsys, workdir,
                   message="--prompt is not valid UTF-8")


def _preference_files(folder: Path) -> dict[str, tuple[Path, str]]:
    binary = folder / "binary.jsonl"
    binary.write_bytes(bytes(range(256)) * 8)
    turn = "\n\nHuman: hello there\n\nAssistant: "
    surrogate = folder / "surrogate.jsonl"
    surrogate.write_text("".join(
        json.dumps({"chosen": turn + "\ud800 fine", "rejected": turn + "no"}) + "\n"
        for _ in range(8)), encoding="utf-8")
    return {"binary": (binary, "not UTF-8 text"),
            "lone surrogate": (surrogate, "line 0: 'chosen' holds a lone surrogate")}


@pytest.mark.parametrize("case", ["binary", "lone surrogate"])
def test_a_preference_file_that_is_not_text_is_refused(case, capsys, workdir, tmp_path, data_dir,
                                                      cache_dir):
    from llmevo.experiments.pipeline import ReproductionRequest, reproduce

    path, message = _preference_files(tmp_path)[case]
    assert_refused(["reproduce", "dpo", *SMOKE, "--preference-file", str(path),
                    "--out", str(workdir / "a.json")], capsys, workdir, message=message)
    request = ReproductionRequest(name="dpo", preset="smoke", steps=2, seeds=[42], threads=1,
                                  device="cpu", data_dir=data_dir, cache_dir=cache_dir,
                                  out=workdir / "a.json", preference_file=path)
    with pytest.raises(DataError, match=re.escape(message)):
        reproduce(request)
    assert files_under(workdir) == set()


def test_an_output_path_that_is_not_utf8_is_refused_before_work(checkpoint, capsys, workdir,
                                                                data_dir, cache_dir):
    from llmevo.experiments.pipeline import ReproductionRequest, reproduce

    odd = workdir / "r\udcff.json"
    assert_refused(["reproduce", "rope", *SMOKE, "--out", str(odd)], capsys, workdir,
                   message="is not valid UTF-8")
    assert_refused(["export", str(checkpoint), "--out", str(workdir / "e\udcff")], capsys, workdir,
                   message="is not valid UTF-8")
    request = ReproductionRequest(name="rope", preset="smoke", steps=2, seeds=[42], threads=1,
                                  device="cpu", data_dir=data_dir, cache_dir=cache_dir, out=odd)
    with pytest.raises(ConfigError, match="is not valid UTF-8"):
        reproduce(request)
    assert files_under(workdir) == set()
