"""What shows whether a post-training stage worked, on held-out data only.

- ``heldout_preference_accuracy``: over held-out preference pairs, the share where the
  model gives the chosen response the higher mean response log-likelihood (ties count
  one half, as the benchmark suites score choices); ``heldout_preference_margin`` is the
  mean difference of those mean log-likelihoods (nats per token).
- ``arithmetic_exact_match``: greedy decoding on held-out arithmetic problems (disjoint
  from the training problems by construction); a problem counts when the text before
  ``<eos>`` equals the answer. ``arithmetic_error_rate`` is one minus it: GRPO's verdict
  metric, since a relative change from 0% accuracy is undefined.
"""

from __future__ import annotations

from collections import defaultdict
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


def evaluate_post_training(
    model: nn.Module, data: PostTrainData, split: str, device: torch.device, max_new_tokens: int
) -> dict[str, float]:
    """Held-out preference accuracy/margin and arithmetic exact match on ``split``."""
    metrics = preference_metrics(model, data.preference_held_out[split], data.codec.pad_id, device)
    exact = arithmetic_exact_match(model, data.arithmetic[split], data.codec, device, max_new_tokens)
    metrics["arithmetic_exact_match"] = exact
    metrics["arithmetic_error_rate"] = 1.0 - exact  # lower is better; defined at 0% accuracy
    return metrics
