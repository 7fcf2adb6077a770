"""Download every data set the presets use, at pinned revisions, checked against the pins.

Each file llmevo reads is rebuilt from its public source exactly as its ``SOURCE.md``
describes: a raw file of a GitHub repository at a fixed commit, the byte concatenation of
consecutive pieces (the WikiText-2 train splits), or the gunzip of a ``.gz`` (HH-RLHF).
The result must match the sha256 pin llmevo already keeps (``sums.LM_FILE_SHA256``,
``sums.SUITE_FILE_SHA256``) before it is written (atomically) into place, so a target file is
never half-written and a file altered in transit is refused with nothing left behind.

Pieces are downloaded into ``<dest>/.partial/``; an interrupted download (the connection
broke, or the server stopped sending for ``timeout`` seconds) keeps what it got and the next
run resumes it with an HTTP ``Range`` request (or restarts it when the server ignores the
range). A piece whose write failed (a full disk) is removed instead: its bytes are not
trusted, and the message says which file could not be written and why. Files already present
with the pinned sum are not downloaded again.

The base URL is a parameter (``DEFAULT_BASE_URL`` is GitHub's raw-file host); a mirror
serves the same ``{base}/{owner}/{repo}/{commit}/{path}`` layout over http(s). It and the
timeout are checked before anything is written.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from llmevo.artifacts.io import StreamFile, make_folder, write_bytes_atomic
from llmevo.data.sums import LM_FILE_SHA256 as PINNED_SHA256
from llmevo.data.sums import SUITE_FILE_SHA256
from llmevo.digests import sha256_file as file_sha256
from llmevo.errors import ConfigError, DataError

DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
DEFAULT_TIMEOUT = 30.0  # seconds a server may send nothing before the download counts as stalled
PARTIAL_DIR = ".partial"
_BLOCK = 1 << 20


@dataclass(frozen=True)
class Piece:
    """One file of a public repository at a fixed commit."""

    repo: str  # owner/name
    commit: str
    path: str

    def url(self, base_url: str) -> str:
        return f"{base_url.rstrip('/')}/{self.repo}/{self.commit}/{self.path}"


@dataclass(frozen=True)
class RemoteFile:
    """A data file llmevo reads (``target``, relative) and how to rebuild it from pieces."""

    target: str
    pieces: tuple[Piece, ...]
    gunzip: bool = False

    @property
    def sha256(self) -> str:
        return ALL_PINS[self.target]


ALL_PINS: dict[str, str] = {**PINNED_SHA256, **SUITE_FILE_SHA256}

_WIKI_TOKENS = ("MajidAhmadyDev/myNLWikiText2P", "edd9c983db11dc333e382b394d6f02add93e259d")
_WIKI_RAW = ("qwu01/transformers_LM", "4b4c728ea540147df8b8c951f7eaf9f462883607")
_SDP = ("wyshi/sdp_transformers", "67f51dacb983f17926a3376ec10b374c0ef0588a")


def _split_pieces(folder: str, count: int) -> tuple[Piece, ...]:
    return tuple(Piece(*_SDP, f"{folder}/train_{index}.txt") for index in range(count))


REMOTE_FILES: tuple[RemoteFile, ...] = (
    RemoteFile("wikitext-2/wiki.train.tokens", _split_pieces("data/wikitext-2/train_split_10", 10)),
    RemoteFile("wikitext-2/wiki.valid.tokens", (Piece(*_WIKI_TOKENS, "dataset/wikitext-2/wiki.valid.tokens"),)),
    RemoteFile("wikitext-2/wiki.test.tokens", (Piece(*_WIKI_TOKENS, "dataset/wikitext-2/wiki.test.tokens"),)),
    RemoteFile("wikitext-2-raw/wiki.train.raw", _split_pieces("data/wikitext-2-raw/train_split_5", 5)),
    RemoteFile("wikitext-2-raw/wiki.valid.raw", (Piece(*_WIKI_RAW, "data/wikitext2/wiki.valid.raw"),)),
    RemoteFile("wikitext-2-raw/wiki.test.raw", (Piece(*_WIKI_RAW, "data/wikitext2/wiki.test.raw"),)),
    RemoteFile(
        "tinyshakespeare/input.txt",
        (Piece("karpathy/char-rnn", "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e", "data/tinyshakespeare/input.txt"),),
    ),
    RemoteFile(
        "alpaca/alpaca_5000.json",
        (Piece("tatsu-lab/stanford_alpaca", "5e69c50054c48cd3b919c46d13bb2d92a62f4498", "data/alpaca_5000.json"),),
    ),
    RemoteFile(
        "gsm8k/test.jsonl",
        (Piece("openai/grade-school-math", "3101c7d5072418e28b9008a6636bde82a006892c", "grade_school_math/data/test.jsonl"),),
    ),
    RemoteFile(
        "hh-rlhf/helpful-base/test.jsonl",
        (Piece("DaehanKim/EasyRLHF", "45eccb72ddb8c18aa52dc2a184516380e06582fe", "data/helpful-base/test.jsonl.gz"),),
        gunzip=True,
    ),
    RemoteFile(
        "hh-rlhf/harmless-base/test.jsonl",
        (Piece("anthropics/hh-rlhf", "354e5c3cb8960630860dd5774a6ac2a58313bf4d", "harmless-base/test.jsonl.gz"),),
        gunzip=True,
    ),
)


@dataclass(frozen=True)
class FileStatus:
    target: str
    state: str  # "ok" | "missing" | "altered"
    detail: str = ""


def check_data(data_dir: Path, files: Iterable[RemoteFile] = REMOTE_FILES) -> list[FileStatus]:
    """The state of every data file under ``data_dir``: ok, missing or altered."""
    statuses = []
    for remote in files:
        path = data_dir / remote.target
        if not path.is_file():
            statuses.append(FileStatus(remote.target, "missing"))
            continue
        actual = file_sha256(path)
        if actual == remote.sha256:
            statuses.append(FileStatus(remote.target, "ok"))
        else:
            statuses.append(
                FileStatus(remote.target, "altered", f"sha256 {actual[:16]}…, pinned {remote.sha256[:16]}…")
            )
    return statuses


def select(targets: Iterable[str] | None) -> tuple[RemoteFile, ...]:
    """The remote files named by ``targets`` (None: all); an unknown name is a DataError."""
    if targets is None:
        return REMOTE_FILES
    by_name = {remote.target: remote for remote in REMOTE_FILES}
    unknown = sorted(set(targets) - set(by_name))
    if unknown:
        raise DataError(f"unknown data files {unknown}; known: {', '.join(sorted(by_name))}")
    return tuple(by_name[name] for name in targets)


def check_base_url(base_url: str) -> None:
    """A mirror's base URL: http(s), a host, a valid port, no query or fragment (the file
    paths are appended to it), no spaces or control characters; else a ``ConfigError``."""
    where = f"data mirror URL {base_url!r}"
    if any(character.isspace() or not character.isprintable() for character in base_url):
        raise ConfigError(f"{where} holds a space or a control character")
    try:
        parts = urllib.parse.urlsplit(base_url)
        parts.port  # noqa: B018  (a port that is not a number in 0..65535 raises here)
    except ValueError as error:
        raise ConfigError(f"{where} is not a URL ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: expected http:// or https:// and a host, e.g. {DEFAULT_BASE_URL}")
    if parts.query or parts.fragment:
        raise ConfigError(f"{where}: a base URL has no query or fragment (file paths are appended to it)")


def check_timeout(timeout: float) -> None:
    """How long a server may stay silent: a finite number of seconds > 0."""
    if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise ConfigError(f"timeout {timeout!r}: expected a finite number of seconds > 0")


def _host(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


Progress = Callable[[int, int | None], None]  # (bytes of the piece so far, its size or None)


def _download_piece(url: str, partial: Path, timeout: float, progress: Progress | None = None) -> None:
    """Append the rest of ``url`` to ``partial`` (Range from its size); restart on a 200.
    ``progress`` hears the bytes of the piece held so far after each block."""
    have = partial.stat().st_size if partial.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:  # nothing left to fetch: the partial is complete
            return
        raise DataError(f"{url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, TimeoutError):
            raise DataError(f"{_host(url)} did not answer within {timeout:g} s ({url}); try again "
                            "later, or wait longer with --timeout SECONDS") from None
        raise DataError(f"{url}: cannot connect ({reason})") from None
    held = have if response.status == 206 else 0  # 200: all again
    size = None if response.length is None else held + response.length
    with response, StreamFile(partial, append=response.status == 206) as handle:
        while block := _next_block(response, url, timeout):
            handle.write(block)
            held += len(block)
            if progress is not None:
                progress(held, size)
        missing = response.length  # bytes the server announced but did not send
    if missing:
        raise DataError(
            f"{url}: download interrupted with {missing} bytes missing; what arrived is kept "
            "in .partial/ — run the same command again to resume"
        )


def _next_block(response: http.client.HTTPResponse, url: str, timeout: float) -> bytes:
    """The next block of the body; empty at its end or where the connection broke (what is
    missing is counted by the caller); a server that stops sending is a ``DataError``."""
    try:
        return response.read(_BLOCK)
    except TimeoutError:
        raise DataError(
            f"{_host(url)} sent nothing for {timeout:g} s during {url}; what arrived is kept in "
            ".partial/ — run the same command again to resume (or wait longer with --timeout SECONDS)"
        ) from None
    except (OSError, http.client.HTTPException):
        return b""


def _assembled(remote: RemoteFile, partials: list[Path]) -> Iterator[bytes]:
    """The target's bytes block by block: the pieces in order, each gunzipped for a .gz source."""
    opener = gzip.open if remote.gunzip else open
    for partial in partials:
        try:
            with opener(partial, "rb") as source:
                while block := source.read(_BLOCK):
                    yield block
        except (OSError, EOFError) as error:  # a corrupt gzip stream
            raise DataError(f"{remote.target}: downloaded {partial.name} cannot be read ({error}); "
                            "nothing was kept") from None


def _remove(partials: list[Path], staging: Path) -> None:
    for partial in partials:
        partial.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # only when nothing else is kept there
        staging.rmdir()


def fetch_file(
    remote: RemoteFile, dest: Path, base_url: str = DEFAULT_BASE_URL, timeout: float = DEFAULT_TIMEOUT,
    progress: Callable[[int, int, int, int | None], None] | None = None,
) -> bool:
    """Download, check and place one file; False if it was already there with the pinned sum.
    ``progress(piece index, piece count, bytes of the piece so far, its size or None)``."""
    check_base_url(base_url)
    check_timeout(timeout)
    target = dest / remote.target
    if target.is_file() and file_sha256(target) == remote.sha256:
        return False
    staging = make_folder(dest / PARTIAL_DIR)
    stem = remote.target.replace("/", "__")
    partials = [staging / f"{stem}.{index}" for index in range(len(remote.pieces))]
    try:
        for index, (piece, partial) in enumerate(zip(remote.pieces, partials, strict=True)):
            hear = None if progress is None else (
                lambda held, size, index=index: progress(index, len(partials), held, size))
            _download_piece(piece.url(base_url), partial, timeout, hear)
    finally:
        with contextlib.suppress(OSError):  # a folder left empty (nothing arrived to resume)
            staging.rmdir()
    try:
        data = b"".join(_assembled(remote, partials))
        actual = hashlib.sha256(data).hexdigest()
        if actual != remote.sha256:
            raise DataError(
                f"{remote.target}: downloaded bytes have sha256 {actual}, not the pinned "
                f"{remote.sha256} (altered in transit or a different release); nothing was kept"
            )
    except DataError:  # checked and refused: the pieces are of no further use
        _remove(partials, staging)
        raise
    write_bytes_atomic(target, data)  # if this fails, the checked pieces stay for the next run
    _remove(partials, staging)
    return True


def fetch_data(
    dest: Path,
    base_url: str = DEFAULT_BASE_URL,
    targets: Iterable[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    on_file: Callable[[RemoteFile, bool], None] | None = None,
    progress: Callable[[RemoteFile, int, int, int, int | None], None] | None = None,
) -> list[FileStatus]:
    """Fetch every data file (or ``targets``) into ``dest``; returns ``check_data`` after.

    ``timeout``: seconds a server may send nothing (to connect, to answer, between blocks)
    before it counts as stalled. The URL and the timeout are checked before anything is
    written; a failed write is a ``WriteError`` naming the file and the cause.
    """
    files = select(targets)
    check_base_url(base_url)
    check_timeout(timeout)
    created = not dest.exists()
    make_folder(dest)
    try:
        for remote in files:
            hear = None if progress is None else (
                lambda *state, remote=remote: progress(remote, *state))
            downloaded = fetch_file(remote, dest, base_url, timeout, hear)
            if on_file is not None:
                on_file(remote, downloaded)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):  # only when nothing arrived
                dest.rmdir()
        raise
    return check_data(dest, files)


def upstream_piece_bytes(data_dir: Path, remote: RemoteFile, index: int) -> bytes:
    """What the public source serves for ``remote.pieces[index]``, rebuilt from a checked copy.

    The inverse of ``fetch_file``'s assembly, for serving a mirror (e.g. to machines without a
    route to the public hosts, and in the tests): consecutive line pieces split as the
    upstream script did (``numpy.array_split`` of the lines), or a gzip of the file.
    """
    path = data_dir / remote.target
    data = path.read_bytes() if path.is_file() else b""
    if hashlib.sha256(data).hexdigest() != remote.sha256:
        raise DataError(f"{path}: missing, or not the file pinned as {remote.target}")
    if remote.gunzip:
        return gzip.compress(data, mtime=0)
    count = len(remote.pieces)
    if count == 1:
        return data
    lines = data.splitlines(keepends=True)
    size, extra = divmod(len(lines), count)
    start = sum(size + (1 if i < extra else 0) for i in range(index))
    stop = start + size + (1 if index < extra else 0)
    return b"".join(lines[start:stop])
