"""Text-level pieces of the suites: formats, degraded candidates, numeric candidates."""

from __future__ import annotations

import re

from llmevo.data.hh_rlhf import PreferencePair, hh_choice, split_last_assistant_turn
from llmevo.data.instruction import InstructionRecord, instruction_prompt
from llmevo.data.preference import first_quarter_words, preference_choice, reorder_words
from llmevo.data.reasoning import (
    ReasoningRecord,
    numeric_candidates,
    parse_final_answer,
    reasoning_choice,
)


def test_instruction_prompt_with_and_without_input() -> None:
    plain = InstructionRecord(0, "Name a color.", "", "Blue")
    with_input = InstructionRecord(1, "Sort these.", "b, a", "a, b")
    assert instruction_prompt(plain) == "Instruction: Name a color.\nResponse:"
    assert instruction_prompt(with_input) == "Instruction: Sort these.\nInput: b, a\nResponse:"


def test_final_answer_parsing() -> None:
    assert parse_final_answer("so 1000 + 234\n#### 1,234") == 1234
    assert parse_final_answer("#### -5") == -5
    assert parse_final_answer("#### 7 apples") is None
    assert parse_final_answer("#### 3.5") is None
    assert parse_final_answer("the answer is 4") is None


def test_numeric_candidates_distinct_deterministic_unbiased() -> None:
    positions = []
    for index, gold in enumerate([0, 1, 18, 1234, -3, 5, 100, 2] * 16):
        values, position = numeric_candidates(gold, index)
        assert len(values) == 8 and len(set(values)) == 8
        assert values[position] == gold
        if gold >= 0:
            assert min(values) >= 0
        assert numeric_candidates(gold, index) == (values, position)
        positions.append(position)
    counts = [positions.count(slot) for slot in range(8)]
    assert min(counts) >= 8, counts  # 128 draws: every slot used, none dominant
    assert max(counts) <= 28, counts


def test_reasoning_choice_format() -> None:
    record = ReasoningRecord(3, "How many?", "2+2=4\n#### 4", 4)
    choice = reasoning_choice(record)
    assert choice is not None
    assert set(choice.prompts) == {"Question: How many?\nAnswer:"}
    assert choice.responses[choice.gold] == " 4"
    assert all(re.fullmatch(r" -?\d+", response) for response in choice.responses)
    assert reasoning_choice(ReasoningRecord(3, "q", "no marker", None)) is None


def test_first_quarter_keeps_leading_words_and_whitespace() -> None:
    assert first_quarter_words("one two\nthree four five six seven eight") == "one two"
    assert first_quarter_words("a b c") == ""


def test_reorder_differs_keeps_words_and_whitespace() -> None:
    texts = ["a b", "x y z", "Hello,\nworld and all", "a a b", "1. one\n2. two\n3. three"]
    for text in texts:
        for index in range(50):
            reordered = reorder_words(text, index)
            assert reordered != text
            assert sorted(reordered.split()) == sorted(text.split())
            assert re.sub(r"\S+", "w", reordered) == re.sub(r"\S+", "w", text)
            assert reorder_words(text, index) == reordered
    assert reorder_words("same same", 4) == "same same"
    assert reorder_words("single", 4) == "single"


def test_preference_choice_drops_identical_candidates() -> None:
    full = preference_choice(InstructionRecord(7, "i", "", "alpha beta gamma delta epsilon"))
    assert full is not None and full.gold == 0
    assert full.responses[0] == " alpha beta gamma delta epsilon"
    assert full.responses[1] == " alpha"
    assert len(full.responses) == 3
    one_word = preference_choice(InstructionRecord(7, "i", "", "blue"))
    assert one_word is not None and one_word.responses == (" blue", " ")
    assert preference_choice(InstructionRecord(7, "i", "", "")) is None


def test_hh_split_and_choice() -> None:
    dialogue = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: more?\n\nAssistant: sure."
    context, response = split_last_assistant_turn(dialogue)
    assert context == "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: more?\n\nAssistant:"
    assert response == " sure."
    assert split_last_assistant_turn("\n\nHuman: only") is None
    choice = hh_choice(
        PreferencePair(0, "\n\nHuman: q\n\nAssistant: good", "\n\nHuman: q\n\nAssistant: bad")
    )
    assert choice is not None and choice.gold == 0
    assert choice.responses == (" good", " bad")
    assert choice.prompts == ("\n\nHuman: q\n\nAssistant:",) * 2
