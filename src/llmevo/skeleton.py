"""A model built for its shapes only: its parameter count, its state dict's shapes, whether
its components accept their config.

``build_skeleton(config)`` builds the model on the CPU while what it creates stays small, and
on PyTorch's ``meta`` device (shapes, no storage) otherwise. The CPU build exists for speed,
not for its values: the first operation on the meta device with a Python meta kernel (an
``nn.Embedding``'s ``normal_``, ``x + 1``, a cosine) imports ``torch._dynamo``, 1.3 s on a
2-core machine, more than a warm smoke reproduction spends on everything else (LOG,
2026-12-04). Both builds run the same constructors, so the shapes and counts are the same.

What bounds the CPU build:

- a coarse count of the elements the config's standard sizes imply (embedding and head,
  per-layer projections, position tables and ``max_seq_len``-squared masks per head); above
  ``CPU_BUILD_BYTES`` the model is built on the meta device without trying the CPU;
- while it builds, a ``TorchFunctionMode`` refuses, before the call, any call with a size
  argument (``torch.empty((out, in))``, ``torch.ones(T, T)``) of more elements than the
  budget has left, and counts the bytes of every new storage after each call; past the budget
  the build stops and restarts on the meta device. Stopping is always safe (the meta build
  gives the same shapes); only a single call that makes a tensor far larger than its
  arguments from a size outside the coarse count could allocate past the budget.

The CPU build draws its initial values from a forked RNG, so building a skeleton never moves
the global generator a later training run seeds from.

Public API: ``build_skeleton``, ``parameter_count``, ``CPU_BUILD_BYTES``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from llmevo.catalog import build_model
from llmevo.model.config import ModelConfig

CPU_BUILD_BYTES = 256 * 2**20  # what a skeleton may allocate on the CPU before it goes to meta
BYTES_PER_ELEMENT = 4  # the coarse count's fp32 (int64 position tables count twice)


class _OverBudget(BaseException):  # BaseException: a component's ``except Exception`` keeps out of it
    pass


def _hidden(config: ModelConfig) -> int:
    hidden = config.feedforward.config.get("hidden")
    return int(hidden) if isinstance(hidden, int | float) else 4 * config.d_model


def coarse_elements(config: ModelConfig) -> int:
    """An over-count of the elements the config's standard sizes imply: embedding and head,
    four attention and three feed-forward projections per layer, position tables and one
    ``max_seq_len`` x ``max_seq_len`` mask per head."""
    width, context = config.d_model, config.max_seq_len
    layers = config.n_layers * (4 * width * width + 3 * width * _hidden(config))
    positions = 2 * context * (width + 1) + context * context * (config.n_heads + 1)
    return 2 * config.vocab_size * width + layers + positions


def _sizes(args: tuple, kwargs: dict) -> Iterator[int]:
    """The element counts of the size arguments of a call: each tuple, list or ``torch.Size``
    of ints, and leading ints (``torch.ones(T, T)``)."""
    values = list(args) + list(kwargs.values())
    for value in values:
        if isinstance(value, tuple | list | torch.Size) and value and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            yield math.prod(max(v, 0) for v in value)
    leading = []
    for value in args:
        if not isinstance(value, int) or isinstance(value, bool):
            break
        leading.append(max(value, 0))
    if leading:
        yield math.prod(leading)


def _tensors(value: object) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _tensors(item)


class _StorageBudget(TorchFunctionMode):
    """Stops a build (``_OverBudget``) whose calls ask for, or have made, more than ``budget``
    bytes of storage."""

    def __init__(self, budget: int):
        super().__init__()
        self.left = budget
        self.seen: set[tuple[int, int]] = set()

    def __torch_function__(self, func: Callable[..., object], types: object, args: tuple = (),
                           kwargs: dict | None = None) -> object:
        kwargs = kwargs or {}
        if any(size * BYTES_PER_ELEMENT > self.left for size in _sizes(args, kwargs)):
            raise _OverBudget
        result = func(*args, **kwargs)
        for tensor in _tensors(result):
            if tensor.device.type != "cpu":
                continue
            storage = tensor.untyped_storage()
            key = (storage.data_ptr(), storage.nbytes())
            if key not in self.seen:
                self.seen.add(key)
                self.left -= storage.nbytes()
        if self.left < 0:
            raise _OverBudget
        return result


def _meta_build(config: ModelConfig) -> nn.Module:
    with torch.device("meta"), warnings.catch_warnings():
        # an architecture that loads weights at construction (BLT's entropy model) loads
        # nothing onto the meta device, and says so; the shapes are what matter here
        warnings.filterwarnings("ignore", message=".*meta parameter.*", category=UserWarning)
        return build_model(config)


def build_skeleton(config: ModelConfig, budget: int | None = None) -> nn.Module:
    """``config``'s model for its shapes and counts (its values are not to be trained): on the
    CPU within ``budget`` bytes (default ``CPU_BUILD_BYTES``), else on the meta device. A
    config a component refuses is refused here as ``build_model`` refuses it."""
    budget = CPU_BUILD_BYTES if budget is None else budget
    if coarse_elements(config) * BYTES_PER_ELEMENT > budget:
        return _meta_build(config)
    try:
        with torch.random.fork_rng(devices=[]), _StorageBudget(budget):
            return build_model(config)
    except _OverBudget:
        return _meta_build(config)
    except RuntimeError as error:
        if "allocate" not in str(error):  # the allocator's "can't allocate memory": meta instead
            raise
        return _meta_build(config)


def parameter_count(config: ModelConfig) -> int:
    """The parameters ``config``'s model has (built as a skeleton: no training-sized memory)."""
    return sum(p.numel() for p in build_skeleton(config).parameters())
