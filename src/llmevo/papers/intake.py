"""arXiv API calls through the ``arxiv`` package (a kept client: query syntax, pagination,
the polite delay between requests, retries), never a client of our own.

``search`` turns a query, categories and a start date into the API's query syntax
(``all:sigmoid AND all:attention AND (cat:cs.CL OR cat:cs.LG) AND submittedDate:[...]``) and
returns at most ``max_results`` records; ``fetch`` looks one paper up by id. Both take an
``ArxivSettings``: the API address (a mirror, or the loopback server of the tests), page
size, delay and retries. Every failure is one line: a malformed id or date before any
request, an unknown id, an API that keeps failing after the package's retries.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, ValidationError

from llmevo.errors import ConfigError, LlmevoError
from llmevo.papers.ledger import (
    CATEGORY,
    PaperEntry,
    check_entry,
    describe_decision,
    load_ledger,
    make_entry,
    normalize_arxiv_id,
    parse_decision,
    save_ledger,
)
from llmevo.registry import StrictModel, one_line_error

if TYPE_CHECKING:
    import arxiv

ARXIV_API = "https://export.arxiv.org/api/query"


class ArxivUnavailable(LlmevoError):
    """The arXiv API could not be reached or kept failing after the client's retries."""


class ArxivSettings(StrictModel):
    """How the client talks to the API; the defaults are the arXiv terms of use (one request
    every three seconds) and the ``arxiv`` package's own."""

    api_url: str = Field(default=ARXIV_API, pattern=r"^https?://\S+$")
    page_size: PositiveInt = Field(default=100, le=2000)  # the API's limit per page
    delay_seconds: NonNegativeFloat = 3.0
    num_retries: NonNegativeInt = 3
    timeout_seconds: float = Field(default=30.0, gt=0, allow_inf_nan=False)  # per request: a server that never answers is an error


class PaperRecord(StrictModel):
    """What the API says about one paper (the fields the ledger keeps, and the date)."""

    arxiv_id: str
    title: str
    authors: list[str]
    published: date
    primary_category: str
    categories: list[str]

    @property
    def year(self) -> int:
        return self.published.year


def settings(api_url: str = ARXIV_API, page_size: int = 100, delay_seconds: float = 3.0,
             num_retries: int = 3, timeout_seconds: float = 30.0) -> ArxivSettings:
    """``ArxivSettings`` from plain values; a bad one is a one-line ``ConfigError``."""
    try:
        return ArxivSettings(api_url=api_url, page_size=page_size, delay_seconds=delay_seconds,
                             num_retries=num_retries, timeout_seconds=timeout_seconds)
    except ValidationError as error:
        raise one_line_error(error, "arXiv client") from None


def parse_since(text: str) -> date:
    """``--since`` as a date (``2024-06-01``); anything else is a one-line ``ConfigError``."""
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"--since {text}: not a date; expected YYYY-MM-DD, e.g. 2024-06-01") from None


def parse_categories(text: str) -> list[str]:
    """``cs.CL,cs.LG`` as a list; an entry that is not an arXiv category is an error."""
    categories = [item.strip() for item in text.split(",") if item.strip()]
    if not categories:
        raise ConfigError("--category: no category given; e.g. --category cs.CL,cs.LG")
    for category in categories:
        if not CATEGORY.match(category):
            raise ConfigError(f"--category {category}: not an arXiv category (e.g. cs.CL, stat.ML)")
    return categories


def build_query(text: str, categories: list[str], since: date | None,
                until: date | None = None) -> str:
    """The API's query: plain words are each searched in all fields (``all:word``, joined by
    AND); a query that already uses the field syntax (``ti:``, ``abs:``, ``au:`` ...) is kept
    as written. Categories are OR-ed; ``since`` bounds the submission date from below."""
    query = text.strip()
    if not query:
        raise ConfigError("the search query is empty; e.g. llmevo papers search 'sigmoid attention'")
    if not re.search(r"\b(ti|au|abs|co|jr|cat|rn|id|all|submittedDate):", query):
        query = " AND ".join(f"all:{word}" for word in query.split())
    parts = [f"({query})" if len(categories) + (since is not None) else query]
    if categories:
        parts.append("(" + " OR ".join(f"cat:{category}" for category in categories) + ")")
    if since is not None:
        end = until or datetime.now(UTC).date()
        parts.append(f"submittedDate:[{since:%Y%m%d}0000 TO {end:%Y%m%d}2359]")
    return " AND ".join(parts)


class NotAFeed(LlmevoError):
    """The API answered 200 with something that is not an Atom feed (an HTML page, a portal)."""


ATOM_FEED = "{http://www.w3.org/2005/Atom}feed"


def check_feed(content: bytes, url: str, content_type: str | None = None) -> None:
    """Refuse a reply that is not an Atom feed: the client parses any XML it can recover and
    reads an HTML page (a captive portal, a wrong ``--api-url``) as a feed of no papers."""
    from lxml import etree

    try:
        root = etree.fromstring(content, etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError:
        root = None
    if root is None or root.tag != ATOM_FEED:
        found = "a reply that is not XML" if root is None else f"a <{etree.QName(root).localname}> document"
        sent = f" ({content_type})" if content_type else ""
        raise NotAFeed(f"the arXiv API at {url} answered with {found}{sent}, not an Atom feed; "
                       "check --api-url")


def _guard(session: Any, config: ArxivSettings) -> None:
    """Give the client's ``requests`` session a timeout on every request (the ``arxiv`` client
    passes none, so a server that never answers would hang it, whatever the retries) and check
    every 200 reply to be an Atom feed (``check_feed``)."""
    request = session.request

    def timed(method: str, url: str, **options: Any) -> Any:
        options.setdefault("timeout", config.timeout_seconds)
        return request(method, url, **options)

    def feed_only(response: Any, *args: Any, **options: Any) -> Any:
        if response.status_code == 200:
            check_feed(response.content, config.api_url, response.headers.get("Content-Type"))
        return response

    session.request = timed
    session.hooks["response"].append(feed_only)


def _client(config: ArxivSettings) -> arxiv.Client:
    import arxiv

    client = arxiv.Client(page_size=config.page_size, delay_seconds=config.delay_seconds,
                          num_retries=config.num_retries)
    client.query_url_format = config.api_url.rstrip("?") + "?{}"
    # the package keeps its requests.Session as ``_session`` and offers no timeout of its own
    _guard(client._session, config)
    return client


def _record(result: arxiv.Result) -> PaperRecord:
    return PaperRecord(
        arxiv_id=re.sub(r"v\d+$", "", result.get_short_id()),
        title=" ".join(result.title.split()),
        authors=[author.name for author in result.authors],
        published=result.published.date(),
        primary_category=result.primary_category,
        categories=result.categories,
    )


def _results(config: ArxivSettings, search: arxiv.Search) -> list[PaperRecord]:
    """Every record of ``search``; the client's last failure as one line."""
    import arxiv
    import requests

    try:
        return [_record(result) for result in _client(config).results(search)]
    except arxiv.HTTPError as error:
        raise ArxivUnavailable(f"the arXiv API at {config.api_url} answered HTTP {error.status} "
                               f"({config.num_retries + 1} tries); try again later") from None
    except arxiv.UnexpectedEmptyPageError:
        raise ArxivUnavailable(f"the arXiv API at {config.api_url} returned an empty page "
                               f"({config.num_retries + 1} tries); try again later") from None
    except requests.Timeout:
        raise ArxivUnavailable(f"the arXiv API at {config.api_url} did not answer within "
                               f"{config.timeout_seconds:g} s (--timeout); try again later") from None
    except requests.RequestException as error:
        raise ArxivUnavailable(f"cannot reach the arXiv API at {config.api_url}: "
                               f"{type(error).__name__}") from None


def search(text: str, *, categories: list[str] | None = None, since: date | None = None,
           max_results: int = 20, config: ArxivSettings | None = None) -> list[PaperRecord]:
    """At most ``max_results`` papers for the query, most relevant first (submitted on or
    after ``since`` when given)."""
    import arxiv

    if max_results < 1:
        raise ConfigError(f"--max {max_results}: must be at least 1")
    query = build_query(text, categories or [], since)
    records = _results(config or ArxivSettings(), arxiv.Search(query=query, max_results=max_results))
    return [record for record in records if since is None or record.published >= since]


def fetch(arxiv_id: str, config: ArxivSettings | None = None) -> PaperRecord:
    """The paper with this id; an id arXiv does not know is a one-line ``ConfigError``."""
    import arxiv

    bare = normalize_arxiv_id(arxiv_id)
    records = _results(config or ArxivSettings(), arxiv.Search(id_list=[bare], max_results=1))
    found = [record for record in records if record.arxiv_id == bare]
    if not found:
        raise ConfigError(f"arXiv has no paper {bare}; check the id (e.g. https://arxiv.org/abs/{bare})")
    return found[0]


def add_paper(ledger_path: Path, arxiv_id: str, *, decision: str | None, why: str, track: str,
              update: bool = False, config: ArxivSettings | None = None) -> PaperEntry:
    """Fetch ``arxiv_id`` and write it into the ledger at ``ledger_path`` with ``decision``
    (``--decision``'s words; None: queued, or the existing entry's decision when updating)
    and ``why``. An id already there is refused unless ``update``;
    every input is checked before the request, and nothing is written on a failure."""
    ledger = load_ledger(ledger_path)
    bare = normalize_arxiv_id(arxiv_id)
    existing = ledger.get(bare)
    chosen = (parse_decision(decision) if decision is not None
              else existing.decision if existing is not None else parse_decision("queued"))
    if existing is not None and not update:
        raise ConfigError(f"paper {bare} is already in the ledger ({describe_decision(existing.decision)}); "
                          "pass --update to fetch it again and replace its entry, or use "
                          "'llmevo papers decide' to change only the decision")
    if existing is None and update:
        raise ConfigError(f"--update: paper {bare} is not in the ledger; add it without --update")
    values = {"track": track, "source": "arxiv", "decision": chosen, "why": why}
    check_entry(values, arxiv_id=bare)  # a bad track or why fails before the request
    record = fetch(bare, config)
    entry = make_entry(record_values(record) | values)
    save_ledger(ledger.with_entry(entry), ledger_path)
    return entry


def record_values(record: PaperRecord) -> dict[str, Any]:
    """The ledger fields a record fills (the primary category first)."""
    categories = [record.primary_category] + [c for c in record.categories if c != record.primary_category]
    return {"arxiv_id": record.arxiv_id, "title": record.title, "authors": record.authors,
            "year": record.year, "categories": [c for c in categories if c]}
