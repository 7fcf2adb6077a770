"""Alpaca instruction records (Taori et al. 2023, Stanford Alpaca) and their text format.

Format (SPEC "Data"): prompt ``Instruction: {instruction}\\n[Input: {input}\\n]Response:``
(the ``Input`` line only when the input is non-empty), response ``" " + output``; the
suites wrap the two in ``<bos> … <eos>`` and count the loss on the response only.

Records are used in file order: 0..319 train, 320..383 validation, 384..447 test.
A record that is not an object with string ``instruction`` and ``output`` (``input``
optional, string) is a ``DataError`` naming the file and the record index: the pinned
file has none, so one means the file is not the expected data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmevo.errors import DataError

INSTRUCTION_SPLITS: dict[str, range] = {
    "train": range(0, 320),
    "validation": range(320, 384),
    "test": range(384, 448),
}


@dataclass(frozen=True)
class InstructionRecord:
    index: int  # position in the file
    instruction: str
    input: str
    output: str

    def canonical_bytes(self) -> bytes:
        """The record's content as canonical JSON, for fingerprints."""
        fields = {"instruction": self.instruction, "input": self.input, "output": self.output}
        return json.dumps(fields, sort_keys=True, ensure_ascii=False).encode("utf-8")


def instruction_prompt(record: InstructionRecord) -> str:
    input_line = f"Input: {record.input}\n" if record.input else ""
    return f"Instruction: {record.instruction}\n{input_line}Response:"


def instruction_response(output: str) -> str:
    return " " + output


def parse_instruction_records(raw: bytes, source: Path) -> list[InstructionRecord]:
    """Parse an Alpaca-format JSON list; ``source`` names the file in errors."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(f"{source}: not valid UTF-8 JSON ({error})") from error
    if not isinstance(data, list):
        raise DataError(f"{source}: expected a JSON list of instruction records")
    records = []
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise DataError(f"{source}: record {index} is not a JSON object")
        for key in ("instruction", "output"):
            if not isinstance(item.get(key), str):
                raise DataError(f"{source}: record {index} lacks a string {key!r} field")
        input_text = item.get("input", "")
        if not isinstance(input_text, str):
            raise DataError(f"{source}: record {index} has a non-string 'input' field")
        records.append(InstructionRecord(index, item["instruction"], input_text, item["output"]))
    return records


def split_records(
    records: list[InstructionRecord], split: str, source: Path
) -> list[InstructionRecord]:
    """The records of ``split`` (train/validation/test) by file position."""
    positions = INSTRUCTION_SPLITS[split]
    if len(records) < positions.stop:
        raise DataError(
            f"{source}: {len(records)} records; expected at least {positions.stop}"
            f" for the {split} split (records {positions.start}..{positions.stop - 1})"
        )
    return records[positions.start : positions.stop]
