"""A loopback stand-in for the arXiv API that serves the recorded responses in
``tests/fixtures/arxiv``: ``id_list=ID`` answers ``id-ID.xml`` (``id-unknown.xml`` for an id
without a file, as arXiv answers an empty feed), a search answers page ``start // page_size
+ 1`` of ``search-attention-page*.xml``. ``fail_first`` requests are answered 503 first (the
client must retry). It records every query and binds 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "arxiv"


@dataclass
class FakeArxiv:
    fail_first: int = 0
    queries: list[dict[str, str]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    url: str = ""

    def answer(self, query: dict[str, str]) -> tuple[int, bytes]:
        if len(self.statuses) < self.fail_first:
            return 503, b"Service Unavailable"
        if query.get("id_list"):
            found = FIXTURES / f"id-{query['id_list']}.xml"
            return 200, (found if found.exists() else FIXTURES / "id-unknown.xml").read_bytes()
        page = int(query.get("start", "0")) // int(query.get("max_results", "2")) + 1
        found = FIXTURES / f"search-attention-page{page}.xml"
        return (200, found.read_bytes()) if found.exists() else (404, b"no such page")


@contextlib.contextmanager
def serve_arxiv(fake: FakeArxiv | None = None) -> Iterator[FakeArxiv]:
    fake = fake or FakeArxiv()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            query = {key: values[0] for key, values in parse_qs(urlparse(self.path).query).items()}
            status, body = fake.answer(query)
            fake.queries.append(query)
            fake.statuses.append(status)
            self.send_response(status)
            self.send_header("Content-Type", "application/atom+xml; charset=UTF-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/api/query"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
