"""Scoring mechanics: padding and batching never change a score; metric keys per suite."""

from __future__ import annotations

import math

import pytest
import torch

from llmevo.data.codec import ByteCodec
from llmevo.data.preference import TextChoice
from llmevo.data.suites import SuiteData, build_choice, build_sequence
from llmevo.eval.suites import choice_loss_and_credit, evaluate_suite, response_log_likelihoods

CODEC = ByteCodec()
V = CODEC.vocab_size


def causal_mixer(seed: int = 0):
    """A causal model whose logits at t depend on all tokens 0..t (running mean)."""
    generator = torch.Generator().manual_seed(seed)
    embedding = torch.randn(V, 16, generator=generator)
    readout = torch.randn(16, V, generator=generator)

    def logits_fn(tokens: torch.Tensor) -> torch.Tensor:
        vectors = embedding[tokens]  # (B, T, 16)
        counts = torch.arange(1, tokens.shape[1] + 1).view(1, -1, 1)
        return (vectors.cumsum(dim=1) / counts) @ readout  # (B, T, V)

    return logits_fn


def small_suite(parts: tuple[str, ...]) -> SuiteData:
    instruction = tuple(
        build_sequence(CODEC, f"Instruction: {prompt}\nResponse:", f" {answer}", 48)
        for prompt, answer in [
            ("hi", "hello there"),
            ("a much longer prompt " * 4, "ok"),
            ("x", ""),
        ]
    )
    preference = (
        build_choice(
            CODEC, TextChoice.with_shared_prompt("P:", (" good", " bad", " ugly!"), 0), 48
        ),
    )
    reasoning = (build_choice(CODEC, TextChoice.with_shared_prompt("Q:", (" 1", " 2"), 1), 48),)
    return SuiteData(
        name="test",
        split="validation",
        parts=parts,
        max_len=48,
        pad_id=CODEC.pad_id,
        instruction=instruction,
        preference=preference if "preference" in parts else (),
        hh_rlhf=preference if "hh_rlhf" in parts else (),
        reasoning=reasoning if "reasoning" in parts else (),
        counts={},
        skipped={},
        truncated={},
        fingerprint="",
    )


def test_padding_and_batch_size_do_not_change_scores() -> None:
    suite = small_suite(("instruction",))
    logits_fn = causal_mixer()
    batched = response_log_likelihoods(logits_fn, suite.instruction, CODEC.pad_id, batch_size=8)
    for index, sequence in enumerate(suite.instruction):
        alone = response_log_likelihoods(logits_fn, [sequence], CODEC.pad_id, batch_size=1)
        assert torch.allclose(batched[index], alone[0], rtol=0, atol=1e-9)
    # a different pad id gives the same scores: pads are never counted
    other_pad = response_log_likelihoods(logits_fn, suite.instruction, 0, batch_size=8)
    assert torch.allclose(batched, other_pad, rtol=0, atol=1e-9)


def test_evaluation_is_deterministic_and_keys_follow_parts() -> None:
    logits_fn = causal_mixer(1)
    core = evaluate_suite(logits_fn, small_suite(("instruction",)))
    assert set(core) == {"instruction_loss", "instruction_bpb"}
    public = small_suite(("instruction", "preference", "hh_rlhf", "reasoning"))
    first = evaluate_suite(logits_fn, public, batch_size=2)
    second = evaluate_suite(logits_fn, public, batch_size=32)
    assert set(first) == {
        "instruction_loss",
        "instruction_bpb",
        "preference_loss",
        "preference_accuracy",
        "hh_preference_loss",
        "hh_preference_accuracy",
        "reasoning_nll",
        "reasoning_accuracy",
    }
    assert first == pytest.approx(second, rel=0, abs=1e-9)
    assert first["instruction_loss"] == core["instruction_loss"]


def test_choice_loss_and_tie_aware_credit() -> None:
    loss, credit = choice_loss_and_credit(torch.tensor([-1.0, -2.0, -3.0]), gold=0)
    expected = -math.log(math.exp(-1) / (math.exp(-1) + math.exp(-2) + math.exp(-3)))
    assert loss == pytest.approx(expected, abs=1e-12)
    assert credit == 1.0
    assert choice_loss_and_credit(torch.tensor([-1.0, -2.0]), gold=1)[1] == 0.0
    tied_loss, tied_credit = choice_loss_and_credit(torch.zeros(4), gold=2)
    assert tied_credit == 0.25
    assert tied_loss == pytest.approx(math.log(4), abs=1e-12)
