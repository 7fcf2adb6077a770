"""Benchmark suites: tokenized instruction, preference, HH-RLHF and reasoning examples.

Suites (SPEC "Data"): ``core`` scores instruction (the LM part is loaded by
``llmevo.data.lm``); ``public`` adds preference (gold Alpaca output vs degraded
candidates), HH-RLHF chosen/rejected pairs and GSM8K 8-way numeric choice.

Every example is one or more ``ScoredSequence``: ``<bos> prompt response <eos>`` where
the response tokens (the response text and the final ``<eos>``) are the ones scored.

Truncation rule (``max_len`` is the model context): a model reads at most ``max_len``
tokens and predicts the next one at each, so a sequence holds at most ``max_len + 1``
tokens (as the LM windows of 65 tokens at sequence length 64). With ``B = max_len`` the
room after ``<bos>``, a prompt of ``P`` and a response of ``R`` tokens (``<eos>``
included) that do not fit are cut to

    prompt_keep   = min(P, max(B - R, B // 2))   # the prompt's last tokens
    response_keep = min(R, B - prompt_keep)       # the response's first tokens

so the whole response stays when it fits beside a left-truncated prompt; otherwise the
prompt keeps its last ``B // 2`` tokens (its ``Response:``/``Answer:`` end) and the
response is cut at the tail. ``<bos>`` always stays first. ``SuiteData.truncated``
counts, per part, the examples with at least one cut sequence.

Bad input: malformed records are ``DataError`` naming the file and record (see the part
modules); records that are well formed but unusable are skipped and counted in
``SuiteData.skipped`` (``preference_no_distinct_candidate``: an empty output leaves no
candidate that differs from the gold; ``reasoning_unparsable_answer``: no integer after
``####``; ``hh_rlhf_no_assistant_turn``). Splits are by file position, so a skip lowers
the count rather than pulling in a later record.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from llmevo.artifacts.io import write_bytes_atomic
from llmevo.data.codec import TextCodec
from llmevo.data.hh_rlhf import HH_SPLITS, hh_choice, parse_preference_pairs
from llmevo.data.instruction import (
    INSTRUCTION_SPLITS,
    InstructionRecord,
    instruction_prompt,
    instruction_response,
    parse_instruction_records,
    split_records,
)
from llmevo.data.pins import (
    ALPACA_FILE,
    GSM8K_TEST_FILE,
    HH_HELPFUL_TEST_FILE,
    SUITE_FILE_SHA256,
    read_pinned,
)
from llmevo.data.preference import TextChoice, preference_choice
from llmevo.data.reasoning import GSM8K_SPLITS, parse_reasoning_records, reasoning_choice
from llmevo.errors import ConfigError, DataError

EVALUATION_SPLITS = ("validation", "test")
PART_NAMES = ("instruction", "preference", "reasoning", "hh_rlhf")
SUITE_PARTS: dict[str, tuple[str, ...]] = {
    "core": ("instruction",),
    "public": ("instruction", "preference", "hh_rlhf", "reasoning"),
}


@dataclass(frozen=True)
class ScoredSequence:
    """``<bos> prompt response <eos>``; positions ``response_start..`` are scored."""

    tokens: tuple[int, ...]  # at most max_len + 1 ids
    response_start: int  # index of the first response token (>= 1)
    response_bytes: int  # UTF-8 bytes of the kept response tokens (specials 0)
    truncated: bool


@dataclass(frozen=True)
class ChoiceExample:
    """Candidates scored by mean response log-likelihood; ``candidates[gold]`` is right."""

    candidates: tuple[ScoredSequence, ...]
    gold: int


@dataclass(frozen=True)
class SuiteData:
    """A suite's tokenized examples for one evaluation split."""

    name: str
    split: str
    parts: tuple[str, ...]  # the parts this suite scores
    max_len: int
    pad_id: int
    instruction: tuple[ScoredSequence, ...]
    preference: tuple[ChoiceExample, ...]
    hh_rlhf: tuple[ChoiceExample, ...]
    reasoning: tuple[ChoiceExample, ...]
    counts: dict[str, int]  # instruction_train, {part}_{split} for every part (0 unscored)
    skipped: dict[str, int]
    truncated: dict[str, int]  # per scored part: examples with a cut sequence
    fingerprint: str


def build_sequence(codec: TextCodec, prompt: str, response: str, max_len: int) -> ScoredSequence:
    """Tokenize and, if needed, truncate by the module's rule (response kept visible)."""
    if max_len < 1:
        raise ConfigError(f"max_len {max_len}: expected a model context of at least 1 token")
    prompt_ids = codec.encode(prompt)
    response_ids = [*codec.encode(response), codec.eos_id]
    room = max_len  # tokens after <bos>
    prompt_keep, response_keep = len(prompt_ids), len(response_ids)
    truncated = prompt_keep + response_keep > room
    if truncated:
        prompt_keep = min(len(prompt_ids), max(room - len(response_ids), room // 2))
        response_keep = min(len(response_ids), room - prompt_keep)
    kept_prompt = prompt_ids[len(prompt_ids) - prompt_keep :]
    kept_response = response_ids[:response_keep]
    return ScoredSequence(
        tokens=(codec.bos_id, *kept_prompt, *kept_response),
        response_start=1 + len(kept_prompt),
        response_bytes=codec.byte_length(kept_response),
        truncated=truncated,
    )


def build_choice(codec: TextCodec, choice: TextChoice, max_len: int) -> ChoiceExample:
    candidates = tuple(
        build_sequence(codec, prompt, response, max_len)
        for prompt, response in zip(choice.prompts, choice.responses, strict=True)
    )
    return ChoiceExample(candidates, choice.gold)


@dataclass
class _PartBuild:
    examples: tuple = ()
    skipped: dict[str, int] = field(default_factory=dict)
    truncated: int = 0
    used: list[bytes] = field(default_factory=list)  # canonical bytes of the records used


Pins = Mapping[str, str | None]
PartBuilder = Callable[[Path, Pins, str, TextCodec, int], _PartBuild]


# sha256 of an Alpaca file -> its parsed records: a reproduction builds the instruction part
# for validation and test and for both arms' views, and parsing dominated that (4 parses)
_PARSED_ALPACA: dict[str, tuple[InstructionRecord, ...]] = {}


def _alpaca_records(data_dir: Path, pins: Pins) -> list[InstructionRecord]:
    raw = read_pinned(data_dir, ALPACA_FILE, pins)  # checked against its pin on every call
    key = pins.get(ALPACA_FILE) or hashlib.sha256(raw).hexdigest()
    if key not in _PARSED_ALPACA:
        _PARSED_ALPACA[key] = tuple(parse_instruction_records(raw, data_dir / ALPACA_FILE))
    return list(_PARSED_ALPACA[key])


def _build_instruction(
    data_dir: Path, pins: Pins, split: str, codec: TextCodec, max_len: int
) -> _PartBuild:
    records = split_records(_alpaca_records(data_dir, pins), split, data_dir / ALPACA_FILE)
    examples = tuple(
        build_sequence(
            codec, instruction_prompt(record), instruction_response(record.output), max_len
        )
        for record in records
    )
    return _PartBuild(
        examples=examples,
        truncated=sum(example.truncated for example in examples),
        used=[record.canonical_bytes() for record in records],
    )


def _build_choices(
    records: Sequence, to_choice: Callable, skip_key: str, codec: TextCodec, max_len: int
) -> _PartBuild:
    build = _PartBuild(skipped={skip_key: 0})
    examples = []
    for record in records:
        build.used.append(record.canonical_bytes())
        choice = to_choice(record)
        if choice is None:
            build.skipped[skip_key] += 1
            continue
        example = build_choice(codec, choice, max_len)
        build.truncated += any(candidate.truncated for candidate in example.candidates)
        examples.append(example)
    build.examples = tuple(examples)
    return build


def _build_preference(
    data_dir: Path, pins: Pins, split: str, codec: TextCodec, max_len: int
) -> _PartBuild:
    records = split_records(_alpaca_records(data_dir, pins), split, data_dir / ALPACA_FILE)
    return _build_choices(
        records, preference_choice, "preference_no_distinct_candidate", codec, max_len
    )


def _positional_slice(items: list, positions: range, source: Path) -> list:
    if len(items) < positions.stop:
        raise DataError(
            f"{source}: {len(items)} records; expected at least {positions.stop}"
            f" (records {positions.start}..{positions.stop - 1} are used)"
        )
    return items[positions.start : positions.stop]


def _build_reasoning(
    data_dir: Path, pins: Pins, split: str, codec: TextCodec, max_len: int
) -> _PartBuild:
    source = data_dir / GSM8K_TEST_FILE
    records = parse_reasoning_records(read_pinned(data_dir, GSM8K_TEST_FILE, pins), source)
    records = _positional_slice(records, GSM8K_SPLITS[split], source)
    return _build_choices(records, reasoning_choice, "reasoning_unparsable_answer", codec, max_len)


def _build_hh_rlhf(
    data_dir: Path, pins: Pins, split: str, codec: TextCodec, max_len: int
) -> _PartBuild:
    source = data_dir / HH_HELPFUL_TEST_FILE
    pairs = parse_preference_pairs(read_pinned(data_dir, HH_HELPFUL_TEST_FILE, pins), source)
    pairs = _positional_slice(pairs, HH_SPLITS[split], source)
    return _build_choices(pairs, hh_choice, "hh_rlhf_no_assistant_turn", codec, max_len)


PART_BUILDERS: dict[str, PartBuilder] = {
    "instruction": _build_instruction,
    "preference": _build_preference,
    "reasoning": _build_reasoning,
    "hh_rlhf": _build_hh_rlhf,
}


def _fingerprint(
    name: str, split: str, codec: TextCodec, max_len: int, used: dict[str, list[bytes]]
) -> str:
    digest = hashlib.sha256()

    def add(chunk: bytes) -> None:
        digest.update(len(chunk).to_bytes(8, "big"))
        digest.update(chunk)

    for text in ("llmevo-suite-v1", name, split, codec.identity, str(max_len)):
        add(text.encode("utf-8"))
    for part, chunks in used.items():
        add(part.encode("utf-8"))
        add(str(len(chunks)).encode("utf-8"))
        for chunk in chunks:
            add(chunk)
    return digest.hexdigest()


def load_suite(
    name: str,
    data_dir: Path,
    codec: TextCodec,
    max_len: int,
    split: str,
    pins: Pins = SUITE_FILE_SHA256,
) -> SuiteData:
    """Load, check (pinned sha256) and tokenize suite ``name`` for ``split``.

    ``pins`` maps each file (relative to ``data_dir``) to its expected sha256; the
    default is the released files' sums, None for a file skips its check (tests only).

    ``fingerprint`` is a sha256 over the records used (the instruction train records
    included), the suite name, split, ``codec.identity`` and ``max_len``.
    """
    if name not in SUITE_PARTS:
        raise ConfigError(f"unknown benchmark suite {name!r}; expected one of: core, public")
    if split not in EVALUATION_SPLITS:
        raise ConfigError(f"unknown evaluation split {split!r}; expected validation or test")
    data_dir = Path(data_dir)
    parts = SUITE_PARTS[name]
    train = split_records(_alpaca_records(data_dir, pins), "train", data_dir / ALPACA_FILE)
    used: dict[str, list[bytes]] = {
        "instruction_train": [record.canonical_bytes() for record in train]
    }
    builds: dict[str, _PartBuild] = {}
    for part in parts:
        builds[part] = PART_BUILDERS[part](data_dir, pins, split, codec, max_len)
        used[part] = builds[part].used
    counts = {"instruction_train": len(train)}
    for part in PART_NAMES:
        counts[f"{part}_{split}"] = len(builds[part].examples) if part in builds else 0
    skipped = {key: value for build in builds.values() for key, value in build.skipped.items()}
    return SuiteData(
        name=name,
        split=split,
        parts=parts,
        max_len=max_len,
        pad_id=codec.pad_id,
        instruction=builds["instruction"].examples,
        preference=builds["preference"].examples if "preference" in builds else (),
        hh_rlhf=builds["hh_rlhf"].examples if "hh_rlhf" in builds else (),
        reasoning=builds["reasoning"].examples if "reasoning" in builds else (),
        counts=counts,
        skipped=skipped,
        truncated={part: build.truncated for part, build in builds.items()},
        fingerprint=_fingerprint(name, split, codec, max_len, used),
    )


INSTRUCTION_STREAM_CACHE = "instruction-train-v1"  # the claim's prefix; a new layout, a new name


def instruction_train_stream(
    data_dir: Path, codec: TextCodec, pins: Pins = SUITE_FILE_SHA256, cache_dir: Path | None = None,
) -> torch.Tensor:
    """The 320 Alpaca train records as one LongTensor, each ``<bos> prompt response <eos>``.

    ``cache_dir``: keep the ids in ``<cache_dir>/tokens/`` keyed by the codec's identity and
    the file's pinned sha256 (encoding the 640 texts was a third of a warm smoke run's data
    preparation: docs/LOG.md, 2026-12-05, seventeenth session). The file is read and checked
    against its pin either way; an entry that is unreadable, altered or not the one it claims
    to be is rebuilt."""
    data_dir = Path(data_dir)
    records = _alpaca_records(data_dir, pins)  # checked against its pin on every call
    pin = pins.get(ALPACA_FILE)
    claim = f"{INSTRUCTION_STREAM_CACHE}:{pin}:{codec.identity}"
    path = None
    if cache_dir is not None and pin is not None:
        path = Path(cache_dir) / "tokens" / f"instruction-{hashlib.sha256(claim.encode()).hexdigest()[:20]}.npz"
        cached = _read_ids(path, claim, codec.vocab_size)
        if cached is not None:
            return cached
    ids: list[int] = []
    for record in split_records(records, "train", data_dir / ALPACA_FILE):
        ids.append(codec.bos_id)
        ids.extend(codec.encode(instruction_prompt(record)))
        ids.extend(codec.encode(instruction_response(record.output)))
        ids.append(codec.eos_id)
    stream = torch.tensor(ids, dtype=torch.long)  # (N,)
    if path is not None:
        array = stream.numpy()
        entry = io.BytesIO()
        np.savez(entry, ids=array, claim=np.str_(claim),
                 ids_sha256=np.str_(hashlib.sha256(array.tobytes()).hexdigest()))
        write_bytes_atomic(path, entry.getvalue())
    return stream


def _read_ids(path: Path, claim: str, vocab_size: int) -> torch.Tensor | None:
    """A cached id array, or None when the entry is missing, unreadable, names another claim,
    or its ids do not hash to the recorded digest or lie outside the vocabulary."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            ids, recorded, digest = stored["ids"], str(stored["claim"]), str(stored["ids_sha256"])
    except Exception:  # noqa: BLE001 - any unreadable entry is rebuilt, whatever numpy raises
        return None
    if (recorded != claim or ids.dtype != np.int64 or ids.ndim != 1 or not len(ids)
            or hashlib.sha256(ids.tobytes()).hexdigest() != digest
            or int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        return None
    return torch.from_numpy(ids)


__all__ = [
    "INSTRUCTION_SPLITS",
    "SUITE_PARTS",
    "ChoiceExample",
    "ScoredSequence",
    "SuiteData",
    "build_choice",
    "build_sequence",
    "instruction_train_stream",
    "load_suite",
]
