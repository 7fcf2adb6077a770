"""The truncation rule keeps the response visible and the sequence within max_len + 1."""

from __future__ import annotations

import pytest

from llmevo.data.codec import ByteCodec
from llmevo.data.suites import build_sequence
from llmevo.errors import ConfigError

CODEC = ByteCodec()


def test_fitting_sequence_is_untouched() -> None:
    sequence = build_sequence(CODEC, "Q:", " ab", max_len=16)
    assert sequence.tokens == (257, *b"Q:", *b" ab", 258)
    assert sequence.response_start == 3
    assert sequence.response_bytes == 3
    assert not sequence.truncated


def test_long_prompt_is_left_truncated_response_kept_whole() -> None:
    sequence = build_sequence(CODEC, "x" * 100 + "END:", " yes", max_len=16)
    assert sequence.truncated
    assert len(sequence.tokens) == 17
    assert sequence.tokens[0] == CODEC.bos_id
    assert sequence.tokens[sequence.response_start :] == (*b" yes", CODEC.eos_id)
    assert bytes(sequence.tokens[1 : sequence.response_start]).endswith(b"END:")
    assert sequence.response_bytes == 4


def test_long_response_cut_at_tail_prompt_keeps_its_end() -> None:
    prompt = "p" * 40 + "Response:"
    response = " " + "r" * 100
    sequence = build_sequence(CODEC, prompt, response, max_len=16)
    assert len(sequence.tokens) == 17
    prompt_part = bytes(sequence.tokens[1 : sequence.response_start])
    assert prompt_part == b"Response:"[-8:]  # the last max_len // 2 prompt tokens
    response_part = sequence.tokens[sequence.response_start :]
    assert bytes(response_part) == response.encode()[:8]
    assert sequence.response_bytes == 8


def test_short_prompt_long_response_gives_response_the_room() -> None:
    sequence = build_sequence(CODEC, "Q:", " " + "r" * 100, max_len=16)
    assert sequence.response_start == 3
    assert len(sequence.tokens) == 17
    assert sequence.response_bytes == 14


def test_max_len_one_still_scores_a_response_token() -> None:
    sequence = build_sequence(CODEC, "prompt", " answer", max_len=1)
    assert sequence.tokens == (CODEC.bos_id, ord(" "))
    assert sequence.response_start == 1
    with pytest.raises(ConfigError, match="max_len 0"):
        build_sequence(CODEC, "prompt", " answer", max_len=0)
