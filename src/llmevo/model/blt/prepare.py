"""How a run builds the BLT arm: a config for a byte budget, then the prepare step.

The BLT arm of ``reproduce blt-bytes`` is compared with the BPE ``llama_modern`` arm at an
equal budget of training *bytes* (arXiv 2412.09871 compares at equal training bytes/FLOPs):

1. ``config = blt_model_config(bytes_per_token, seq_len_tokens)``: the byte window is
   ``round(seq_len_tokens * bytes_per_token)`` bytes, so a window covers the same text as
   one BPE window, and the target mean patch size is the tokenizer's bytes per token, so
   the latent transformer takes about as many steps per window as the BPE model.
2. ``config = prepare_blt(config, train_bytes, validation_bytes, cache_dir, seed)``: trains
   (or loads from ``cache_dir``) the frozen entropy model, calibrates the threshold on the
   training bytes and measures the mean patch size on validation; the returned config's
   ``extra`` holds all of it, so ``build_model(config)`` needs nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from llmevo.data.bytes import BYTE_VOCAB_SIZE
from llmevo.model.blt.entropy import (
    EntropyModelSettings,
    stream_entropies,
    train_or_load_entropy_model,
)
from llmevo.model.blt.model import BLTSettings
from llmevo.model.blt.patcher import calibrate_threshold, entropy_patch_starts, mean_patch_size
from llmevo.model.config import ModelConfig

CALIBRATION_BYTES = 262_144
"""Bytes of training (calibration) and validation (measurement) text used for patch sizes."""


def blt_model_config(
    bytes_per_token: float,
    seq_len_tokens: int = 64,
    patch_rule: str = "global",
    max_patch_len: int = 16,
    entropy_model: EntropyModelSettings | None = None,
    **settings: Any,
) -> ModelConfig:
    """An unprepared BLT config sized against llama_modern (latent: d 64, 2 layers, 4 heads).

    ``settings`` are further ``BLTSettings`` fields (d_local, hash_buckets, ...).
    """
    extra = BLTSettings(
        patch_rule=patch_rule,
        max_patch_len=max_patch_len,
        target_mean_patch_size=bytes_per_token,
        entropy_model=entropy_model or EntropyModelSettings(),
        **settings,
    ).model_dump(mode="json", exclude_none=True)
    BLTSettings.from_extra(extra, prepared=False)  # unknown rule etc. fail here
    return ModelConfig(
        architecture="blt-bytes",
        vocab_size=BYTE_VOCAB_SIZE,
        max_seq_len=max(1, round(seq_len_tokens * bytes_per_token)),
        extra=extra,
    )


def prepare_blt(
    config: ModelConfig,
    train_bytes: Tensor,
    validation_bytes: Tensor,
    cache_dir: Path | str,
    seed: int,
) -> ModelConfig:
    """Train/load the entropy model, calibrate the threshold; returns the buildable config."""
    settings = BLTSettings.from_extra(config.extra, prepared=False)
    record = train_or_load_entropy_model(
        settings.entropy_model, train_bytes, validation_bytes, cache_dir, seed
    )
    window = config.max_seq_len
    train_entropies = stream_entropies(record.model, train_bytes[:CALIBRATION_BYTES], window)
    threshold = calibrate_threshold(
        train_entropies,
        settings.target_mean_patch_size,
        settings.patch_rule,
        settings.max_patch_len,
    )
    validation_entropies = stream_entropies(
        record.model, validation_bytes[:CALIBRATION_BYTES], window
    )
    validation_size = mean_patch_size(
        entropy_patch_starts(
            validation_entropies, threshold, settings.patch_rule, settings.max_patch_len
        )
    )
    prepared = settings.model_copy(
        update={
            "threshold": threshold,
            "entropy_model_path": str(record.path),
            "entropy_model_key": record.key,
            "entropy_model_validation_bpb": record.validation_bpb,
            "unigram_validation_bpb": record.unigram_bpb,
            "validation_mean_patch_size": validation_size,
        }
    )
    return config.model_copy(update={"extra": prepared.model_dump(mode="json")})
