"""Scoring of benchmark suites (``llmevo.data.suites``) with any causal next-token model.

``logits_fn`` maps token ids ``(B, T)`` to next-token logits ``(B, T, V)`` and must be
causal: the logits at position t may depend on tokens 0..t only. Sequences are
right-padded with ``pad_id``; since padding comes after every scored position and masks
drop padded targets, padding never changes a score.

Metrics (SPEC "Metrics"), all from the response tokens only (response text + ``<eos>``):

- ``instruction_loss``: total response NLL / response tokens (nats per token);
- ``instruction_bpb``: total response NLL / (ln 2 x UTF-8 bytes of the kept response;
  special tokens 0 bytes);
- per choice part, each candidate gets its mean response log-likelihood ``s_i``; the
  loss is the mean over examples of ``-log softmax(s)[gold]`` and the accuracy the mean
  of ``1/k`` when the gold is among the ``k`` tied maxima (0 otherwise), so a model that
  cannot tell candidates apart scores chance, not 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from llmevo.data.suites import ChoiceExample, ScoredSequence, SuiteData
from llmevo.errors import ConfigError

LogitsFn = Callable[[torch.Tensor], torch.Tensor]

CHOICE_METRICS: dict[str, tuple[str, str]] = {
    "preference": ("preference_loss", "preference_accuracy"),
    "hh_rlhf": ("hh_preference_loss", "hh_preference_accuracy"),
    "reasoning": ("reasoning_nll", "reasoning_accuracy"),
}


def response_log_likelihoods(
    logits_fn: LogitsFn,
    sequences: Sequence[ScoredSequence],
    pad_id: int,
    batch_size: int = 32,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Summed response log-likelihood (nats) per sequence, float64 ``(N,)``.

    Batches hold sequences of similar length (a stable sort by length); each sum is
    independent of its batch-mates, so the order does not change results.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size {batch_size}: expected at least 1")
    totals = torch.zeros(len(sequences), dtype=torch.float64)
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i].tokens))
    with torch.no_grad():
        for first in range(0, len(order), batch_size):
            batch = order[first : first + batch_size]
            width = max(len(sequences[i].tokens) for i in batch)
            tokens = torch.full((len(batch), width), pad_id, dtype=torch.long)  # (B, T+1)
            starts = torch.empty(len(batch), dtype=torch.long)  # (B,)
            lengths = torch.empty(len(batch), dtype=torch.long)  # (B,)
            for row, index in enumerate(batch):
                sequence = sequences[index]
                tokens[row, : len(sequence.tokens)] = torch.tensor(sequence.tokens)
                starts[row] = sequence.response_start
                lengths[row] = len(sequence.tokens)
            inputs, targets = tokens[:, :-1], tokens[:, 1:]  # (B, T)
            logits = logits_fn(inputs.to(device)).float().cpu()  # (B, T, V)
            if logits.shape[:2] != inputs.shape:
                raise ConfigError(
                    f"logits_fn returned shape {tuple(logits.shape)}; expected"
                    f" ({inputs.shape[0]}, {inputs.shape[1]}, vocab)"
                )
            if int(targets.max()) >= logits.shape[-1]:
                raise ConfigError(
                    f"logits_fn returned {logits.shape[-1]} logits per position; the suite"
                    f" uses token id {int(targets.max())}"
                )
            log_probs = torch.log_softmax(logits, dim=-1)  # (B, T, V)
            target_log_probs = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
            positions = torch.arange(targets.shape[1])  # (T,)
            # target j is token j + 1: scored when it is a response token of the sequence
            scored = (positions >= starts[:, None] - 1) & (positions < lengths[:, None] - 1)
            masked = torch.where(scored, target_log_probs.double(), 0.0)  # (B, T)
            totals[torch.tensor(batch)] = masked.sum(dim=-1)
    return totals


def response_token_count(sequence: ScoredSequence) -> int:
    return len(sequence.tokens) - sequence.response_start


def choice_loss_and_credit(mean_log_likelihoods: torch.Tensor, gold: int) -> tuple[float, float]:
    """``-log softmax(s)[gold]`` and the tie-aware accuracy credit for one example."""
    scores = mean_log_likelihoods.double()  # (K,)
    loss = float(torch.logsumexp(scores, dim=0) - scores[gold])
    best = scores == scores.max()  # (K,)
    credit = 1.0 / int(best.sum()) if bool(best[gold]) else 0.0
    return loss, credit


def _choice_metrics(
    examples: Sequence[ChoiceExample], totals: torch.Tensor, offset: int
) -> tuple[float, float]:
    losses, credits = [], []
    for example in examples:
        count = len(example.candidates)
        tokens = torch.tensor(
            [response_token_count(candidate) for candidate in example.candidates],
            dtype=torch.float64,
        )
        means = totals[offset : offset + count] / tokens  # (K,)
        offset += count
        loss, credit = choice_loss_and_credit(means, example.gold)
        losses.append(loss)
        credits.append(credit)
    return math.fsum(losses) / len(losses), math.fsum(credits) / len(credits)


def evaluate_suite(
    logits_fn: LogitsFn,
    suite: SuiteData,
    batch_size: int = 32,
    device: str | torch.device = "cpu",
) -> dict[str, float]:
    """Score every part ``suite`` holds; metrics of parts it does not score are absent."""
    sequences: list[ScoredSequence] = list(suite.instruction)
    choice_parts = [part for part in CHOICE_METRICS if part in suite.parts]
    for part in choice_parts:
        for example in getattr(suite, part):
            sequences.extend(example.candidates)
    totals = response_log_likelihoods(logits_fn, sequences, suite.pad_id, batch_size, device)

    metrics: dict[str, float] = {}
    instruction_count = len(suite.instruction)
    if instruction_count:
        nll = -float(totals[:instruction_count].sum())
        tokens = sum(response_token_count(sequence) for sequence in suite.instruction)
        response_bytes = sum(sequence.response_bytes for sequence in suite.instruction)
        metrics["instruction_loss"] = nll / tokens
        if response_bytes:
            metrics["instruction_bpb"] = nll / (math.log(2) * response_bytes)
    offset = instruction_count
    for part in choice_parts:
        examples = getattr(suite, part)
        if not examples:
            continue
        loss_name, accuracy_name = CHOICE_METRICS[part]
        metrics[loss_name], metrics[accuracy_name] = _choice_metrics(examples, totals, offset)
        offset += sum(len(example.candidates) for example in examples)
    return metrics
