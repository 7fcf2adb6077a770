"""NEFTune: SFT with uniform noise added to the input embeddings.

Jain et al., "NEFTune: Noisy Embeddings Improve Instruction Finetuning", arXiv 2310.05914
(Algorithm 1): during training, embeddings ``X`` of a sequence of length ``L`` and width
``d`` become ``X + (alpha / sqrt(L d)) * U(-1, 1)``; evaluation sees clean embeddings.
The noise is added by a forward hook on the model's token embedding while the stage
trains, from the stage's seeded generator. Reference test: the noise scale
``alpha / sqrt(L d)`` and its bound against the formula (tests/reference/test_posttrain_reference.py).

Deviations: L is each row's unpadded length (the paper's per-sequence length); the model
is tiny and its context 64 tokens.
"""

from __future__ import annotations

import torch
from pydantic import PositiveFloat
from torch import nn

from llmevo.components.post_training.base import PostTrainingMethod
from llmevo.components.post_training.objectives import masked_mean_nll, neftune_noise
from llmevo.components.post_training.stage import StageContext, StageResult, batch_sequences
from llmevo.errors import ConfigError
from llmevo.registry import Paper, SearchDimension, StrictModel, register


class NEFTuneConfig(StrictModel):
    alpha: PositiveFloat = 5.0


@register(
    slot="post_training",
    name="neftune",
    config=NEFTuneConfig,
    paper=Paper(
        arxiv_id="2310.05914",
        title="NEFTune: Noisy Embeddings Improve Instruction Finetuning",
        url="https://arxiv.org/abs/2310.05914",
        organization="University of Maryland; New York University",
    ),
    ablation="sft",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "SFT with noisy embeddings (alpha / sqrt(L d)) against plain SFT on the same Alpaca "
        "records, steps and seed; judged on Alpaca validation instruction loss (the paper "
        "judges open-ended generations with an LLM judge, not run here)."
    ),
    search_space={"alpha": SearchDimension(choices=(5.0, 10.0, 15.0))},
)
class NEFTune(PostTrainingMethod):
    task = "instruction"
    verdict_metric = "instruction_loss"

    def run(self, context: StageContext) -> StageResult:
        embedding = getattr(context.model, "embedding", None)
        if not isinstance(embedding, nn.Embedding):
            raise ConfigError("neftune needs a model with a token `embedding` (nn.Embedding)")
        alpha = self.config.alpha
        lengths: dict[str, torch.Tensor] = {}

        def add_noise(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
            if not module.training or "rows" not in lengths:
                return output
            return output + neftune_noise(output, lengths["rows"], alpha, context.generator)

        demonstrations = context.data.demonstrations(context.task)
        optimizer = context.optimizer()
        result = StageResult(method="neftune")
        handle = embedding.register_forward_hook(add_noise)
        try:
            for _ in range(context.settings.steps):
                picked = [demonstrations[i] for i in context.draw(len(demonstrations))]
                batch = batch_sequences(picked, context.data.codec.pad_id, context.device)
                lengths["rows"] = batch.lengths - 1  # input tokens per row
                logits = context.model(batch.inputs)  # (B, T, V)
                loss = masked_mean_nll(logits, batch.targets, batch.mask)
                context.step(optimizer, loss)
                result.losses.append(loss.item())
                result.grad_norms.append(context.last_grad_norm)
                result.phases.append("neftune")
                result.examples += context.settings.batch_size
        finally:
            handle.remove()
        return result
