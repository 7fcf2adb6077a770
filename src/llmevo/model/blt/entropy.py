"""The entropy model: a small causal byte LM whose next-byte entropies place BLT's patches.

BLT (arXiv 2412.09871, section 2.3) trains a separate byte-level LM and patches where its
next-byte entropy is high. Here it is the registered-component ``Transformer`` (rope, mha,
swiglu, rmsnorm, pre_norm) at byte vocabulary 259 and ~35k parameters, trained for a fixed
number of steps on random windows of the training bytes, then frozen. Its weights are
cached as safetensors under a key made of its settings, the training settings and the
sha256 of the training bytes, so every run with the same data reuses the same model.

Every window is fed as ``<bos> b_0 .. b_{T-1}`` and yields T + 1 entropies: entry t is
H(x_t | <bos>, x_<t) in nats (entry T is the entropy of the byte after the window, which
still uses bytes inside the window only).

Deviations from the paper: 35k parameters and a 256-byte context instead of 100M
parameters and 512 bytes; trained on the run's own training split. Its optimizer is the
``adamw`` component's ``AdamWOptimizer`` (bit-identical to ``torch.optim.AdamW`` on CPU,
without importing ``torch._dynamo``).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from pydantic import PositiveFloat, PositiveInt
from safetensors.torch import load_file, save_file
from torch import Tensor

from llmevo.artifacts.io import write_file_atomic
from llmevo.components.optim.adamw import AdamWOptimizer
from llmevo.data.bytes import BOS_ID, BYTE_VOCAB_SIZE, bytes_fingerprint
from llmevo.errors import DataError
from llmevo.model.config import ModelConfig
from llmevo.model.transformer import Transformer
from llmevo.registry import ComponentChoice, StrictModel


class EntropyModelSettings(StrictModel):
    """Size and training of the entropy model."""

    d_model: PositiveInt = 32
    n_layers: PositiveInt = 2
    n_heads: PositiveInt = 2
    ffn_hidden: PositiveInt = 96
    context: PositiveInt = 256
    batch_size: PositiveInt = 32
    steps: PositiveInt = 400
    learning_rate: PositiveFloat = 3e-3

    def transformer_config(self) -> ModelConfig:
        return ModelConfig(
            vocab_size=BYTE_VOCAB_SIZE,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            max_seq_len=self.context + 1,
            attention=ComponentChoice(name="mha", config={"kv_heads": self.n_heads}),
            feedforward=ComponentChoice(name="swiglu", config={"hidden": self.ffn_hidden}),
        )


@dataclass(frozen=True)
class EntropyModelRecord:
    """A trained (or loaded) entropy model and how good it is."""

    model: Transformer
    path: Path
    key: str
    validation_bpb: float
    unigram_bpb: float
    parameters: int


def with_bos(byte_ids: Tensor) -> Tensor:
    """(B, T) -> (B, T + 1): ``<bos>`` then the bytes."""
    bos = torch.full_like(byte_ids[:, :1], BOS_ID)
    return torch.cat((bos, byte_ids), dim=1)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Shannon entropy in nats of softmax(logits) over the last axis.  (...,)"""
    log_probs = F.log_softmax(logits.float(), dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


@torch.no_grad()
def byte_entropies(model: Transformer, byte_ids: Tensor) -> Tensor:
    """(B, T) bytes -> (B, T + 1) next-byte entropies; entry t uses bytes < t only."""
    return entropy_from_logits(model(with_bos(byte_ids)))  # (B, T + 1)


def windows(stream: Tensor, length: int) -> Tensor:
    """Non-overlapping windows of ``length`` bytes (the tail is dropped).  (N, length)"""
    count = stream.numel() // length
    if count == 0:
        raise DataError(
            f"byte stream of {stream.numel()} bytes is shorter than one {length}-byte window"
        )
    return stream[: count * length].view(count, length)


@torch.no_grad()
def stream_entropies(model: Transformer, stream: Tensor, window: int, batch: int = 64) -> Tensor:
    """Entropies of a stream cut into windows as a model sees them.  (N, window)"""
    rows = windows(stream, window)
    parts = [byte_entropies(model, rows[i : i + batch])[:, :-1] for i in range(0, len(rows), batch)]
    return torch.cat(parts)


@torch.no_grad()
def bits_per_byte(model: Transformer, stream: Tensor, window: int, batch: int = 64) -> float:
    """Cross-entropy of the model on a stream, in bits per byte (windows start from <bos>)."""
    rows = windows(stream, window)
    total = 0.0
    for i in range(0, len(rows), batch):
        chunk = rows[i : i + batch]
        logits = model(with_bos(chunk)[:, :-1])  # (B, T, V)
        total += float(F.cross_entropy(logits.flatten(0, 1), chunk.flatten(), reduction="sum"))
    return total / rows.numel() / math.log(2)


def unigram_bits_per_byte(train: Tensor, validation: Tensor) -> float:
    """Bits per byte of an add-one unigram byte model fitted on ``train``."""
    counts = torch.bincount(train, minlength=256).double() + 1.0
    log_probs = (counts / counts.sum()).log()
    return float(-log_probs[validation].mean()) / math.log(2)


def cache_key(settings: EntropyModelSettings, train_bytes: Tensor, seed: int) -> str:
    payload = json.dumps(
        {"settings": settings.model_dump(), "data": bytes_fingerprint(train_bytes), "seed": seed},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def train_entropy_model(
    settings: EntropyModelSettings, train_bytes: Tensor, seed: int
) -> Transformer:
    """Train the byte LM on random ``context``-byte windows of ``train_bytes``; returns it frozen."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = Transformer(settings.transformer_config())
    optimizer = AdamWOptimizer(model.parameters(), lr=settings.learning_rate, weight_decay=0.0)
    span = settings.context
    if train_bytes.numel() <= span + 1:
        raise DataError(
            f"entropy model: {train_bytes.numel()} training bytes; need more than {span + 1}"
        )
    model.train()
    for step in range(settings.steps):
        lr_scale = min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / settings.steps))
        for group in optimizer.param_groups:
            group["lr"] = settings.learning_rate * max(lr_scale, 0.05)
        starts = torch.randint(
            0, train_bytes.numel() - span, (settings.batch_size,), generator=generator
        )
        chunk = torch.stack([train_bytes[s : s + span] for s in starts.tolist()])  # (B, T)
        logits = model(with_bos(chunk)[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), chunk.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return freeze(model)


def freeze(model: Transformer) -> Transformer:
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


def load_entropy_model(path: Path | str, settings: EntropyModelSettings) -> Transformer:
    """A frozen entropy model from its safetensors file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: entropy model weights not found; run prepare_blt first")
    model = Transformer(settings.transformer_config())
    state = load_file(str(path))
    state["head.weight"] = state["embedding.weight"]  # tied (safetensors stores it once)
    model.load_state_dict(state)
    return freeze(model)


def train_or_load_entropy_model(
    settings: EntropyModelSettings,
    train_bytes: Tensor,
    validation_bytes: Tensor,
    cache_dir: Path | str,
    seed: int,
) -> EntropyModelRecord:
    """The cached model for (settings, training bytes, seed), training it on a cache miss."""
    key = cache_key(settings, train_bytes, seed)
    path = Path(cache_dir) / f"blt-entropy-{key}.safetensors"
    if path.is_file():
        model = load_entropy_model(path, settings)
    else:
        started = time.perf_counter()
        model = train_entropy_model(settings, train_bytes, seed)
        state = {k: v for k, v in model.state_dict().items() if k != "head.weight"}
        metadata = {
            "settings": settings.model_dump_json(),
            "train_seconds": f"{time.perf_counter() - started:.1f}",
            "train_bytes_sha256": bytes_fingerprint(train_bytes),
        }
        write_file_atomic(path, lambda temporary: save_file(
            {k: v.contiguous() for k, v in state.items()}, str(temporary), metadata=metadata))
    return EntropyModelRecord(
        model=model,
        path=path,
        key=key,
        validation_bpb=bits_per_byte(model, validation_bytes, settings.context),
        unigram_bpb=unigram_bits_per_byte(train_bytes, validation_bytes),
        parameters=model.num_parameters(),
    )
