"""GSM8K (Cobbe et al. 2021, arXiv 2110.14168) test questions as 8-way numeric choice.

Prompt ``Question: {question}\\nAnswer:``; candidates ``" " + str(n)`` for the gold
answer (the integer after the last ``####``, commas removed) and 7 distractors derived
from it without any random state: the first 7 distinct values of ``g+1, g-1, 2g, g+2,
g-2, g+10, g-10, 10g, g//2, g+3, g-3, g+5, g-5, g+4, g-4, g+20, g+100`` that differ
from ``g`` (negative values dropped when ``g >= 0``; ``g+1..g+5, g+10, g+20, g+100``
alone give 8 candidates, so 7 always exist). The gold's slot among the 8 is
``sha256("gsm8k-test:{index}") mod 8`` of the record's line index, so there is no
position bias; distractors fill the other slots in the order above.

Lines 0..63 of ``test.jsonl`` are validation, 64..127 test. A line that is not a JSON
object with string ``question`` and ``answer`` is a ``DataError`` (file and line index);
an answer without ``####`` or without an integer after it is a counted skip.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmevo.data.pins import jsonl_records
from llmevo.data.preference import TextChoice

GSM8K_SPLITS: dict[str, range] = {"validation": range(0, 64), "test": range(64, 128)}
CANDIDATE_COUNT = 8

_DISTRACTORS: tuple[Callable[[int], int], ...] = (
    lambda g: g + 1,
    lambda g: g - 1,
    lambda g: 2 * g,
    lambda g: g + 2,
    lambda g: g - 2,
    lambda g: g + 10,
    lambda g: g - 10,
    lambda g: 10 * g,
    lambda g: g // 2,
    lambda g: g + 3,
    lambda g: g - 3,
    lambda g: g + 5,
    lambda g: g - 5,
    lambda g: g + 4,
    lambda g: g - 4,
    lambda g: g + 20,
    lambda g: g + 100,
)


@dataclass(frozen=True)
class ReasoningRecord:
    index: int  # line index in the file
    question: str
    answer: str
    gold: int | None  # None when the answer has no parsable final number

    def canonical_bytes(self) -> bytes:
        fields = {"question": self.question, "answer": self.answer}
        return json.dumps(fields, sort_keys=True, ensure_ascii=False).encode("utf-8")


def parse_final_answer(answer: str) -> int | None:
    """The integer after the last ``####`` (commas removed), or None."""
    if "####" not in answer:
        return None
    text = answer.rsplit("####", 1)[1].strip().replace(",", "")
    try:
        return int(text)
    except ValueError:
        return None


def numeric_candidates(gold: int, index: int) -> tuple[list[int], int]:
    """8 distinct integers including ``gold``, and the gold's position among them."""
    distractors: list[int] = []
    for distractor in _DISTRACTORS:
        value = distractor(gold)
        if value == gold or value in distractors or (gold >= 0 and value < 0):
            continue
        distractors.append(value)
        if len(distractors) == CANDIDATE_COUNT - 1:
            break
    digest = hashlib.sha256(f"gsm8k-test:{index}".encode()).digest()
    position = int.from_bytes(digest[:8], "big") % CANDIDATE_COUNT
    return distractors[:position] + [gold] + distractors[position:], position


def reasoning_choice(record: ReasoningRecord) -> TextChoice | None:
    """The 8-way choice for a record; None when its answer could not be parsed."""
    if record.gold is None:
        return None
    values, position = numeric_candidates(record.gold, record.index)
    prompt = f"Question: {record.question}\nAnswer:"
    return TextChoice.with_shared_prompt(
        prompt, tuple(f" {value}" for value in values), gold=position
    )


def parse_reasoning_records(raw: bytes, source: Path) -> list[ReasoningRecord]:
    records = []
    for index, item in jsonl_records(raw, source, ("question", "answer")):
        records.append(
            ReasoningRecord(
                index, item["question"], item["answer"], parse_final_answer(item["answer"])
            )
        )
    return records
