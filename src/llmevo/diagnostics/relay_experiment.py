"""L2 experiment of RoPE relay: streaming WikiText-2 validation with a bounded KV cache.

A trained ``llama_modern`` checkpoint (context 64, RoPE) reads a stretch of the raw
WikiText-2 validation split one token at a time. Arms:

- ``full_cache``: every past token stays in the cache at its absolute position, so
  positions and query-key distances grow past the 64 the model was trained on;
- ``relay`` at retention ratio r: the cache holds at most ``capacity`` entries; when full,
  each layer/head keeps ``budget = min(round(r * capacity), capacity - 1)`` entries (chosen
  by the selection rule), re-rotated to positions 0..budget-1, and the stream continues
  at ``budget``;
- ``original_positions`` at ratio r: the same compaction, but kept keys and new tokens keep
  their absolute positions (no re-phasing).

With a contiguous (recency) selection the two compacted arms are mathematically identical,
since RoPE scores depend on distances only; they differ when the kept entries have gaps
(``attention_mass``), where relay closes the gaps and the ablation keeps the true, growing
distances. A seed chooses where in the validation split the stretch starts.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, PositiveInt

from llmevo.components.kvcache.rope_relay import RopeRelayConfig
from llmevo.data.pins import read_text, verified_path
from llmevo.digests import sha256_file
from llmevo.errors import ConfigError
from llmevo.inference.checkpoint import load_checkpoint
from llmevo.inference.streaming import stream_nll
from llmevo.registry import StrictModel

VALIDATION_FILE = "wikitext-2-raw/wiki.valid.raw"


class RelayExperimentConfig(StrictModel):
    eval_tokens: PositiveInt = 1024
    capacity: PositiveInt = 64
    ratios: list[float] = Field(default_factory=lambda: [1.0, 0.75, 0.5, 0.25])
    selection: str = "attention_mass"


def _budget(ratio: float, capacity: int) -> int:
    return max(1, min(round(ratio * capacity), capacity - 1))


def _stretch(tokens: torch.Tensor, length: int, seed: int) -> torch.Tensor:
    """``length`` consecutive tokens starting at a seeded offset."""
    if tokens.numel() < length:
        raise ConfigError(f"validation split has {tokens.numel()} tokens; need {length}")
    generator = torch.Generator().manual_seed(seed)
    start = int(torch.randint(0, tokens.numel() - length + 1, (1,), generator=generator))
    return tokens[start : start + length]


def run_relay_experiment(
    checkpoint: Path,
    data_dir: Path,
    seeds: list[int],
    config: RelayExperimentConfig,
    device: torch.device = torch.device("cpu"),
) -> dict[str, Any]:
    """Run every arm for every seed on ``device``; returns the artifact's ``full_experiment``
    block."""
    from tokenizers import Tokenizer

    loaded = load_checkpoint(checkpoint)
    if loaded.tokenizer_json is None:
        raise ConfigError(f"checkpoint {checkpoint} has no tokenizer; the experiment needs one")
    model = loaded.model.to(device)
    tokenizer = Tokenizer.from_str(loaded.tokenizer_json)
    path = verified_path(data_dir, VALIDATION_FILE)
    # The first eval stretch plus room for seeded offsets: ~8 x eval_tokens x 5 bytes.
    text = read_text(path)[: config.eval_tokens * 40]
    tokens = torch.tensor(tokenizer.encode(text).ids, dtype=torch.long)

    arms: list[tuple[str, float | None, RopeRelayConfig | None]] = [("full_cache", None, None)]
    for ratio in config.ratios:
        for arm, rephase in (("relay", True), ("original_positions", False)):
            policy = RopeRelayConfig(
                capacity=config.capacity,
                budget=_budget(ratio, config.capacity),
                selection=config.selection,
                rephase=rephase,
            )
            arms.append((arm, ratio, policy))

    started = time.time()
    per_seed: dict[str, dict[str, float]] = {}
    for seed in seeds:
        stretch = _stretch(tokens, config.eval_tokens, seed).to(device)
        per_seed[str(seed)] = {
            _label(arm, ratio): stream_nll(model, stretch, policy) for arm, ratio, policy in arms
        }
    table = []
    for arm, ratio, policy in arms:
        label = _label(arm, ratio)
        losses = [per_seed[str(seed)][label] for seed in seeds]
        table.append(
            {
                "arm": arm,
                "retention_ratio": 1.0 if ratio is None else ratio,
                "budget": "all" if policy is None else policy.budget,
                "lm_loss": sum(losses) / len(losses),
            }
        )
    return {
        "status": (
            f"ran L2 streaming evaluation: checkpoint {checkpoint} "
            f"({loaded.metadata.get('train', {}).get('steps', '?')} training steps), "
            f"{config.eval_tokens} tokens of {VALIDATION_FILE} per seed (seeded start), one "
            f"token at a time, cache capacity {config.capacity}, selection "
            f"'{config.selection}'"
        ),
        "review_done": False,
        "dataset": VALIDATION_FILE,
        "dataset_sha256": sha256_file(path),
        "configuration": config.model_dump(mode="json"),
        "table": table,
        "per_seed": per_seed,
        "wall_seconds": round(time.time() - started, 1),
    }


def _label(arm: str, ratio: float | None) -> str:
    return arm if ratio is None else f"{arm}@{ratio:g}"
