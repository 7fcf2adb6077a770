"""What shows whether a post-training stage worked, on held-out data only.

- ``heldout_preference_accuracy``: over held-out preference pairs, the share where the
  model gives the chosen response the higher mean response log-likelihood (ties count
  one half, as the benchmark suites score choices); ``heldout_preference_margin`` is the
  mean difference of those mean log-likelihoods (nats per token).
- ``arithmetic_exact_match``: greedy decoding on held-out arithmetic problems (disjoint
  from the training problems by construction); a problem counts when the text before
  ``<eos>`` equals the answer. ``arithmetic_error_rate`` is one minus it: GRPO's verdict
  metric, since a relative change from 0% accuracy is undefined.
- ``arithmetic_sc{k}_exact_match`` and ``arithmetic_sc{k}_tokens`` (k = 1, 4, 8; with
  ``PostTrainSettings.self_consistency``): self-consistency (Wang et al. 2203.11171) — k
  answers sampled at ``sampling_temperature`` per held-out problem, the answer given most
  often wins (a tie goes to the answer that came first; the vote never sees the gold answer),
  scored by exact match; ``tokens`` is the mean number of tokens generated per problem for
  those k samples (up to and including each one's ``<eos>``), the compute the vote cost.
  The samples come from one generator seeded by the run seed and the split, so both arms of a
  seed draw from the same random stream, and the first k samples are shared by every larger k.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import torch
from torch import nn

from llmevo.components.post_training.stage import completion_text, sample_completions
from llmevo.components.post_training.tasks import ArithmeticProblem, PostTrainData, TokenPair
from llmevo.data.codec import TextCodec
from llmevo.eval.suites import (
    choice_loss_and_credit,
    response_log_likelihoods,
    response_token_count,
)


def preference_metrics(
    model: nn.Module, pairs: Sequence[TokenPair], pad_id: int, device: torch.device
) -> dict[str, float]:
    sequences = [s for pair in pairs for s in (pair.chosen, pair.rejected)]
    model.eval()
    totals = response_log_likelihoods(model, sequences, pad_id, batch_size=64, device=device)
    counts = torch.tensor([response_token_count(s) for s in sequences], dtype=torch.float64)
    means = (totals / counts).view(-1, 2)  # (N, 2): chosen, rejected
    credits = [choice_loss_and_credit(row, 0)[1] for row in means]
    return {
        "heldout_preference_accuracy": sum(credits) / len(credits),
        "heldout_preference_margin": float((means[:, 0] - means[:, 1]).mean()),
    }


def arithmetic_exact_match(
    model: nn.Module, problems: Sequence[ArithmeticProblem], codec: TextCodec,
    device: torch.device, max_new_tokens: int,
) -> float:
    """Greedy exact-match accuracy; prompts of equal token length are decoded together."""
    by_length: dict[int, list[tuple[list[int], str]]] = defaultdict(list)
    for problem in problems:
        prompt = [codec.bos_id, *codec.encode(problem.prompt)]
        by_length[len(prompt)].append((prompt, problem.answer))
    correct = 0
    for items in by_length.values():
        prompts = torch.tensor([prompt for prompt, _ in items], device=device)  # (N, P)
        completions = sample_completions(model, prompts, max_new_tokens, codec.eos_id,
                                         codec.pad_id)
        for completion, (_, answer) in zip(completions.tolist(), items, strict=True):
            correct += completion_text(codec, completion) == answer
    return correct / len(problems)


SELF_CONSISTENCY_KS = (1, 4, 8)
SPLIT_SEED = {"validation": 1, "test": 2}  # the sampling generator's offset per split


def majority_vote(answers: Sequence[str]) -> str:
    """The answer given most often; among equally frequent ones, the one that came first."""
    counts = Counter(answers)
    best = max(counts.values())
    return next(answer for answer in answers if counts[answer] == best)


def generated_tokens(completion: Sequence[int], eos_id: int, pad_id: int) -> int:
    """Tokens a completion generated: up to and including its first ``<eos>``."""
    count = 0
    for token in completion:
        if token == pad_id:
            break
        count += 1
        if token == eos_id:
            break
    return count


def self_consistency(
    model: nn.Module, problems: Sequence[ArithmeticProblem], codec: TextCodec, device: torch.device,
    max_new_tokens: int, temperature: float, seed: int, ks: Sequence[int] = SELF_CONSISTENCY_KS,
) -> dict[str, float]:
    """Exact match of the majority answer over the first k samples, and the mean tokens those
    k samples generated per problem, for each k (see the module docstring)."""
    generator = torch.Generator().manual_seed(seed)
    most = max(ks)
    answers: list[list[str]] = []
    tokens: list[list[int]] = []
    golds: list[str] = []
    by_length: dict[int, list[tuple[list[int], str]]] = defaultdict(list)
    for problem in problems:
        prompt = [codec.bos_id, *codec.encode(problem.prompt)]
        by_length[len(prompt)].append((prompt, problem.answer))
    for length in sorted(by_length):
        items = by_length[length]
        prompts = torch.tensor([prompt for prompt, _ in items for _ in range(most)], device=device)
        completions = sample_completions(model, prompts, max_new_tokens, codec.eos_id, codec.pad_id,
                                         temperature=temperature, generator=generator).tolist()
        for index, (_, gold) in enumerate(items):
            rows = completions[index * most:(index + 1) * most]
            answers.append([completion_text(codec, row) for row in rows])
            tokens.append([generated_tokens(row, codec.eos_id, codec.pad_id) for row in rows])
            golds.append(gold)
    metrics = {}
    for k in ks:
        correct = sum(majority_vote(sampled[:k]) == gold for sampled, gold in zip(answers, golds, strict=True))
        metrics[f"arithmetic_sc{k}_exact_match"] = correct / len(golds)
        metrics[f"arithmetic_sc{k}_tokens"] = sum(sum(counts[:k]) for counts in tokens) / len(golds)
    return metrics


def evaluate_post_training(
    model: nn.Module, data: PostTrainData, split: str, device: torch.device, max_new_tokens: int,
    self_consistency_seed: int | None = None, temperature: float = 0.7,
) -> dict[str, float]:
    """Held-out preference accuracy/margin and arithmetic exact match on ``split``; with
    ``self_consistency_seed`` (the run seed) the self-consistency metrics too."""
    metrics = preference_metrics(model, data.preference_held_out[split], data.codec.pad_id, device)
    exact = arithmetic_exact_match(model, data.arithmetic[split], data.codec, device, max_new_tokens)
    metrics["arithmetic_exact_match"] = exact
    metrics["arithmetic_error_rate"] = 1.0 - exact  # lower is better; defined at 0% accuracy
    if self_consistency_seed is not None:
        metrics.update(self_consistency(model, data.arithmetic[split], data.codec, device, max_new_tokens,
                                        temperature, 10 * self_consistency_seed + SPLIT_SEED[split]))
    return metrics
