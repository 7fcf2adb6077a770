"""Self-consistency (components/post_training/evaluate.py) against hand-worked votes."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from llmevo.components.post_training import evaluate
from llmevo.components.post_training.evaluate import (
    generated_tokens,
    majority_vote,
    self_consistency,
)
from llmevo.components.post_training.tasks import ArithmeticProblem

PAD, EOS, BOS = 256, 257, 258
CODEC = SimpleNamespace(pad_id=PAD, eos_id=EOS, bos_id=BOS, encode=lambda text: list(text.encode()))


def test_majority_vote_and_its_tie_rule():
    assert majority_vote(["5", "4", "4"]) == "4"
    assert majority_vote(["5", "4"]) == "5"  # a tie goes to the answer that came first
    assert majority_vote(["", "", "7"]) == ""  # an empty completion is an answer too (a wrong one)


def test_generated_tokens_count_up_to_and_with_eos():
    assert generated_tokens([52, EOS, PAD, PAD], EOS, PAD) == 2
    assert generated_tokens([52, 53, 54], EOS, PAD) == 3  # no eos within the budget
    assert generated_tokens([EOS, PAD], EOS, PAD) == 1


def _row(text: str, width: int = 3) -> list[int]:
    ids = [*text.encode(), EOS]
    return (ids + [PAD] * width)[:width]


def test_votes_over_the_first_k_samples(monkeypatch):
    # two problems, 2+2=4 and 3+4=7, with 8 scripted samples each
    scripted = {
        "2+2=": ["5", "4", "4", "5", "4", "5", "5", "5"],  # k=1 wrong, k=4 tie -> "5" first: wrong; k=8: 5 wins
        "3+4=": ["7", "1", "1", "7", "7", "7", "1", "1"],  # k=1 right, k=4 tie -> "7": right; k=8 tie -> 7
    }
    problems = [ArithmeticProblem(2, 2, "+"), ArithmeticProblem(3, 4, "+")]

    def fake_sample(model, prompts, max_new_tokens, eos_id, pad_id, temperature=0.0, generator=None):
        assert temperature == 0.7 and generator is not None and prompts.shape[0] == 16  # 2 problems x 8
        rows = []
        for prompt in prompts.tolist():
            text = bytes(t for t in prompt if t < 256).decode()
            index = sum(1 for r in rows if r[0] == text)
            rows.append((text, _row(scripted[text][index])))
        return torch.tensor([row for _, row in rows])

    monkeypatch.setattr(evaluate, "sample_completions", fake_sample)
    metrics = self_consistency(None, problems, CODEC, torch.device("cpu"), 3, temperature=0.7, seed=42)
    assert metrics["arithmetic_sc1_exact_match"] == 0.5
    assert metrics["arithmetic_sc4_exact_match"] == 0.5
    assert metrics["arithmetic_sc8_exact_match"] == 0.5  # 2+2: "5" (5 of 8); 3+4: tie 4-4, "7" first
    # every sample is one digit and <eos>: 2 tokens each
    assert [metrics[f"arithmetic_sc{k}_tokens"] for k in (1, 4, 8)] == [2.0, 8.0, 16.0]
