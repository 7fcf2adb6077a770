"""Post-training data: demonstrations, preference pairs and synthetic arithmetic.

- Instruction demonstrations: the 320 Alpaca train records (``<bos> prompt response <eos>``,
  response scored), as the benchmark suites build them.
- Preference pairs: Anthropic HH-RLHF helpful-base pairs from line 128 on (lines 0..127
  are the suites' validation and test) split into train and held-out by a stable hash of
  the chosen dialogue's prompt, so one prompt never lands on both sides; plus Alpaca
  gold-versus-degraded pairs (train records for training, validation/test records held
  out). A custom JSONL file of ``{"chosen", "rejected"}`` may replace the HH file.
- Arithmetic: every problem ``a+b=`` (and ``a-b=`` with ``a >= b`` when subtraction is on)
  with operands up to ``max_operand`` is assigned to train, validation or test by a
  stable hash of its text: the held-out problems are disjoint from training by
  construction. Which training problems a step draws is seeded by the run.

The held-out sets are halved (by the same hash) into a validation half, which decides,
and a test half, which is only reported.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, PositiveInt

from llmevo.data.codec import TextCodec
from llmevo.data.hh_rlhf import PreferencePair, hh_choice, parse_preference_pairs
from llmevo.data.instruction import (
    instruction_prompt,
    instruction_response,
    parse_instruction_records,
    split_records,
)
from llmevo.data.pins import ALPACA_FILE, HH_HELPFUL_TEST_FILE, SUITE_FILE_SHA256, read_checked
from llmevo.data.preference import preference_choice
from llmevo.data.suites import ScoredSequence, build_sequence
from llmevo.errors import DataError
from llmevo.registry import StrictModel

HH_FIRST_POST_TRAINING_LINE = 128  # lines 0..127 are the suites' validation and test pairs
HELD_OUT_SPLITS = ("validation", "test")


def stable_bucket(text: str, buckets: int = 1000) -> int:
    """A bucket in ``0..buckets-1`` from the sha256 of ``text`` (stable across runs and machines)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") % buckets


def held_out_split(text: str, held_out_fraction: float) -> str:
    """``train``, ``validation`` or ``test`` for a key: held out when its bucket is low."""
    bucket = stable_bucket(text)
    cut = round(held_out_fraction * 1000)
    if bucket >= cut:
        return "train"
    return "validation" if bucket % 2 == 0 else "test"


# --- arithmetic ----------------------------------------------------------------------------


class ArithmeticConfig(StrictModel):
    """Difficulty and split of the synthetic arithmetic task."""

    max_operand: PositiveInt = Field(default=19, description="Operands are 0..max_operand.")
    subtraction: bool = False
    held_out_fraction: float = Field(default=0.25, gt=0.0, lt=1.0)


@dataclass(frozen=True)
class ArithmeticProblem:
    left: int
    right: int
    operator: str  # "+" or "-"

    @property
    def prompt(self) -> str:
        return f"{self.left}{self.operator}{self.right}="

    @property
    def answer(self) -> str:
        value = self.left + self.right if self.operator == "+" else self.left - self.right
        return str(value)


def arithmetic_problems(config: ArithmeticConfig) -> dict[str, list[ArithmeticProblem]]:
    """Every problem of the configured difficulty, by split (train/validation/test)."""
    splits: dict[str, list[ArithmeticProblem]] = {"train": [], "validation": [], "test": []}
    operators = ("+", "-") if config.subtraction else ("+",)
    for operator in operators:
        for left in range(config.max_operand + 1):
            for right in range(config.max_operand + 1):
                if operator == "-" and right > left:
                    continue
                problem = ArithmeticProblem(left, right, operator)
                splits[held_out_split(problem.prompt, config.held_out_fraction)].append(problem)
    if not splits["train"] or not splits["validation"] or not splits["test"]:
        raise DataError(
            f"arithmetic max_operand {config.max_operand}: too few problems for a train, "
            "validation and test split; raise max_operand"
        )
    return splits


# --- preference pairs ----------------------------------------------------------------------


@dataclass(frozen=True)
class TokenPair:
    """A tokenized preference pair; the chosen response is preferred."""

    chosen: ScoredSequence
    rejected: ScoredSequence


def read_preference_file(path: Path, expected_sha256: str | None) -> list[PreferencePair]:
    """Pairs of a JSONL preference file; an empty file or a record without ``chosen`` is an error."""
    pairs = parse_preference_pairs(read_checked(path, expected_sha256), path)
    if not pairs:
        raise DataError(f"{path}: no preference pairs (the file is empty)")
    return pairs


def hh_pairs_by_split(
    pairs: list[PreferencePair], codec: TextCodec, max_len: int, held_out_fraction: float,
    first_line: int,
) -> dict[str, list[TokenPair]]:
    """HH-style pairs from ``first_line`` on, split by a stable hash of the chosen prompt."""
    splits: dict[str, list[TokenPair]] = {"train": [], "validation": [], "test": []}
    for pair in pairs[first_line:]:
        choice = hh_choice(pair)
        if choice is None:
            continue
        chosen = build_sequence(codec, choice.prompts[0], choice.responses[0], max_len)
        rejected = build_sequence(codec, choice.prompts[1], choice.responses[1], max_len)
        if chosen.tokens == rejected.tokens:
            continue  # identical after truncation: no preference left
        splits[held_out_split(choice.prompts[0], held_out_fraction)].append(
            TokenPair(chosen, rejected))
    return splits


def alpaca_pairs(records: list, codec: TextCodec, max_len: int) -> list[TokenPair]:
    """Gold output vs each degraded candidate (first quarter, reordered words)."""
    pairs = []
    for record in records:
        choice = preference_choice(record)
        if choice is None:
            continue
        gold = build_sequence(codec, choice.prompts[0], choice.responses[0], max_len)
        for prompt, response in zip(choice.prompts[1:], choice.responses[1:], strict=True):
            pairs.append(TokenPair(gold, build_sequence(codec, prompt, response, max_len)))
    return pairs


# --- everything a stage and its evaluation need --------------------------------------------


@dataclass(frozen=True)
class PostTrainData:
    """Tokenized post-training data and held-out evaluation sets."""

    codec: TextCodec
    max_len: int
    instruction: tuple[ScoredSequence, ...]  # Alpaca train demonstrations
    preference_train: tuple[TokenPair, ...]
    preference_held_out: dict[str, tuple[TokenPair, ...]]  # validation / test
    arithmetic: dict[str, tuple[ArithmeticProblem, ...]]  # train / validation / test
    preference_source: str

    def demonstrations(self, task: str) -> tuple[ScoredSequence, ...]:
        """What SFT imitates for a task: Alpaca outputs, chosen responses, or correct answers."""
        if task == "instruction":
            return self.instruction
        if task == "preference":
            return tuple(pair.chosen for pair in self.preference_train)
        if task == "arithmetic":
            return tuple(
                build_sequence(self.codec, problem.prompt, problem.answer, self.max_len)
                for problem in self.arithmetic["train"])
        raise DataError(f"unknown post-training task '{task}'")


def load_post_train_data(
    data_dir: Path,
    codec: TextCodec,
    max_len: int,
    arithmetic: ArithmeticConfig,
    preference_file: Path | None = None,
    held_out_pairs: int = 128,
    held_out_fraction: float = 0.1,
) -> PostTrainData:
    """Build every post-training set; ``preference_file`` replaces HH helpful-base (unpinned)."""
    data_dir = Path(data_dir)
    alpaca_path = data_dir / ALPACA_FILE
    records = parse_instruction_records(
        read_checked(alpaca_path, SUITE_FILE_SHA256[ALPACA_FILE]), alpaca_path)
    train_records = split_records(records, "train", alpaca_path)
    instruction = tuple(
        build_sequence(codec, instruction_prompt(r), instruction_response(r.output), max_len)
        for r in train_records)
    if preference_file is None:
        source = data_dir / HH_HELPFUL_TEST_FILE
        pairs = read_preference_file(source, SUITE_FILE_SHA256[HH_HELPFUL_TEST_FILE])
        first_line, source_name = HH_FIRST_POST_TRAINING_LINE, HH_HELPFUL_TEST_FILE
    else:
        source, first_line = Path(preference_file), 0
        source_name = str(source)
        pairs = read_preference_file(source, None)
    hh = hh_pairs_by_split(pairs, codec, max_len, held_out_fraction, first_line)
    if not hh["train"]:
        raise DataError(f"{source}: no usable preference pairs for training (need an Assistant turn)")
    half = max(1, held_out_pairs // 2)
    held_out = {  # half HH-style pairs, half Alpaca gold-vs-degraded pairs
        split: tuple(hh[split][:half] + alpaca_pairs(
            split_records(records, split, alpaca_path), codec, max_len)[: held_out_pairs - half])
        for split in HELD_OUT_SPLITS
    }
    preference_train = tuple(hh["train"] + alpaca_pairs(train_records, codec, max_len))
    problems = arithmetic_problems(arithmetic)
    return PostTrainData(
        codec=codec,
        max_len=max_len,
        instruction=instruction,
        preference_train=preference_train,
        preference_held_out=held_out,
        arithmetic={split: tuple(items) for split, items in problems.items()},
        preference_source=source_name,
    )
