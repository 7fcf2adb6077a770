"""The coordinate check of Tensor Programs V (arXiv 2203.03466, section 5 / Figure 5): train
the same model at several widths for a few steps and measure the typical size of each
layer's activations; under μP they stay about flat across widths, under the standard
parametrization they grow with width.

``coordinate_check`` builds ``llama_modern`` at each width (heads of 16 dimensions, SwiGLU
hidden 3 x width, as every rung of the size dial has them; depth 2), trains it ``steps`` AdamW
steps (no weight decay, no clipping, no schedule) on fixed random token windows, then feeds one
more window and records the mean absolute value of each block's output (the residual
stream) and of the logits. ``depth_check`` does the same at one width across depths (CompleteP's
check, arXiv 2505.01618: the last block's output, ``last``, and the logits). ``width_slope`` is
the least-squares slope of log(mean |x|) against log(width or depth): about 0 when flat, about 1
or more when the activations grow with it.

Public API: ``coordinate_check``, ``depth_check``, ``width_slope``, ``Coordinates``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from llmevo.catalog import build_model, build_optimizer
from llmevo.components.optim.base import scale_learning_rates
from llmevo.model.config import ModelConfig
from llmevo.model.parametrization import BASE_HEAD_DIM
from llmevo.registry import ComponentChoice

Coordinates = dict[int, dict[str, float]]  # width -> {"block0": mean |x|, ..., "logits": mean |x|}


def model_at(width: int, parametrization: str, layers: int = 2) -> ModelConfig:
    """``llama_modern`` at ``width``: heads of 16 dimensions, SwiGLU hidden 3 x width."""
    heads = width // BASE_HEAD_DIM
    return ModelConfig(d_model=width, n_layers=layers, n_heads=heads, parametrization=parametrization,
                       attention=ComponentChoice(name="mha", config={"kv_heads": heads}),
                       feedforward=ComponentChoice(name="swiglu", config={"hidden": 3 * width}))


def _measure(config: ModelConfig, steps: int, lr: float, seed: int, batch: int, seq_len: int) -> dict[str, float]:
    torch.manual_seed(seed)
    model = build_model(config)
    component = build_optimizer(ComponentChoice(name="adamw"))
    optimizer = component.build(model, lr=lr, weight_decay=0.0)
    scale_learning_rates(optimizer, model, component, "adamw")
    windows = torch.randint(0, config.vocab_size, (steps + 1, batch, seq_len + 1),
                            generator=torch.Generator().manual_seed(seed))  # (S+1, B, T+1)
    for window in windows[:steps]:
        logits = model(window[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    sizes: dict[str, float] = {}
    hooks = [block.register_forward_hook(
        lambda module, inputs, output, index=index: sizes.__setitem__(f"block{index}", output.abs().mean().item()))
        for index, block in enumerate(model.blocks)]
    try:
        with torch.no_grad():
            sizes["logits"] = model(windows[steps][:, :-1]).abs().mean().item()
    finally:
        for hook in hooks:
            hook.remove()
    return sizes


def coordinate_check(widths: Sequence[int], parametrization: str, steps: int = 3, lr: float = 1e-2,
                     seeds: Sequence[int] = (0, 1), batch: int = 8, seq_len: int = 32) -> Coordinates:
    """Width -> the mean |x| of each block's output and of the logits after ``steps`` steps,
    averaged over ``seeds``."""
    result: Coordinates = {}
    for width in widths:
        runs = [_measure(model_at(width, parametrization), steps, lr, seed, batch, seq_len) for seed in seeds]
        result[width] = {key: sum(run[key] for run in runs) / len(runs) for key in runs[0]}
    return result


def depth_check(depths: Sequence[int], parametrization: str, width: int = 64, steps: int = 3,
                lr: float = 1e-2, seeds: Sequence[int] = (0, 1), batch: int = 8, seq_len: int = 32) -> Coordinates:
    """Depth -> the mean |x| of the last block's output (``last``) and of the logits after
    ``steps`` steps at ``width``, averaged over ``seeds``."""
    result: Coordinates = {}
    for depth in depths:
        runs = [_measure(model_at(width, parametrization, depth), steps, lr, seed, batch, seq_len)
                for seed in seeds]
        result[depth] = {"last": sum(run[f"block{depth - 1}"] for run in runs) / len(runs),
                         "logits": sum(run["logits"] for run in runs) / len(runs)}
    return result


def width_slope(coordinates: Coordinates, key: str) -> float:
    """Least-squares slope of log(mean |x|) against log(width) (or depth) for ``key``."""
    xs = [math.log(width) for width in coordinates]
    ys = [math.log(sizes[key]) for sizes in coordinates.values()]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
