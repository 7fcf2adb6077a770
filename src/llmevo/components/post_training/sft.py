"""Supervised fine-tuning on demonstrations, loss on response tokens only.

Ouyang et al., "Training language models to follow instructions with human feedback",
arXiv 2203.02155 (the SFT step of InstructGPT). Each step draws ``batch_size``
demonstrations (``<bos> prompt response <eos>``) with the stage's seeded generator and
minimises the mean next-token loss over response tokens (``masked_mean_nll`` with
``response_target_mask``): prompt tokens and padding carry no loss. Reference test: the
mask against a hand-built case and a loss that ignores any change to prompt tokens
(tests/reference/test_posttrain_reference.py).

Deviations: a 140k-parameter model, 64-token context, and the 320 Alpaca train records
(or the task's demonstrations when SFT is another method's ablation) instead of human
demonstrations; one epoch-free seeded sampling instead of 16 epochs.
"""

from __future__ import annotations

from llmevo.components.post_training.base import PostTrainingMethod
from llmevo.components.post_training.stage import StageContext, StageResult, sft_step
from llmevo.registry import Paper, register

INSTRUCTGPT = Paper(
    arxiv_id="2203.02155",
    title="Training language models to follow instructions with human feedback",
    url="https://arxiv.org/abs/2203.02155",
    organization="OpenAI",
)


def run_sft(context: StageContext, steps: int, phase: str, result: StageResult) -> None:
    """``steps`` SFT steps on the task's demonstrations, appended to ``result``."""
    demonstrations = context.data.demonstrations(context.task)
    optimizer = context.optimizer()
    for _ in range(steps):
        result.losses.append(sft_step(context, optimizer, demonstrations))
        result.grad_norms.append(context.last_grad_norm)
        result.phases.append(phase)
        result.examples += context.settings.batch_size


@register(
    slot="post_training",
    name="sft",
    paper=INSTRUCTGPT,
    ablation="none",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "SFT of the pretrained llama_modern on the 320 Alpaca train records (response tokens "
        "only) against no post-training, from the same checkpoint per seed; judged on the "
        "Alpaca validation instruction loss."
    ),
)
class SFT(PostTrainingMethod):
    task = "instruction"
    verdict_metric = "instruction_loss"

    def run(self, context: StageContext) -> StageResult:
        result = StageResult(method="sft")
        run_sft(context, context.settings.steps, "sft", result)
        return result
