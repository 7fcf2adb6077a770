"""Byte Latent Transformer: entropy-patched bytes through a latent transformer.

Pagnoni et al., "Byte Latent Transformer: Patches Scale Better Than Tokens", arXiv
2412.09871 (Meta FAIR). ``forward(byte_ids (B, T)) -> logits (B, T, 259)``: a frozen
byte entropy model (``entropy.py``) scores every position, ``patcher.py`` turns the
scores into patch starts, and ``core.LatentPatchCore`` runs encoder -> latent -> decoder
with the one-patch shift that keeps every prediction causal.

The entropy model is frozen, deliberately *not* a submodule: it is not trained, not in
``parameters()`` or ``state_dict()`` and not counted in ``num_parameters()``; it is loaded
from the safetensors file named in ``config.extra`` (written by ``prepare_blt``) and its
size is reported separately in ``architecture_stats()``.

Reference checks: tests/unit/test_blt_model.py (no logit at t changes when bytes > t
change, with live entropy patching), tests/reference/test_blt_reference.py (patch rules
against the paper's equations, hash n-grams against a direct polynomial hash).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, PositiveInt, ValidationError
from torch import Tensor, nn

from llmevo.data.bytes import BYTE_VOCAB_SIZE, PAD_ID
from llmevo.errors import ConfigError
from llmevo.model.blt.core import LatentPatchCore, LatentPatchModel, LocalSettings
from llmevo.model.blt.entropy import EntropyModelSettings, byte_entropies, load_entropy_model
from llmevo.model.blt.patcher import entropy_patch_starts, patch_ids, patch_rule
from llmevo.model.config import ModelConfig
from llmevo.registry import Paper, register

BLT_PAPER = Paper(
    arxiv_id="2412.09871",
    title="Byte Latent Transformer: Patches Scale Better Than Tokens",
    url="https://arxiv.org/abs/2412.09871",
    organization="Meta FAIR",
)


class BLTSettings(LocalSettings):
    """``ModelConfig.extra`` of ``architecture="blt-bytes"``; written by ``prepare_blt``."""

    hash_ngrams: tuple[PositiveInt, ...] = (3, 4, 5)
    hash_buckets: PositiveInt = 128
    patch_rule: str = "global"
    max_patch_len: PositiveInt = 16
    target_mean_patch_size: float = Field(gt=0)
    entropy_model: EntropyModelSettings = Field(default_factory=EntropyModelSettings)
    # written by prepare_blt (entropy model trained/cached, threshold calibrated):
    threshold: float | None = None
    entropy_model_path: str | None = None
    entropy_model_key: str | None = None
    entropy_model_validation_bpb: float | None = None
    unigram_validation_bpb: float | None = None
    validation_mean_patch_size: float | None = None

    PREPARED_FIELDS: ClassVar[tuple[str, ...]] = (
        "threshold",
        "entropy_model_path",
        "entropy_model_key",
        "entropy_model_validation_bpb",
        "unigram_validation_bpb",
        "validation_mean_patch_size",
    )

    @classmethod
    def from_extra(cls, extra: dict[str, Any], prepared: bool = True) -> BLTSettings:
        try:
            settings = cls.model_validate(extra)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '<extra>'}: {e['msg']}"
                for e in error.errors()
            )
            raise ConfigError(
                f"architecture 'blt-bytes': invalid extra settings ({problems}); build them with prepare_blt"
            ) from None
        patch_rule(settings.patch_rule)  # unknown rule -> ConfigError
        missing = [name for name in cls.PREPARED_FIELDS if getattr(settings, name) is None]
        if prepared and missing:
            raise ConfigError(
                f"architecture 'blt-bytes': extra lacks {', '.join(missing)}; run prepare_blt first"
            )
        return settings


@register(
    slot="architecture",
    name="blt-bytes",
    config=BLTSettings,
    paper=BLT_PAPER,
    ablation="transformer",
    implementation_status="full",
    supports_kv_cache=False,
    supports_replicas=False,
    scope=(
        "Byte-level BLT at small scale: a frozen 35k-parameter causal byte LM gives next-byte "
        "entropies; patches start where entropy crosses a global threshold calibrated to the BPE "
        "tokenizer's bytes per token; local encoder (byte + hash n-gram embeddings, cross-attention "
        "pooling), latent transformer from llama_modern's registered blocks, local decoder. "
        "Compared with BPE llama_modern in bits per byte at an equal budget of training bytes. Not "
        "reproduced: the 8B scale, FLOP-matched scaling laws, 500k hash buckets, per-layer pooling."
    ),
)
class ByteLatentTransformer(LatentPatchModel):
    """``architecture="blt-bytes"``: bytes (B, T) -> next-byte logits (B, T, 259)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.vocab_size != BYTE_VOCAB_SIZE:
            raise ConfigError(
                f"architecture 'blt-bytes': vocab_size {config.vocab_size}, expected {BYTE_VOCAB_SIZE} (bytes + specials)"
            )
        self.config = config
        self.settings = BLTSettings.from_extra(config.extra)
        entropy_model = load_entropy_model(
            self.settings.entropy_model_path, self.settings.entropy_model
        )
        self._frozen = (entropy_model,)  # a tuple: not a submodule, so not trained or counted
        s = self.settings
        self.core = LatentPatchCore(config, s, hash_ngrams=s.hash_ngrams, hash_buckets=s.hash_buckets,
                                    pad_id=PAD_ID)

    @property
    def entropy_model(self) -> nn.Module:
        return self._frozen[0]

    def _apply(self, fn: Any, recurse: bool = True) -> ByteLatentTransformer:
        super()._apply(fn, recurse)
        self.entropy_model._apply(fn)  # device/dtype moves reach the frozen model too
        return self

    def patch_index(self, byte_ids: Tensor) -> Tensor:
        """(B, T) -> (B, T + 1) patch of each byte and of the pseudo-position T."""
        entropies = byte_entropies(self.entropy_model, byte_ids)  # (B, T + 1)
        starts = entropy_patch_starts(
            entropies,
            self.settings.threshold,
            self.settings.patch_rule,
            self.settings.max_patch_len,
        )
        return patch_ids(starts)

    def forward(self, byte_ids: Tensor) -> Tensor:
        """byte_ids (B, T) -> logits (B, T, V); logits[:, t] predict byte t + 1."""
        return self.run_core(byte_ids, self.patch_index(byte_ids))

    def architecture_stats(self) -> dict[str, float | int | str]:
        """Patching and parameter figures for the artifact (scalars only)."""
        s = self.settings
        observed = (
            self.units_seen / self.patches_seen
            if self.patches_seen
            else s.validation_mean_patch_size
        )
        return {
            "patching": "entropy",
            "patch_rule": s.patch_rule,
            "patch_threshold_nats": s.threshold,
            "max_patch_len": s.max_patch_len,
            "target_mean_patch_size_bytes": s.target_mean_patch_size,
            "validation_mean_patch_size_bytes": s.validation_mean_patch_size,
            "observed_mean_patch_size_bytes": observed,
            "observed_patch_boundary_rate": 1.0 / observed,
            "entropy_model_validation_bpb": s.entropy_model_validation_bpb,
            "unigram_validation_bpb": s.unigram_validation_bpb,
            "entropy_model_parameters_frozen_not_counted": sum(
                p.numel() for p in self.entropy_model.parameters()
            ),
            **self.parameter_stats(),
        }
