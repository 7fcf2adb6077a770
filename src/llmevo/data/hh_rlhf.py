"""Anthropic HH-RLHF (Bai et al. 2022, arXiv 2204.05862) chosen/rejected pairs.

Each pair becomes a 2-way choice (chosen = gold, candidate 0). For each dialogue the
context is everything up to and including its last ``"\\n\\nAssistant:"`` and the
response is the text after it. Lines 0..63 of ``helpful-base/test.jsonl`` are
validation, 64..127 test.

A line that is not a JSON object with string ``chosen`` and ``rejected`` is a
``DataError`` (file and line index); a pair where either dialogue has no Assistant turn
is a counted skip.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmevo.data.pins import jsonl_records
from llmevo.data.preference import TextChoice

HH_SPLITS: dict[str, range] = {"validation": range(0, 64), "test": range(64, 128)}
ASSISTANT_MARKER = "\n\nAssistant:"


@dataclass(frozen=True)
class PreferencePair:
    index: int  # line index in the file
    chosen: str
    rejected: str

    def canonical_bytes(self) -> bytes:
        fields = {"chosen": self.chosen, "rejected": self.rejected}
        return json.dumps(fields, sort_keys=True, ensure_ascii=False).encode("utf-8")


def split_last_assistant_turn(dialogue: str) -> tuple[str, str] | None:
    """``(context incl. the marker, response)``, or None without an Assistant turn."""
    cut = dialogue.rfind(ASSISTANT_MARKER)
    if cut < 0:
        return None
    cut += len(ASSISTANT_MARKER)
    return dialogue[:cut], dialogue[cut:]


def hh_choice(pair: PreferencePair) -> TextChoice | None:
    """The pair as a 2-way choice (chosen first); None when a dialogue has no Assistant turn.

    Each response is scored after its own context (the two contexts are equal in all but
    a few pairs of the release).
    """
    chosen = split_last_assistant_turn(pair.chosen)
    rejected = split_last_assistant_turn(pair.rejected)
    if chosen is None or rejected is None:
        return None
    return TextChoice((chosen[0], rejected[0]), (chosen[1], rejected[1]), gold=0)


def parse_preference_pairs(raw: bytes, source: Path) -> list[PreferencePair]:
    pairs = []
    for index, item in jsonl_records(raw, source, ("chosen", "rejected")):
        pairs.append(PreferencePair(index, item["chosen"], item["rejected"]))
    return pairs
