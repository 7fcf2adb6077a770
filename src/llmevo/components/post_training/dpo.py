"""Direct Preference Optimization against a frozen reference copy of the SFT model.

Rafailov et al., "Direct Preference Optimization: Your Language Model is Secretly a Reward
Model", arXiv 2305.18290 (eq. 7). The stage first runs SFT on the chosen responses of the
training pairs for ``sft_fraction`` of its steps (the paper's "Preferred-FT" when no SFT
model exists), freezes a copy as the reference, then minimises ``dpo_loss`` on summed
response log-probabilities of seeded batches of pairs. It records the implicit reward
margin and the share of training pairs whose chosen reward exceeds the rejected one.
Reference tests: ``dpo_loss`` against a hand-computed pair and TRL's sigmoid-loss formula
(tests/reference/test_posttrain_reference.py).

Deviations: HH-RLHF helpful-base *test* pairs (the train split is not available here)
split by prompt hash, plus Alpaca gold-vs-degraded pairs; 64-token context; one
SFT-then-DPO stage whose total number of examples equals its ablation's.
"""

from __future__ import annotations

import copy

import torch
from pydantic import Field, PositiveFloat

from llmevo.components.post_training.base import PostTrainingMethod
from llmevo.components.post_training.objectives import dpo_loss, sequence_log_probs
from llmevo.components.post_training.sft import run_sft
from llmevo.components.post_training.stage import StageContext, StageResult, batch_sequences
from llmevo.registry import Paper, SearchDimension, StrictModel, register


class DPOConfig(StrictModel):
    beta: PositiveFloat = 0.1
    sft_fraction: float = Field(default=0.5, ge=0.0, lt=1.0)


@register(
    slot="post_training",
    name="dpo",
    config=DPOConfig,
    paper=Paper(
        arxiv_id="2305.18290",
        title="Direct Preference Optimization: Your Language Model is Secretly a Reward Model",
        url="https://arxiv.org/abs/2305.18290",
        organization="Stanford University",
    ),
    ablation="sft",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "SFT on chosen responses then DPO against a frozen copy, vs SFT on chosen responses "
        "alone (Preferred-FT) for the same number of pairs, from the same pretrained "
        "checkpoint per seed; judged on held-out preference accuracy (HH-RLHF pairs split "
        "by prompt hash plus Alpaca gold-vs-degraded pairs)."
    ),
    search_space={
        "beta": SearchDimension(low=0.05, high=0.5, log=True),
        "sft_fraction": SearchDimension(choices=(0.25, 0.5)),
    },
)
class DPO(PostTrainingMethod):
    task = "preference"
    verdict_metric = "heldout_preference_accuracy"

    def run(self, context: StageContext) -> StageResult:
        settings = context.settings
        result = StageResult(method="dpo")
        warmup = round(settings.steps * self.config.sft_fraction)
        run_sft(context, warmup, "sft", result)
        reference = copy.deepcopy(context.model).eval()
        for parameter in reference.parameters():
            parameter.requires_grad_(False)
        pairs = context.data.preference_train
        optimizer = context.optimizer()
        margins, accuracies = [], []
        for _ in range(settings.steps - warmup):
            picked = [pairs[i] for i in context.draw(len(pairs))]
            sequences = [p.chosen for p in picked] + [p.rejected for p in picked]
            batch = batch_sequences(sequences, context.data.codec.pad_id, context.device)
            policy = sequence_log_probs(context.model(batch.inputs), batch.targets, batch.mask)
            with torch.no_grad():
                ref = sequence_log_probs(reference(batch.inputs), batch.targets, batch.mask)
            n = len(picked)
            loss, chosen, rejected = dpo_loss(policy[:n], policy[n:], ref[:n], ref[n:],
                                              self.config.beta)
            context.step(optimizer, loss.mean())
            result.losses.append(loss.mean().item())
            result.grad_norms.append(context.last_grad_norm)
            result.phases.append("dpo")
            result.examples += n
            margins.append((chosen - rejected).mean().item())
            accuracies.append((chosen > rejected).float().mean().item())
        if margins:
            result.extra["dpo_reward_margin"] = sum(margins) / len(margins)
            result.extra["dpo_reward_accuracy"] = sum(accuracies) / len(accuracies)
        return result
