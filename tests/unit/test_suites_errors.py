"""Missing, altered and malformed files: DataError naming the file, or a counted skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmevo.data.codec import ByteCodec
from llmevo.data.instruction import parse_instruction_records
from llmevo.data.pins import (
    ALPACA_FILE,
    GSM8K_TEST_FILE,
    HH_HARMLESS_TEST_FILE,
    HH_HELPFUL_TEST_FILE,
    read_checked,
)
from llmevo.data.suites import load_suite
from llmevo.errors import ConfigError, DataError

UNCHECKED = {
    ALPACA_FILE: None,
    GSM8K_TEST_FILE: None,
    HH_HELPFUL_TEST_FILE: None,
    HH_HARMLESS_TEST_FILE: None,
}


def write_data(
    root: Path,
    alpaca: list | None = None,
    gsm8k: list[dict] | None = None,
    hh: list[dict] | None = None,
) -> Path:
    """A tiny data directory: 448 Alpaca records, 128 GSM8K and 128 HH-RLHF lines."""
    if alpaca is None:
        alpaca = [
            {"instruction": f"Say {i}.", "input": "", "output": f"number {i} ok"}
            for i in range(448)
        ]
    if gsm8k is None:
        gsm8k = [{"question": f"What is {i}+1?", "answer": f"#### {i + 1}"} for i in range(128)]
    if hh is None:
        hh = [
            {
                "chosen": f"\n\nHuman: hi {i}\n\nAssistant: hello",
                "rejected": f"\n\nHuman: hi {i}\n\nAssistant: go away",
            }
            for i in range(128)
        ]
    for relative, text in (
        (ALPACA_FILE, json.dumps(alpaca)),
        (GSM8K_TEST_FILE, "\n".join(json.dumps(line) for line in gsm8k) + "\n"),
        (HH_HELPFUL_TEST_FILE, "\n".join(json.dumps(line) for line in hh) + "\n"),
    ):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")
    return root


def load(root: Path, name: str = "public", split: str = "validation"):
    return load_suite(name, root, ByteCodec(), 64, split, pins=UNCHECKED)


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="alpaca_5000.json: file not found"):
        load_suite("core", tmp_path, ByteCodec(), 64, "validation")


def test_altered_file_fails_the_pin(tmp_path: Path) -> None:
    write_data(tmp_path)
    with pytest.raises(DataError, match=r"alpaca_5000.json: sha256 [0-9a-f]{64} does not match"):
        load_suite("core", tmp_path, ByteCodec(), 64, "validation")
    path = tmp_path / "x.bin"
    path.write_bytes(b"abc")
    expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # sha256("abc")
    assert read_checked(path, expected) == b"abc"


def test_tiny_data_loads_with_expected_counts(tmp_path: Path) -> None:
    suite = load(write_data(tmp_path), split="test")
    assert suite.counts == {
        "instruction_train": 320,
        "instruction_test": 64,
        "preference_test": 64,
        "reasoning_test": 64,
        "hh_rlhf_test": 64,
    }
    assert sum(suite.skipped.values()) == 0
    assert suite.reasoning[0].candidates[suite.reasoning[0].gold].tokens[-3:-1] == tuple(b"65")  # line 64: "#### 65"


def test_alpaca_record_without_output_is_an_error(tmp_path: Path) -> None:
    records = [{"instruction": "a", "input": "", "output": "b"}, {"instruction": "a"}]
    path = tmp_path / "alpaca.json"
    path.write_text(json.dumps(records))
    with pytest.raises(DataError, match=r"alpaca.json: record 1 lacks a string 'output'"):
        parse_instruction_records(path.read_bytes(), path)
    path.write_text(json.dumps([{"input": "", "output": "b"}]))
    with pytest.raises(DataError, match=r"record 0 lacks a string 'instruction'"):
        parse_instruction_records(path.read_bytes(), path)
    path.write_text(json.dumps({"instruction": "a"}))
    with pytest.raises(DataError, match="expected a JSON list"):
        parse_instruction_records(path.read_bytes(), path)


def test_too_few_alpaca_records_is_an_error(tmp_path: Path) -> None:
    alpaca = [{"instruction": "a", "input": "", "output": "b"}] * 400
    with pytest.raises(DataError, match="400 records; expected at least 448"):
        load(write_data(tmp_path, alpaca=alpaca), name="core", split="test")


def test_gsm8k_answer_without_marker_is_a_counted_skip(tmp_path: Path) -> None:
    gsm8k = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(128)]
    gsm8k[3]["answer"] = "the answer is 4"
    gsm8k[70]["answer"] = "#### four"  # test split: does not touch validation
    suite = load(write_data(tmp_path, gsm8k=gsm8k))
    assert suite.skipped["reasoning_unparsable_answer"] == 1
    assert suite.counts["reasoning_validation"] == 63


def test_gsm8k_line_without_answer_is_an_error(tmp_path: Path) -> None:
    gsm8k = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(128)]
    del gsm8k[5]["answer"]
    with pytest.raises(DataError, match=r"gsm8k/test.jsonl: line 5 lacks"):
        load(write_data(tmp_path, gsm8k=gsm8k))


def test_hh_pair_without_rejected_is_an_error(tmp_path: Path) -> None:
    hh = [{"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "c"}] * 128
    hh = [dict(pair) for pair in hh]
    del hh[9]["rejected"]
    with pytest.raises(DataError, match=r"helpful-base/test.jsonl: line 9 lacks"):
        load(write_data(tmp_path, hh=hh))


def test_hh_pair_without_assistant_turn_is_a_counted_skip(tmp_path: Path) -> None:
    hh = [
        {"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: a\n\nAssistant: c"}
        for _ in range(128)
    ]
    hh[0]["rejected"] = "\n\nHuman: a"
    hh[1]["chosen"] = "no turns at all"
    suite = load(write_data(tmp_path, hh=hh))
    assert suite.skipped["hh_rlhf_no_assistant_turn"] == 2
    assert suite.counts["hh_rlhf_validation"] == 62


def test_empty_alpaca_output_is_a_counted_preference_skip(tmp_path: Path) -> None:
    alpaca = [{"instruction": f"i{i}", "input": "", "output": f"w{i} v{i}"} for i in range(448)]
    alpaca[330]["output"] = ""
    suite = load(write_data(tmp_path, alpaca=alpaca))
    assert suite.skipped["preference_no_distinct_candidate"] == 1
    assert suite.counts["preference_validation"] == 63
    assert suite.counts["instruction_validation"] == 64


def test_unknown_suite_and_split(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected one of: core, public"):
        load_suite("full", tmp_path, ByteCodec(), 64, "validation")
    with pytest.raises(ConfigError, match="expected validation or test"):
        load_suite("core", tmp_path, ByteCodec(), 64, "train")
