"""Paper intake: the ledger of candidate papers and their decisions, the arXiv client calls
that fill it, its diff against the registry, and the scaffold that starts a component from an
entry.

- ``ledger``: the typed ledger (``docs/papers.json``, the source of truth, and the generated
  ``docs/papers.md`` table), read and written atomically.
- ``intake``: ``search`` and ``fetch`` through the ``arxiv`` package (pagination, the polite
  delay and retries are the package's).
- ``status``: the ledger against the registry (implemented and registered, implemented but
  missing, queued, rejected, registered without an entry).
- ``scaffold``: ``llmevo new component``'s files, checked in full before anything is written.
"""
