"""Checkpoints without pickle: ``model.safetensors`` + ``config.json`` (+ ``tokenizer.json``).

``config.json`` holds the resolved ``ModelConfig`` (``model_dump``), the metadata the
caller passes (run, seed, steps, ...) and the sha256 of the weights file. Tied weights
(the embedding shared with the output head) are stored once and re-tied on load by
``safetensors.torch.save_model`` / ``load_model``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from torch import nn

from llmevo.catalog import build_model
from llmevo.digests import sha256_file
from llmevo.errors import ArtifactError
from llmevo.model.config import ModelConfig

CHECKPOINT_FORMAT = "llmevo-checkpoint"
CHECKPOINT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"


@dataclass
class Checkpoint:
    model: nn.Module
    model_config: ModelConfig
    tokenizer_json: str | None
    metadata: dict[str, Any]
    directory: Path


def save_checkpoint(
    directory: Path | str,
    model: nn.Module,
    model_config: ModelConfig,
    tokenizer_json: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write the checkpoint into ``directory`` (created); returns the directory.

    ``tokenizer_json`` is the tokenizer's JSON text (``tokenizers.Tokenizer.to_str()``).
    ``metadata`` must be JSON-serialisable.
    """
    from llmevo.artifacts.io import write_json_atomic, write_text_atomic

    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / WEIGHTS_FILE
    save_model(model, str(weights))
    if tokenizer_json is not None:
        write_text_atomic(folder / TOKENIZER_FILE, tokenizer_json)
    config = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "model": model_config.model_dump(mode="json"),
        "tokenizer": TOKENIZER_FILE if tokenizer_json is not None else None,
        "weights_sha256": sha256_file(weights),
        "metadata": metadata or {},
    }
    write_json_atomic(folder / CONFIG_FILE, config)
    return folder


def load_checkpoint(directory: Path | str) -> Checkpoint:
    """Rebuild the model from ``config.json`` and load its weights (no pickle involved)."""
    folder = Path(directory)
    config_path, weights = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    for path in (config_path, weights):
        if not path.is_file():
            raise ArtifactError(f"checkpoint file {path} is missing; expected a checkpoint folder")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ArtifactError(f"{config_path}: not valid JSON ({error})") from None
    if config.get("format") != CHECKPOINT_FORMAT:
        raise ArtifactError(f"{config_path}: format is not '{CHECKPOINT_FORMAT}'")
    if config.get("weights_sha256") not in (None, sha256_file(weights)):
        raise ArtifactError(f"{weights}: sha256 differs from the one recorded in {config_path}")
    model_config = ModelConfig.model_validate(config["model"])
    model = build_model(model_config)
    try:
        missing, unexpected = load_model(model, str(weights), strict=True)
    except (SafetensorError, RuntimeError) as error:
        raise ArtifactError(f"{weights}: cannot load weights ({error})".splitlines()[0]) from None
    model.eval()
    tokenizer_json = None
    if config.get("tokenizer"):
        tokenizer_path = folder / config["tokenizer"]
        if not tokenizer_path.is_file():
            raise ArtifactError(f"checkpoint tokenizer {tokenizer_path} is missing")
        tokenizer_json = tokenizer_path.read_text(encoding="utf-8")
    return Checkpoint(
        model=model,
        model_config=model_config,
        tokenizer_json=tokenizer_json,
        metadata=dict(config.get("metadata", {})),
        directory=folder,
    )
