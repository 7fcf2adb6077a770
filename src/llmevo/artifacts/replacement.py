"""Replacing an artifact: never by one that holds less, unless asked (``replace``).

What an artifact holds (``Contents``) is what its reader would lose if it went: its blocks
(the top-level keys that carry a value; ``cache``, which says how runs were obtained rather
than what they measured, is not evidence), its experiments (a component diagnostic's L2
experiment: a ``full_experiment`` block with results, not only a status) and its seeds.
A new artifact replaces the one at its path only when it holds all of that; otherwise the
writer refuses, naming what would be lost, and nothing is written. A file there that does
not load as an artifact is replaced only when asked too: what it holds cannot be told.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from llmevo.artifacts.schema import Artifact, DiagnosticArtifact, load_artifact
from llmevo.errors import ArtifactError, ConfigError

NOT_EVIDENCE = frozenset({"cache"})
_STATUS_ONLY = frozenset({"status", "review_done"})  # a full_experiment block that did not run


@dataclass(frozen=True)
class Contents:
    """What an artifact holds. ``blocks`` is None where it is not known yet (before a run:
    ``seeds`` and ``experiments`` are what a request decides)."""

    blocks: frozenset[str] | None
    experiments: frozenset[str]
    seeds: frozenset[int]

    @classmethod
    def of(cls, artifact: Artifact) -> Contents:
        data = artifact.to_json_dict()
        blocks = frozenset(key for key, value in data.items() if value not in (None, {}, []))
        experiments: frozenset[str] = frozenset()
        if isinstance(artifact, DiagnosticArtifact):
            seeds = artifact.evaluation_protocol.seeds or artifact.seeds
            if set(data["full_experiment"]) - _STATUS_ONLY:
                experiments = frozenset({"full_experiment"})
        else:
            seeds = artifact.seed_list
        return cls(blocks - NOT_EVIDENCE, experiments, frozenset(seeds))

    def beyond(self, other: Contents) -> list[str]:
        """What this holds that ``other`` lacks, in words (empty: ``other`` holds as much)."""
        lost = []
        if self.blocks is not None and other.blocks is not None:
            blocks = sorted(self.blocks - other.blocks)
            if blocks:
                lost.append(f"the {_and(blocks)} block{'s' if len(blocks) > 1 else ''}")
        lost += [f"the L2 experiment ({name})" for name in sorted(self.experiments - other.experiments)]
        seeds = sorted(self.seeds - other.seeds)
        if seeds:
            lost.append(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}")
        return lost


def _and(words: Iterable[str]) -> str:
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _contents_of_artifact(path: Path) -> Contents:
    return Contents.of(load_artifact(path))


def check_replacement(path: Path, new: Contents, *, replace: bool,
                      read: Callable[[Path], Contents] = _contents_of_artifact) -> None:
    """Refuse to replace the artifact at ``path`` by one holding ``new`` when it would lose
    something (``ConfigError``), or a file there that is not an artifact (``ArtifactError``),
    unless ``replace``. Nothing at ``path``: nothing to lose. ``read``: what the file at
    ``path`` holds (default: a schema-v2 artifact's ``Contents``; an external experiment's
    artifact passes its own reader), an ``ArtifactError`` when it is not such an artifact."""
    path = Path(path)
    if replace or not (path.exists() or path.is_symlink()):
        return
    try:
        existing = read(path)
    except ArtifactError as error:
        raise ArtifactError(f"{error}; pass --replace to overwrite it") from None
    lost = existing.beyond(new)
    if lost:
        raise ConfigError(
            f"{path} holds {_and(lost)} that the new artifact lacks; nothing was written "
            "(pass --replace to replace it anyway, or --out to write elsewhere)")
