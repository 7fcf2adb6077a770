"""Group Relative Policy Optimization on a verifiable task (synthetic arithmetic).

Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
Models", arXiv 2402.03300 (section 4.1, eq. 3-4, outcome supervision). The stage first
runs SFT on correct answers of the training problems for ``sft_fraction`` of its steps,
freezes a reference copy, then per step: draws ``batch_size`` training problems, samples
``group_size`` answers each at ``temperature``, rewards exact match (1/0), normalises
rewards within each group (``group_advantages``), and takes ``updates_per_batch``
gradient steps on the clipped surrogate minus ``kl_beta`` times the KL estimator to the
reference (``grpo_loss``; the first step's ratio is 1, later ones are clipped). It records
the mean reward and the share of reward-bearing groups (rewards not all equal) per step.
Reference tests: group advantages and the clipped objective on hand-computed groups
(tests/reference/test_posttrain_reference.py).

Deviations: arithmetic instead of GSM8K/MATH; a 140k-parameter model; answers of a few
tokens; the reference is the SFT model itself (no reference resets).
"""

from __future__ import annotations

import copy

import torch
from pydantic import Field, PositiveFloat, PositiveInt

from llmevo.components.post_training.base import PostTrainingMethod
from llmevo.components.post_training.objectives import (
    group_advantages,
    grpo_loss,
    response_target_mask,
    reward_bearing,
    token_log_probs,
)
from llmevo.components.post_training.sft import run_sft
from llmevo.components.post_training.stage import (
    StageContext,
    StageResult,
    completion_text,
    sample_completions,
)
from llmevo.registry import Paper, SearchDimension, StrictModel, register


class GRPOConfig(StrictModel):
    group_size: int = Field(default=8, ge=2, description="Samples per prompt; 1 has no group signal.")
    clip_epsilon: PositiveFloat = 0.2
    kl_beta: float = Field(default=0.04, ge=0.0)
    temperature: PositiveFloat = 1.0
    updates_per_batch: PositiveInt = 2
    sft_fraction: float = Field(default=0.5, ge=0.0, lt=1.0)


@register(
    slot="post_training",
    name="grpo",
    config=GRPOConfig,
    paper=Paper(
        arxiv_id="2402.03300",
        title="DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
        url="https://arxiv.org/abs/2402.03300",
        organization="DeepSeek-AI",
    ),
    ablation="sft",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "SFT on arithmetic answers then GRPO (exact-match reward, group-normalised "
        "advantages, clipped ratio, KL to the SFT copy) vs SFT alone on the same number of "
        "training problems, from the same pretrained checkpoint per seed; judged on greedy "
        "exact match on held-out problems disjoint from training."
    ),
    search_space={
        "group_size": SearchDimension(choices=(4, 8)),
        "kl_beta": SearchDimension(choices=(0.0, 0.04)),
        "temperature": SearchDimension(choices=(0.7, 1.0)),
    },
)
class GRPO(PostTrainingMethod):
    task = "arithmetic"
    verdict_metric = "arithmetic_error_rate"

    def run(self, context: StageContext) -> StageResult:
        config, settings, data = self.config, context.settings, context.data
        codec, device = data.codec, context.device
        result = StageResult(method="grpo")
        warmup = round(settings.steps * config.sft_fraction)
        run_sft(context, warmup, "sft", result)
        reference = copy.deepcopy(context.model).eval()
        for parameter in reference.parameters():
            parameter.requires_grad_(False)
        problems = data.arithmetic["train"]
        optimizer = context.optimizer()
        kls = []
        for _ in range(settings.steps - warmup):
            picked = [problems[i] for i in context.draw(len(problems))]
            rows, masks, rewards = [], [], []
            for problem in picked:
                prompt = [codec.bos_id, *codec.encode(problem.prompt)]
                prompts = torch.tensor([prompt] * config.group_size, device=device)  # (G, P)
                completions = sample_completions(
                    context.model, prompts, settings.max_new_tokens, codec.eos_id, codec.pad_id,
                    config.temperature, context.generator)  # (G, N)
                rewards.append([float(completion_text(codec, c.tolist()) == problem.answer)
                                for c in completions])
                for completion in completions.tolist():
                    kept = []
                    for token in completion:
                        kept.append(token)
                        if token == codec.eos_id:
                            break
                    rows.append(prompt + kept)
                    masks.append((len(prompt), len(prompt) + len(kept)))
            reward = torch.tensor(rewards)  # (B, G)
            advantages = group_advantages(reward).flatten().to(device)  # (B*G,)
            width = max(len(r) for r in rows)
            tokens = torch.full((len(rows), width), codec.pad_id, dtype=torch.long)
            for i, row in enumerate(rows):
                tokens[i, : len(row)] = torch.tensor(row)
            tokens = tokens.to(device)
            inputs, targets = tokens[:, :-1], tokens[:, 1:]  # (M, T)
            starts = torch.tensor([m[0] for m in masks], device=device)
            lengths = torch.tensor([m[1] for m in masks], device=device)
            mask = response_target_mask(lengths, starts, width - 1)  # (M, T)
            with torch.no_grad():
                old = token_log_probs(context.model(inputs), targets)
                ref = token_log_probs(reference(inputs), targets)
            first_loss = None
            for _ in range(config.updates_per_batch):
                policy = token_log_probs(context.model(inputs), targets)
                loss, kl = grpo_loss(policy, old, ref, advantages, mask,
                                     config.clip_epsilon, config.kl_beta)
                context.step(optimizer, loss)
                if first_loss is None:  # the step's record: its first update
                    first_loss = loss.item()
                    kls.append(kl.item())
                    result.grad_norms.append(context.last_grad_norm)
            result.losses.append(first_loss)
            result.phases.append("grpo")
            result.examples += len(picked)
            result.rewards.append(reward.mean().item())
            result.reward_bearing_rates.append(reward_bearing(reward).float().mean().item())
        if kls:
            result.extra["grpo_mean_kl"] = sum(kls) / len(kls)
            result.extra["grpo_mean_reward"] = sum(result.rewards) / len(result.rewards)
        return result
