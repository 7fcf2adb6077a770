"""The ledger against the registry: which decisions the code bears out and which it does not.

A component's paper is its manifest's ``paper.arxiv_id``. Six lists:

- ``implemented``: an implemented entry whose every named component is registered;
- ``missing``: an implemented entry naming a component the registry lacks;
- ``queued`` and ``rejected``: the other decisions;
- ``unledgered``: a registered component whose paper has no entry;
- ``undecided``: a registered component whose paper's entry does not list it as implemented
  (queued, rejected, or implemented by other names): the ledger is behind the code.

Components without a paper (the architectures' own parts, ``none``) are counted apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmevo.papers.ledger import Implemented, Ledger, PaperEntry, Rejected
from llmevo.registry import ComponentSpec


@dataclass(frozen=True)
class Registered:
    """A registered component as the status sees it."""

    slot: str
    name: str
    arxiv_id: str | None
    origin: str


@dataclass
class LedgerStatus:
    implemented: list[tuple[PaperEntry, list[Registered]]] = field(default_factory=list)
    missing: list[tuple[PaperEntry, list[str]]] = field(default_factory=list)
    queued: list[PaperEntry] = field(default_factory=list)
    rejected: list[PaperEntry] = field(default_factory=list)
    unledgered: list[Registered] = field(default_factory=list)
    undecided: list[tuple[Registered, PaperEntry]] = field(default_factory=list)
    without_paper: list[Registered] = field(default_factory=list)

    @property
    def consistent(self) -> bool:
        """Every implemented entry registered and every registered paper decided."""
        return not (self.missing or self.unledgered or self.undecided)


def registered(specs: list[ComponentSpec]) -> list[Registered]:
    return [Registered(spec.slot, spec.name,
                       spec.manifest.paper.arxiv_id if spec.manifest.paper else None, spec.origin)
            for spec in specs]


def ledger_status(ledger: Ledger, components: list[Registered]) -> LedgerStatus:
    """The diff of ``ledger`` against the registered ``components``."""
    status = LedgerStatus()
    by_name: dict[str, list[Registered]] = {}
    for component in components:
        by_name.setdefault(component.name, []).append(component)
    for entry in ledger.papers:
        decision = entry.decision
        if isinstance(decision, Implemented):
            absent = [name for name in decision.components if name not in by_name]
            if absent:
                status.missing.append((entry, absent))
            else:
                status.implemented.append(
                    (entry, [c for name in decision.components for c in by_name[name]]))
        elif isinstance(decision, Rejected):
            status.rejected.append(entry)
        else:
            status.queued.append(entry)
    for component in components:
        if component.arxiv_id is None:
            status.without_paper.append(component)
            continue
        entry = ledger.get(component.arxiv_id)
        if entry is None:
            status.unledgered.append(component)
        elif not (isinstance(entry.decision, Implemented)
                  and component.name in entry.decision.components):
            status.undecided.append((component, entry))
    return status
