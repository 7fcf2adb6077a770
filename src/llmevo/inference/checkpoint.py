"""Checkpoints without pickle: ``model.safetensors`` + ``config.json`` (+ ``tokenizer.json``).

``config.json`` holds the resolved ``ModelConfig`` (``model_dump``), the metadata the
caller passes (run, seed, steps, ...) and the sha256 of the weights file. Tied weights
(the embedding shared with the output head) are stored once and re-tied on load by
``safetensors.torch.save_model`` / ``load_model``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from torch import nn

from llmevo.artifacts.io import (
    staged_folder,
    write_file_atomic,
    write_json_atomic,
    write_text_atomic,
)
from llmevo.catalog import build_model
from llmevo.digests import sha256_file
from llmevo.errors import ArtifactError
from llmevo.model.config import ModelConfig
from llmevo.registry import one_line_error
from llmevo.skeleton import build_skeleton

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
    ``metadata`` must be JSON-serialisable. All or nothing: the files are written into a
    staging folder first (``artifacts.io.staged_folder``), so a failed write (one line naming
    the file, ``WriteError``) leaves no new folder and an earlier checkpoint there unchanged.
    """
    folder = Path(directory)
    with staged_folder(folder) as staging:
        weights = staging / WEIGHTS_FILE
        write_file_atomic(weights, lambda temporary: save_model(model, str(temporary)))
        if tokenizer_json is not None:
            write_text_atomic(staging / TOKENIZER_FILE, tokenizer_json)
        config = {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "model": model_config.model_dump(mode="json"),
            "tokenizer": TOKENIZER_FILE if tokenizer_json is not None else None,
            "weights_sha256": sha256_file(weights),
            "metadata": metadata or {},
        }
        write_json_atomic(staging / CONFIG_FILE, config)
    return folder


MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB
MAX_TOKENIZER_BYTES = 64 << 20


def _read_config(config_path: Path) -> dict[str, Any]:
    """``config.json`` as an object, with the fields every version-1 checkpoint has."""
    if config_path.stat().st_size > MAX_CONFIG_BYTES:
        raise ArtifactError(f"{config_path}: {config_path.stat().st_size:,} bytes; a checkpoint "
                            f"config is at most {MAX_CONFIG_BYTES:,}")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise ArtifactError(f"{config_path}: not valid JSON ({str(error)[:120]})") from None
    if not isinstance(config, dict):
        raise ArtifactError(f"{config_path}: holds a JSON {type(config).__name__}; expected an object")
    if config.get("format") != CHECKPOINT_FORMAT:
        raise ArtifactError(f"{config_path}: format is not '{CHECKPOINT_FORMAT}'")
    if config.get("version") != CHECKPOINT_VERSION:
        raise ArtifactError(f"{config_path}: checkpoint version {config.get('version')!r} is not "
                            f"supported (this llmevo reads version {CHECKPOINT_VERSION})")
    digest = config.get("weights_sha256")
    if not isinstance(digest, str) or len(digest) != 64:
        raise ArtifactError(f"{config_path}: no weights_sha256; a checkpoint without its "
                            "integrity hash is refused")
    if not isinstance(config.get("model"), dict):
        raise ArtifactError(f"{config_path}: 'model' is not an object")
    if not isinstance(config.get("metadata", {}), dict):
        raise ArtifactError(f"{config_path}: 'metadata' is not an object")
    tokenizer = config.get("tokenizer")
    if tokenizer is not None and (not isinstance(tokenizer, str) or tokenizer != TOKENIZER_FILE):
        raise ArtifactError(f"{config_path}: tokenizer {str(tokenizer)[:80]!r} is not the "
                            f"checkpoint's own {TOKENIZER_FILE}")
    return config


def _check_shapes(model_config: ModelConfig, weights: Path) -> None:
    """The weights file's tensors have exactly the shapes the config's model has, checked
    on a skeleton (``llmevo.skeleton``: bounded memory), so an absurd config is refused before it is built."""
    from safetensors import safe_open

    try:
        with safe_open(str(weights), framework="pt") as handle:
            stored = {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except (SafetensorError, OSError, ValueError) as error:
        raise ArtifactError(f"{weights}: not a safetensors file ({str(error)[:120]})") from None
    total = sum(math.prod(shape) for shape in stored.values())
    for field in ("n_layers", "d_model", "vocab_size", "n_heads"):
        value = getattr(model_config, field)
        limit = len(stored) if field == "n_layers" else total
        if value > limit:
            raise ArtifactError(f"{weights.parent}: {field}={value:,} is impossible for a weights "
                                f"file of {len(stored)} tensors and {total:,} numbers")
    try:
        skeleton = build_skeleton(model_config)
    except (ValueError, TypeError, RuntimeError, AssertionError) as error:
        raise ArtifactError(f"{weights.parent}: model config is invalid ({str(error)[:120]})") from None
    expected = {name: tuple(tensor.shape) for name, tensor in skeleton.state_dict().items()}
    for name, shape in expected.items():
        if name in stored and stored[name] != shape:
            raise ArtifactError(f"{weights}: tensor {name} has shape {list(stored[name])}; the "
                                f"config's model needs {list(shape)}")
    elements = sum(math.prod(shape) for shape in expected.values())
    if elements * 4 > 8 * max(weights.stat().st_size, 1) + (1 << 20):
        raise ArtifactError(f"{weights.parent}: the config describes {elements:,} parameters, "
                            f"far more than the {weights.stat().st_size:,}-byte weights file holds")


def load_checkpoint(directory: Path | str) -> Checkpoint:
    """Rebuild the model from ``config.json`` and load its weights (no pickle involved).

    Everything read is untrusted: the config must be a version-1 object with the weights'
    sha256 (refused, not skipped, when missing), the tokenizer must be the folder's own
    ``tokenizer.json``, and the model the config describes must match the weights' shapes
    before it is built.
    """
    folder = Path(directory)
    config_path, weights = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    for path in (config_path, weights):
        if not path.is_file():
            raise ArtifactError(f"checkpoint file {path} is missing; expected a checkpoint folder")
    config = _read_config(config_path)
    if config["weights_sha256"] != sha256_file(weights):
        raise ArtifactError(f"{weights}: sha256 differs from the one recorded in {config_path}")
    try:
        model_config = ModelConfig.model_validate(config["model"])
    except ValidationError as error:
        raise one_line_error(error, str(config_path), within="model", kind=ArtifactError) from None
    _check_shapes(model_config, weights)
    model = build_model(model_config)
    try:
        missing, unexpected = load_model(model, str(weights), strict=True)
    except (SafetensorError, RuntimeError) as error:
        raise ArtifactError(f"{weights}: cannot load weights ({error})".splitlines()[0]) from None
    model.eval()
    tokenizer_json = None
    if config.get("tokenizer"):
        tokenizer_path = folder / TOKENIZER_FILE
        if not tokenizer_path.is_file():
            raise ArtifactError(f"checkpoint tokenizer {tokenizer_path} is missing")
        if tokenizer_path.stat().st_size > MAX_TOKENIZER_BYTES:
            raise ArtifactError(f"checkpoint tokenizer {tokenizer_path} is implausibly large")
        try:
            tokenizer_json = tokenizer_path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ArtifactError(f"checkpoint tokenizer {tokenizer_path} is not UTF-8 text") from None
    return Checkpoint(
        model=model,
        model_config=model_config,
        tokenizer_json=tokenizer_json,
        metadata=dict(config.get("metadata", {})),
        directory=folder,
    )
