"""Figures cited in prose about results, checked against the artifacts that should hold them.

Results prose goes stale: a sentence keeps quoting an interval after the artifact it came
from was rerun. This module finds every figure a Markdown page cites and asks whether some
published JSON (the artifacts, ladders, evolution summaries and the leaderboard under
``docs/``) holds it, at the precision the page prints it:

- an interval ``[a, b]`` must be a (low, high) pair of one JSON object (keys ``*low``/``*high``
  or ``lower``/``upper`` side by side, or a two-number list), rounded as printed, or the
  same pair negated (a loss interval read as a fitness interval);
- any other number printed with a decimal point (``3.770``, ``−12.06%``, ``1.56e-2``) must
  be some JSON number, or its absolute value, rounded as printed (``−12.1%`` is held by
  ``-12.0557``).

A figure is read where it stands, not guessed: inline code, fenced code, link targets, HTML
comments and the generated tables between ``<!-- … generated … -->`` markers are skipped, as
are arXiv identifiers (``2104.09864``) and dotted versions (``2.13.0``). Integers are not
checked (counts and sizes such as "9 of 11" or "139,584 parameters" are not measurements a
rerun moves). A benchmark figure from ``docs/LOG.md`` does not belong in a results page;
cite it on a page this check does not read.

Public API: ``Citation``, ``cited_figures``, ``artifact_numbers``, ``stale_citations``.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Citation", "ArtifactNumbers", "artifact_numbers", "cited_figures", "stale_citations"]

_MINUS = "−"
_NUMBER = r"[+\-−]?\d+(?:\.\d+)?(?:e[+\-−]?\d+)?"
_INTERVAL = re.compile(rf"\[\s*({_NUMBER})\s*%?\s*,\s*({_NUMBER})\s*%?\s*\]")
# a decimal number not inside a longer token: no letter, digit or dot right before it, and
# no ".digit" after it (a version such as 2.13.0)
_DECIMAL = re.compile(r"(?<![\w.])([+\-−]?\d+\.\d+(?:e[+\-−]?\d+)?)(?![\w]|\.\d)")
_ARXIV = re.compile(r"^\d{4}\.\d{4,5}$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SKIPPED_SPANS = [
    re.compile(r"`[^`]*`"),                # inline code
    re.compile(r"\]\([^)]*\)"),            # link targets
    re.compile(r"<!--.*?-->"),             # HTML comments on one line
    re.compile(r"https?://\S+"),           # bare addresses
]
_GENERATED_START = re.compile(r"<!--[^>]*generated[^>]*-->")
_GENERATED_END = re.compile(r"<!--\s*end of [^>]*-->")


@dataclass(frozen=True)
class Citation:
    """One figure a page cites: where, what was printed, and (when stale) why."""

    path: Path
    line: int
    text: str
    values: tuple[float, ...]
    decimals: tuple[int, ...]

    def __str__(self) -> str:
        kind = "interval" if len(self.values) == 2 else "figure"
        return f"{self.path}:{self.line}: {kind} {self.text} is in no artifact"


def _parse(token: str) -> tuple[float, int]:
    """A printed number as (value, decimals printed in its mantissa)."""
    token = token.replace(_MINUS, "-")
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return float(token), decimals - (int(exponent) if exponent else 0)


def _prose_lines(text: str) -> Iterable[tuple[int, str]]:
    """(line number, line) of the prose: code blocks, generated regions and comments left out."""
    fenced = generated = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        if _GENERATED_START.search(line):
            generated = True
            continue
        if generated:
            generated = not _GENERATED_END.search(line)
            continue
        for span in _SKIPPED_SPANS:
            line = span.sub(" ", line)
        yield number, line


def cited_figures(path: Path, text: str | None = None) -> list[Citation]:
    """Every interval and decimal figure the Markdown at ``path`` cites (see the module docstring)."""
    text = Path(path).read_text(encoding="utf-8") if text is None else text
    found: list[Citation] = []
    for number, line in _prose_lines(text):
        for match in _INTERVAL.finditer(line):
            (low, low_digits), (high, high_digits) = _parse(match.group(1)), _parse(match.group(2))
            found.append(Citation(Path(path), number, match.group(0), (low, high), (low_digits, high_digits)))
        rest = _INTERVAL.sub(" ", line)
        for match in _DECIMAL.finditer(rest):
            token = match.group(1)
            if _ARXIV.match(token):
                continue
            value, digits = _parse(token)
            found.append(Citation(Path(path), number, token, (value,), (digits,)))
    return found


@dataclass
class ArtifactNumbers:
    """Every number of a set of JSON files (sorted absolute values) and their (low, high) pairs."""

    magnitudes: list[float]
    pairs: list[tuple[float, float]]

    def holds(self, value: float, decimals: int) -> bool:
        tolerance = 0.5 * 10.0 ** (-decimals) * (1 + 1e-9) + 1e-12
        at = bisect.bisect_left(self.magnitudes, abs(value) - tolerance)
        return at < len(self.magnitudes) and self.magnitudes[at] <= abs(value) + tolerance

    def holds_pair(self, low: float, high: float, decimals: tuple[int, int]) -> bool:
        tol_low, tol_high = (0.5 * 10.0 ** (-d) * (1 + 1e-9) + 1e-12 for d in decimals)
        return any((abs(a - low) <= tol_low and abs(b - high) <= tol_high)
                   or (abs(-b - low) <= tol_low and abs(-a - high) <= tol_high) for a, b in self.pairs)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _walk(node: object, values: list[float], pairs: list[tuple[float, float]]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            number = _number(value)
            if number is not None:
                values.append(abs(number))
            if isinstance(key, str) and key.endswith(("low", "lower")):
                stem = key[:-5] if key.endswith("lower") else key[:-3]
                partner = node.get(stem + ("upper" if key.endswith("lower") else "high"))
                low, high = number, _number(partner)
                if low is not None and high is not None:
                    pairs.append((low, high))
            _walk(value, values, pairs)
    elif isinstance(node, list):
        numbers = [_number(item) for item in node]
        if len(node) == 2 and None not in numbers:
            pairs.append((numbers[0], numbers[1]))
        for item, number in zip(node, numbers, strict=True):
            if number is not None:
                values.append(abs(number))
            else:
                _walk(item, values, pairs)


def artifact_numbers(roots: Sequence[Path]) -> ArtifactNumbers:
    """The numbers of every ``*.json`` under ``roots`` (a file that is not JSON is passed over:
    the leaderboard, not this check, refuses a broken artifact)."""
    values: list[float] = []
    pairs: list[tuple[float, float]] = []
    for root in roots:
        for path in sorted(Path(root).rglob("*.json")):
            try:
                _walk(json.loads(path.read_text(encoding="utf-8")), values, pairs)
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
    return ArtifactNumbers(sorted(values), pairs)


def stale_citations(pages: Sequence[Path], numbers: ArtifactNumbers) -> list[Citation]:
    """The figures of ``pages`` that no artifact holds, in page order."""
    stale = []
    for page in pages:
        for citation in cited_figures(page):
            if len(citation.values) == 2:
                held = numbers.holds_pair(*citation.values, citation.decimals)
            else:
                held = numbers.holds(citation.values[0], citation.decimals[0])
            if not held:
                stale.append(citation)
    return stale
