"""A bounded loopback HTTP mirror of the public data sources, built from a checked data dir
(a file the data dir lacks is a 404).

It serves ``{base}/{owner}/{repo}/{commit}/{path}`` like GitHub's raw-file host, honours
``Range`` requests, and can inject faults: ``alter`` (paths whose bytes are changed in
transit) and ``cut_once`` (paths whose first response stops half-way). It binds 127.0.0.1
only and shuts itself down after ``lifetime`` seconds even if a test forgets to.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from llmevo.data.fetch import REMOTE_FILES, upstream_piece_bytes


@dataclass
class Mirror:
    data_dir: Path
    alter: set[str] = field(default_factory=set)
    cut_once: set[str] = field(default_factory=set)
    ignore_range: bool = False  # answer every request with the whole file (200)
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    base_url: str = ""

    def body(self, url_path: str) -> bytes | None:
        """What the source serves at ``url_path``; None (a 404) for a file ``data_dir`` lacks."""
        for remote in REMOTE_FILES:
            for index, piece in enumerate(remote.pieces):
                if url_path == f"/{piece.repo}/{piece.commit}/{piece.path}":
                    if not (self.data_dir / remote.target).is_file():
                        return None
                    return upstream_piece_bytes(self.data_dir, remote, index)
        return None


def _handler(mirror: Mirror) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            range_header = self.headers.get("Range")
            mirror.requests.append((self.path, range_header))
            body = mirror.body(self.path)
            if body is None:
                self.send_error(404)
                return
            if self.path in mirror.alter:
                middle = len(body) // 2
                body = body[:middle] + bytes([body[middle] ^ 0x01]) + body[middle + 1 :]
            start = 0
            if range_header and range_header.startswith("bytes=") and not mirror.ignore_range:
                start = int(range_header[6:].split("-")[0])
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            payload = body[start:]
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.path in mirror.cut_once:
                mirror.cut_once.discard(self.path)
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(payload)

    return Handler


@contextlib.contextmanager
def serve_mirror(data_dir: Path, lifetime: float = 120.0, **faults) -> Iterator[Mirror]:
    """A running mirror on 127.0.0.1 (an ephemeral port) for the ``with`` block."""
    mirror = Mirror(data_dir=data_dir, **faults)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(mirror))
    server.daemon_threads = True
    mirror.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    watchdog = threading.Timer(lifetime, server.shutdown)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield mirror
    finally:
        watchdog.cancel()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


if __name__ == "__main__":
    # python tests/integration/data_mirror.py DATA_DIR COMMAND...: run COMMAND with
    # LLMEVO_DATA_URL pointing at a mirror of DATA_DIR (stopped when COMMAND ends).
    import os
    import subprocess
    import sys

    source, command = Path(sys.argv[1]), sys.argv[2:]
    with serve_mirror(source, lifetime=600.0) as running:
        env = {**os.environ, "LLMEVO_DATA_URL": running.base_url}
        print(f"mirror of {source} at {running.base_url}", flush=True)
        code = subprocess.run(command, env=env).returncode
    sys.exit(code)
