"""The fixed concatenation: the preset's training sources end to end, windows uniform over
them. This is what every arm trained on before the data slot existed, and the ablation of
every data recipe: a bare token stream passed to ``train()`` draws exactly these windows
(``WindowSampler``), and its token-stream hash is the same (``identity`` is empty).

No paper: the platform's own baseline. Reference test: tests/reference/test_data_recipes_reference.py
(the windows equal ``WindowSampler`` over ``torch.cat`` of the ``train_on`` sources).
"""

from __future__ import annotations

from llmevo.components.data.base import DataRecipe, TrainSources, Windows, WindowSampler
from llmevo.registry import EmptyConfig, register


@register(
    slot="data",
    name="concat",
    config=EmptyConfig,
    implementation_status="full",
    baseline=True,
    evolve_integrated=True,
    scope="the preset's train_on sources concatenated; windows uniform over the whole stream",
)
class Concat(DataRecipe):
    def pool_tokens(self, sources: TrainSources) -> int:
        return int(sources.stream.numel())

    def windows(self, sources: TrainSources, batch_size: int, seq_len: int, seed: int,
                steps: int) -> Windows:
        return WindowSampler(sources.stream, batch_size, seq_len, seed)
