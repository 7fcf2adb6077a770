"""The paper ledger: every candidate paper with a decision, in the repository.

``docs/papers.json`` is the source of truth (this module's ``Ledger``, validated on every
read and write); ``docs/papers.md`` is generated from it (``render_markdown``) and written
with it, so the two never disagree. Each entry records the paper (arXiv id, title, authors,
year, categories), the track it belongs to (``attention``, ``optimizer``, ...), where its
metadata came from (``arxiv``: fetched through the API by ``llmevo papers add``; ``hand``:
written from the paper without the API, to be refreshed with ``papers add --update``), a
decision (queued; implemented, naming the registered component(s); rejected, with the
reason) and a one-line why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, ValidationError, field_validator, model_validator

from llmevo.artifacts.io import write_text_atomic
from llmevo.errors import ConfigError
from llmevo.registry import StrictModel, one_line_error

NEW_STYLE_ID = re.compile(r"^\d{4}\.\d{4,5}$")  # 2104.09864 (from April 2007)
OLD_STYLE_ID = re.compile(r"^[a-z][a-z\-]*(\.[A-Z]{2})?/\d{7}$")  # cs/0112017, math.GT/0309136
CATEGORY = re.compile(r"^[a-z][a-z\-]*(\.[A-Za-z][A-Za-z\-]*)?$")  # cs.CL, stat.ML, hep-th

OneLine = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, pattern=r"^[^\n\r]*$")]
ComponentName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_\-]*$")]


def normalize_arxiv_id(text: str) -> str:
    """The bare arXiv id of ``text``: ``arXiv:2104.09864v5``, ``https://arxiv.org/abs/2104.09864``
    and ``2104.09864`` are all ``2104.09864``; anything else is a one-line ``ConfigError``."""
    bare = text.strip()
    for prefix in ("https://arxiv.org/abs/", "http://arxiv.org/abs/", "arxiv.org/abs/", "arXiv:", "arxiv:"):
        if bare.startswith(prefix):
            bare = bare[len(prefix):]
    bare = re.sub(r"v\d+$", "", bare)
    if not (NEW_STYLE_ID.match(bare) or OLD_STYLE_ID.match(bare)):
        raise ConfigError(f"'{text}' is not an arXiv id; expected e.g. 2104.09864 or cs/0112017")
    return bare


class Queued(StrictModel):
    status: Literal["queued"] = "queued"


class Implemented(StrictModel):
    status: Literal["implemented"] = "implemented"
    components: list[ComponentName] = Field(min_length=1)


class Rejected(StrictModel):
    status: Literal["rejected"] = "rejected"
    reason: OneLine


Decision = Annotated[Queued | Implemented | Rejected, Field(discriminator="status")]


def parse_decision(text: str) -> Queued | Implemented | Rejected:
    """``queued``, ``implemented:rope`` / ``implemented:gelu,relu2`` or ``rejected:REASON``."""
    kind, _, rest = text.partition(":")
    kind = kind.strip()
    if kind == "queued" and not rest:
        return Queued()
    if kind == "implemented":
        names = [name.strip() for name in rest.split(",")]
        if not any(names):
            raise ConfigError("--decision implemented needs the component name(s): implemented:NAME[,NAME]")
        if not all(names):
            raise ConfigError(f"--decision '{text}': an empty component name; implemented:NAME[,NAME]")
        check_registered(names)
        try:
            return Implemented(components=names)
        except ValidationError as error:
            raise one_line_error(error, "--decision") from None
    if kind == "rejected":
        if not rest.strip():
            raise ConfigError("--decision rejected needs a reason: rejected:REASON")
        return Rejected(reason=rest)
    raise ConfigError(f"--decision '{text}': expected queued, implemented:COMPONENT[,COMPONENT] "
                      "or rejected:REASON")


def check_registered(names: list[str]) -> None:
    """Every name a decision marks implemented is a registered component (builtin or plugin),
    so that the ledger never points at nothing."""
    from llmevo.catalog import full_registry

    registry = full_registry()
    known = {spec.name for spec in registry.all()}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ConfigError(f"--decision implemented:{','.join(names)}: '{unknown[0]}' is not a registered "
                          "component (`llmevo components` lists them); register it first")


def describe_decision(decision: Queued | Implemented | Rejected) -> str:
    """The decision in the words of ``--decision`` (``implemented:rope``)."""
    if isinstance(decision, Implemented):
        return "implemented:" + ",".join(decision.components)
    if isinstance(decision, Rejected):
        return f"rejected:{decision.reason}"
    return "queued"


class PaperEntry(StrictModel):
    """One paper of the ledger."""

    arxiv_id: str
    title: OneLine
    authors: list[OneLine] = Field(min_length=1)
    year: int = Field(ge=1991, le=2100)
    categories: list[str] = Field(min_length=1)
    track: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9\-]*$")]
    source: Literal["arxiv", "hand"]
    decision: Decision
    why: OneLine

    @field_validator("arxiv_id")
    @classmethod
    def _bare_id(cls, value: str) -> str:
        if not (NEW_STYLE_ID.match(value) or OLD_STYLE_ID.match(value)):
            raise ValueError(f"'{value}' is not a bare arXiv id (e.g. 2104.09864, no version)")
        return value

    @field_validator("categories")
    @classmethod
    def _categories(cls, value: list[str]) -> list[str]:
        bad = [category for category in value if not CATEGORY.match(category)]
        if bad:
            raise ValueError(f"'{bad[0]}' is not an arXiv category (e.g. cs.CL)")
        return value

    @model_validator(mode="after")
    def _year_matches_id(self) -> PaperEntry:
        """A new-style id starts with the submission's two-digit year (``2104`` -> 2021)."""
        if NEW_STYLE_ID.match(self.arxiv_id) and self.year != 2000 + int(self.arxiv_id[:2]):
            raise ValueError(f"year {self.year} does not match arXiv id {self.arxiv_id} "
                             f"(submitted in {2000 + int(self.arxiv_id[:2])})")
        return self


class Ledger(StrictModel):
    """Every paper, each once, sorted by arXiv id (a stable order for diffs)."""

    papers: list[PaperEntry] = Field(default_factory=list)

    @field_validator("papers")
    @classmethod
    def _unique_and_sorted(cls, papers: list[PaperEntry]) -> list[PaperEntry]:
        seen: set[str] = set()
        for entry in papers:
            if entry.arxiv_id in seen:
                raise ValueError(f"paper {entry.arxiv_id} appears twice")
            seen.add(entry.arxiv_id)
        return sorted(papers, key=lambda entry: entry.arxiv_id)

    def get(self, arxiv_id: str) -> PaperEntry | None:
        return next((entry for entry in self.papers if entry.arxiv_id == arxiv_id), None)

    def require(self, arxiv_id: str) -> PaperEntry:
        """The entry of ``arxiv_id``, or a one-line error that says how to add it."""
        entry = self.get(normalize_arxiv_id(arxiv_id))
        if entry is None:
            raise ConfigError(f"paper {arxiv_id} is not in the ledger; add it first with "
                              f"'llmevo papers add {arxiv_id} --why TEXT'")
        return entry

    def with_entry(self, entry: PaperEntry) -> Ledger:
        """The ledger with ``entry`` added, or replacing the entry of its id."""
        others = [paper for paper in self.papers if paper.arxiv_id != entry.arxiv_id]
        return Ledger(papers=[*others, entry])


def markdown_path(json_path: Path) -> Path:
    """The generated table beside the ledger (``docs/papers.json`` -> ``docs/papers.md``)."""
    return json_path.with_suffix(".md")


def load_ledger(path: Path) -> Ledger:
    """The ledger at ``path`` (an absent file is an empty ledger); a file that is not a valid
    ledger is a one-line ``ConfigError`` naming the file and the first problem."""
    if not path.exists():
        return Ledger()
    if not path.is_file():
        raise ConfigError(f"ledger {path} is not a file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"ledger {path} is not JSON: {error}") from None
    try:
        return Ledger.model_validate(data)
    except ValidationError as error:
        raise one_line_error(error, f"ledger {path}") from None


def save_ledger(ledger: Ledger, path: Path) -> None:
    """Write the ledger (JSON) and its table (``markdown_path``), each atomically: the table
    is rendered first, so a failure leaves both files as they were."""
    text = json.dumps(ledger.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"
    table = render_markdown(ledger)
    write_text_atomic(path, text)
    write_text_atomic(markdown_path(path), table)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _authors(authors: list[str]) -> str:
    return authors[0] if len(authors) == 1 else f"{authors[0]} et al."


DECISION_ORDER = ("implemented", "queued", "rejected")


def render_markdown(ledger: Ledger) -> str:
    """The ledger as a Markdown table per decision (implemented, queued, rejected), each sorted
    by track then id. Generated: edit ``papers.json`` (or use ``llmevo papers``), not this."""
    counts = {status: sum(1 for p in ledger.papers if p.decision.status == status)
              for status in DECISION_ORDER}
    lines = [
        "# Paper ledger",
        "",
        "Generated from `docs/papers.json` by `llmevo papers` — edit the JSON (or use the "
        "command), not this file.",
        "",
        f"{len(ledger.papers)} papers: " + ", ".join(f"{counts[s]} {s}" for s in DECISION_ORDER) + ".",
        "",
        "† metadata written by hand, without the arXiv API (author lists may hold only the "
        "first authors); `llmevo papers add ID --update --why TEXT` fetches it from arXiv.",
    ]
    for status in DECISION_ORDER:
        entries = sorted((p for p in ledger.papers if p.decision.status == status),
                         key=lambda p: (p.track, p.arxiv_id))
        if not entries:
            continue
        last = {"implemented": "component(s)", "queued": "why", "rejected": "reason"}[status]
        lines += ["", f"## {status.capitalize()} ({len(entries)})", "",
                  f"| arXiv | year | track | title | authors | {last} |" if status == "queued"
                  else f"| arXiv | year | track | title | authors | {last} | why |",
                  "|---|---|---|---|---|---|" if status == "queued" else "|---|---|---|---|---|---|---|"]
        for entry in entries:
            mark = "†" if entry.source == "hand" else ""
            cells = [f"[{entry.arxiv_id}](https://arxiv.org/abs/{entry.arxiv_id}){mark}", str(entry.year),
                     entry.track, _cell(entry.title), _cell(_authors(entry.authors))]
            decision = entry.decision
            if isinstance(decision, Implemented):
                cells += [", ".join(f"`{name}`" for name in decision.components), _cell(entry.why)]
            elif isinstance(decision, Rejected):
                cells += [_cell(decision.reason), _cell(entry.why)]
            else:
                cells += [_cell(entry.why)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def make_entry(values: dict[str, Any]) -> PaperEntry:
    """A ``PaperEntry`` from its fields; a bad one is a one-line ``ConfigError``."""
    try:
        return PaperEntry.model_validate(values)
    except ValidationError as error:
        raise _entry_error(error) from None


def _entry_error(error: ValidationError) -> ConfigError:
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    option = {"why": "--why", "track": "--track", "decision": "--decision"}.get(field, field)
    return ConfigError(f"{option}: {first['msg']}" if option else first["msg"])


_PLACEHOLDER = {"title": "t", "authors": ["a"], "categories": ["cs.CL"]}


def check_entry(values: dict[str, Any], *, arxiv_id: str) -> None:
    """Check the fields a user gives (track, decision, why) before the metadata is fetched:
    the same validation as ``make_entry``, with the paper's own fields still unknown."""
    year = 2000 + int(arxiv_id[:2]) if NEW_STYLE_ID.match(arxiv_id) else 2000
    make_entry(_PLACEHOLDER | {"arxiv_id": arxiv_id, "year": year} | values)


def decide_paper(ledger_path: Path, arxiv_id: str, *, decision: str, why: str) -> PaperEntry:
    """Change the decision (and why) of a paper already in the ledger; no network."""
    if not ledger_path.exists():
        raise ConfigError(f"ledger {ledger_path} does not exist; `llmevo papers add ID` starts one")
    ledger = load_ledger(ledger_path)
    entry = ledger.require(arxiv_id)
    changed = make_entry(entry.model_dump() | {"decision": parse_decision(decision), "why": why})
    save_ledger(ledger.with_entry(changed), ledger_path)
    return changed
