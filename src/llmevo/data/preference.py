"""Multiple-choice text examples, and preference examples built from instruction records.

A preference example (SPEC "Data") pairs the gold Alpaca output with two degraded
candidates: the first quarter of its words, and its words reordered. Both keep the
whitespace of the gold text between words, so the gold differs from a candidate only in
which words appear and in what order, never in formatting.

- ``first_quarter_words``: the text up to the end of word ``floor(n / 4)`` (empty for
  fewer than 4 words, which leaves an empty response: still a degraded answer).
- ``reorder_words``: words shuffled by ``random.Random(index)``; if the shuffle returns
  the original order, it is rotated by one, which differs from the original whenever
  there are at least 2 distinct words. With fewer the text is returned unchanged.

Candidates identical to the gold (or to an earlier candidate) are dropped, since they
carry no preference; an example left with the gold alone is not built (the caller counts
the skip). The gold is candidate 0.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from llmevo.data.instruction import InstructionRecord, instruction_prompt, instruction_response

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class TextChoice:
    """Candidate (prompt, response) texts, of which number ``gold`` is correct.

    Usually all candidates share one prompt (``with_shared_prompt``); HH-RLHF pairs whose
    dialogues differ before the last turn give each response its own context.
    """

    prompts: tuple[str, ...]
    responses: tuple[str, ...]
    gold: int

    @classmethod
    def with_shared_prompt(cls, prompt: str, responses: tuple[str, ...], gold: int) -> TextChoice:
        return cls(tuple(prompt for _ in responses), responses, gold)


def first_quarter_words(text: str) -> str:
    spans = list(_WORD.finditer(text))
    keep = len(spans) // 4
    return text[: spans[keep - 1].end()] if keep else ""


def reorder_words(text: str, index: int) -> str:
    spans = list(_WORD.finditer(text))
    words = [span.group() for span in spans]
    if len(set(words)) < 2:
        return text
    shuffled = list(words)
    random.Random(index).shuffle(shuffled)
    if shuffled == words:
        shuffled = shuffled[1:] + shuffled[:1]
    pieces = []
    cursor = 0
    for span, word in zip(spans, shuffled, strict=True):
        pieces.append(text[cursor : span.start()])
        pieces.append(word)
        cursor = span.end()
    pieces.append(text[cursor:])
    return "".join(pieces)


def distinct_candidates(gold: str, others: list[str]) -> tuple[str, ...]:
    """``(gold, *others)`` without repeats, in order."""
    kept: list[str] = [gold]
    for candidate in others:
        if candidate not in kept:
            kept.append(candidate)
    return tuple(kept)


def preference_choice(record: InstructionRecord) -> TextChoice | None:
    """The gold output plus its degraded candidates; None when none differs from the gold."""
    output = record.output
    degraded = [first_quarter_words(output), reorder_words(output, record.index)]
    responses = distinct_candidates(
        instruction_response(output), [instruction_response(text) for text in degraded]
    )
    if len(responses) < 2:
        return None
    return TextChoice.with_shared_prompt(instruction_prompt(record), responses, gold=0)
