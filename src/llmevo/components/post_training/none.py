"""No post-training: the pretrained model as it is (the ablation of SFT)."""

from __future__ import annotations

from llmevo.components.post_training.base import PostTrainingMethod
from llmevo.components.post_training.stage import StageContext, StageResult
from llmevo.registry import register


@register(
    slot="post_training",
    name="none",
    implementation_status="full",
    baseline=True,
    evolve_integrated=True,
    scope="The pretrained model, unchanged: the baseline every post-training method is compared with.",
)
class NoPostTraining(PostTrainingMethod):
    def run(self, context: StageContext) -> StageResult:
        return StageResult(method="none")
