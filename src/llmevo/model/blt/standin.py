"""A token-level PROXY for BLT (arXiv 2412.09871): patches of BPE tokens, not bytes.

This is the cheap stand-in of the reference artifact, kept only as a proxy; the real
byte-level model is ``model.ByteLatentTransformer``. Over BPE tokens:

- a learned surprisal predictor: a bigram next-token model learned online from the
  training batches (counts in a buffer, updated *after* each training forward, frozen in
  eval) gives the expected surprisal H(x_t | x_{t-1}) of every position;
- a patch starts where that entropy exceeds a threshold recalibrated after each training
  batch to ``target_tokens_per_patch``, so low-surprisal neighbours share a latent patch;
- the same ``LatentPatchCore`` as BLT pools each patch, runs the latent transformer and
  expands back to per-token next-token logits with the one-patch shift.

Causal: the entropy at t uses token t - 1 only, and the buffers a forward pass reads were
fixed before that batch. Deviations from the paper: everything byte-level (bytes, hash
n-grams, a neural entropy model) is replaced by tokens and a bigram table.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field, PositiveInt, ValidationError
from torch import Tensor

from llmevo.errors import ConfigError
from llmevo.model.blt.core import LatentPatchCore, LatentPatchModel, LocalSettings
from llmevo.model.blt.entropy import entropy_from_logits
from llmevo.model.blt.model import BLT_PAPER
from llmevo.model.blt.patcher import calibrate_threshold, entropy_patch_starts, patch_ids
from llmevo.model.config import ModelConfig
from llmevo.registry import one_line_error, register


class StandinSettings(LocalSettings):
    """``ModelConfig.extra`` of ``architecture="blt"``."""

    target_tokens_per_patch: float = Field(default=2.0, ge=1.0)
    max_patch_len: PositiveInt = 8
    smoothing: float = Field(default=0.5, gt=0)


def bigram_row_entropies(counts: Tensor, smoothing: float) -> Tensor:
    """Entropy (nats) of the smoothed next-token distribution after each token.  (V,)"""
    return entropy_from_logits((counts + smoothing).log())


def previous_token_entropies(tokens: Tensor, row_entropies: Tensor) -> Tensor:
    """(B, T) -> (B, T + 1): entry t is H(x_t | x_{t-1}); entry 0 is 0 (always a start)."""
    return torch.cat(
        (torch.zeros_like(tokens[:, :1], dtype=row_entropies.dtype), row_entropies[tokens]), 1
    )


@register(
    slot="architecture",
    name="blt",
    config=StandinSettings,
    paper=BLT_PAPER,
    ablation="transformer",
    implementation_status="component_only",
    supports_kv_cache=False,
    supports_replicas=False,
    scope=(
        "PROXY, not BLT: the reference artifact's token-level stand-in. A bigram surprisal over "
        "BPE tokens decides patch boundaries, low-surprisal neighbours share a latent patch, and "
        "states are expanded back to token targets. No bytes, no entropy model, no bits-per-byte "
        "claim about BLT; see blt-bytes for the real mechanism."
    ),
)
class BLTStandin(LatentPatchModel):
    """``architecture="blt"``: tokens (B, T) -> logits (B, T, V). A proxy, see above."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        try:
            self.settings = StandinSettings.model_validate(config.extra)
        except ValidationError as error:
            raise one_line_error(error, "architecture 'blt': invalid extra settings") from None
        s = self.settings
        if s.target_tokens_per_patch > s.max_patch_len:
            raise ConfigError(
                f"blt: target_tokens_per_patch {s.target_tokens_per_patch:g} is unreachable;"
                f" expected a value in [1, {s.max_patch_len}]"
            )
        self.config = config
        self.core = LatentPatchCore(config, s, hash_ngrams=(), hash_buckets=1, pad_id=0)
        vocab = config.vocab_size
        self.register_buffer("bigram_counts", torch.zeros(vocab, vocab))
        self.register_buffer("row_entropies", bigram_row_entropies(self.bigram_counts, s.smoothing))
        self.register_buffer("threshold", torch.tensor(0.0))

    def patch_index(self, tokens: Tensor) -> Tensor:
        """(B, T) -> (B, T + 1) patch of each token and of the pseudo-position T."""
        entropies = previous_token_entropies(tokens, self.row_entropies)
        starts = entropy_patch_starts(
            entropies, float(self.threshold), "global", self.settings.max_patch_len
        )
        return patch_ids(starts)

    @torch.no_grad()
    def learn_boundaries(self, tokens: Tensor) -> None:
        """Update the bigram counts with this batch, then recalibrate the threshold on it."""
        previous, following = tokens[:, :-1].flatten(), tokens[:, 1:].flatten()
        self.bigram_counts.index_put_(
            (previous, following),
            torch.ones_like(previous, dtype=self.bigram_counts.dtype),
            accumulate=True,
        )
        self.row_entropies.copy_(bigram_row_entropies(self.bigram_counts, self.settings.smoothing))
        entropies = previous_token_entropies(tokens, self.row_entropies)[:, :-1]
        self.threshold.fill_(
            calibrate_threshold(
                entropies,
                self.settings.target_tokens_per_patch,
                "global",
                self.settings.max_patch_len,
                iterations=30,
            )
        )

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (B, T) -> logits (B, T, V); boundaries are learned after the output is made."""
        logits = self.run_core(tokens, self.patch_index(tokens))
        if self.training:
            self.learn_boundaries(tokens)
        return logits

    def architecture_stats(self) -> dict[str, float | int | str]:
        observed = self.units_seen / self.patches_seen if self.patches_seen else 0.0
        return {
            "proxy": "token-level stand-in over BPE tokens, not byte-level BLT",
            "patching": "learned bigram surprisal (online counts), global threshold",
            "patch_threshold_nats": float(self.threshold),
            "target_tokens_per_patch": self.settings.target_tokens_per_patch,
            "observed_tokens_per_patch": observed,
            "observed_patch_boundary_rate": 1.0 / observed if observed else 0.0,
            "expanded_back_to_token_targets": 1,
            **self.parameter_stats(),
        }


def blt_standin_config(
    vocab_size: int = 512, seq_len: int = 64, target_tokens_per_patch: float = 2.0, **settings: Any
) -> ModelConfig:
    """The stand-in at llama_modern's latent size (d 64, 2 layers, 4 heads)."""
    extra = StandinSettings(target_tokens_per_patch=target_tokens_per_patch, **settings).model_dump(
        mode="json"
    )
    return ModelConfig(
        architecture="blt", vocab_size=vocab_size, max_seq_len=seq_len, extra=extra
    )
