"""What a post-training method provides: ``run(context) -> StageResult``.

``task`` names the data a method is about (``None``: it takes the comparison's task, as
SFT does when it is another method's ablation); ``verdict_metric`` is what its
reproduction decides on, with ``higher_is_better`` saying which way is better.
"""

from __future__ import annotations

from typing import ClassVar

from llmevo.components.post_training.stage import StageContext, StageResult
from llmevo.registry import StrictModel


class PostTrainingMethod:
    task: ClassVar[str | None] = None
    verdict_metric: ClassVar[str] = "instruction_loss"

    def __init__(self, config: StrictModel):
        self.config = config

    def run(self, context: StageContext) -> StageResult:  # pragma: no cover
        raise NotImplementedError
