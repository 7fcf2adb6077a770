"""What each model slot must provide. Components subclass these and register by name.

Constructors are uniform per slot so the model never needs to know which component fills a
slot: ``Position(config, dims)``, ``Attention(config, dims, layer_index)``,
``FeedForward(config, dims)``, ``Norm(config, dim)``, ``Block(config, dims, parts, layer_index)``.
``layer_index`` counts the blocks of one stack from 0 (BLT's local encoder, latent transformer
and local decoder each count their own), so a depth-dependent component (a per-layer init or
schedule) needs nothing outside its module.

Three optional hooks, each inert for a model without such parts: ``AdjustsInit`` (a part that
rescales its submodules' default initialisation, DeepNorm's beta), ``AuxiliaryLoss`` (a part
that adds a term to the training objective, a mixture of experts' load-balancing loss, read by
the trainers through ``AuxiliaryLosses``) and ``RoutedExperts`` (a part that evaluates every
expert on every token though each token uses only some of them: the FLOP count,
``runner.flops``, counts the active ones).

A component config with two spellings of one network (``kv_heads`` None and ``kv_heads`` =
heads; RoPE's ``rotary_dim`` None and the head dimension) is a ``SpelledOneWay`` and says
which spelling is its ``canonical`` one at a model's sizes: the arm cache keys a run on that
(``runner.cache.canonical_model``), so equal models are one key and train once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from llmevo.registry import StrictModel


@dataclass(frozen=True)
class ModelDims:
    """The sizes a component may depend on."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    max_seq_len: int
    # the attention scores' scale; None: 1/sqrt(head_dim). Set by a parametrization whose
    # scale differs (model/parametrization.py: mup's 1/d_head away from the base head dim)
    attention_scale: float | None = None
    # each residual branch's multiplier; None: none. Set by a parametrization with a depth rule
    # (model/parametrization.py: completep's L_base / L away from the base depth)
    residual_scale: float | None = None

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class SpelledOneWay(StrictModel):
    """A component config where more than one value of a field builds the same network at a
    given size; ``canonical(dims)`` is the one spelling the arm cache keys on."""

    def canonical(self, dims: ModelDims) -> SpelledOneWay:  # pragma: no cover (each overrides)
        raise NotImplementedError


class PositionEncoding(nn.Module):
    """Where position information enters: the embeddings, q/k rotation, or a score bias.

    The defaults do nothing, so each encoding overrides only the hook it uses.
    ``positions`` are absolute token positions, broadcastable to ``(..., T)``.
    """

    rotary: bool = False

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x  # (B, T, D)

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        return x  # (B, H, T, Dh)

    def attention_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor | None:
        return None  # (H, Tq, Tk) to add to attention scores, or None


class KVCacheLayer:
    """One layer's cache of post-position keys and values for incremental decoding.

    ``keys``/``values``: (B, Hk, S, Dh); ``positions``: (S,) absolute positions of the
    cached entries. Every cached entry precedes every new token, so the causal mask of a
    step only needs the new tokens' own triangle.
    """

    def __init__(self) -> None:
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.positions: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def update(self, keys: Tensor, values: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Append new entries and return the whole cache (keys, values, positions)."""
        if self.keys is None:
            self.keys, self.values, self.positions = keys, values, positions
        else:
            assert self.values is not None and self.positions is not None
            self.keys = torch.cat([self.keys, keys], dim=2)
            self.values = torch.cat([self.values, values], dim=2)
            self.positions = torch.cat([self.positions, positions], dim=-1)
        return self.keys, self.values, self.positions


@dataclass
class AttentionContext:
    """What attention needs beyond its input: positions, the encoding, an optional cache.

    ``shared`` carries state across layers within one forward pass (e.g. the first layer's
    values for value-residual attention).
    """

    positions: Tensor  # (T,) absolute positions of the current tokens
    position: PositionEncoding
    cache: KVCacheLayer | None = None
    shared: dict[str, Any] = field(default_factory=dict)


class Attention(nn.Module):
    """Maps (B, T, D) to (B, T, D), mixing only earlier-or-equal positions.

    Built as ``Attention(config, dims, layer_index)``; a component may ignore the index.
    ``honours_attention_scale``: whether its scores use ``dims.attention_scale`` (a
    parametrization that sets one refuses an attention that does not).
    """

    supports_kv_cache: bool = True
    honours_attention_scale: bool = False


class FeedForward(nn.Module):
    """Position-wise map (B, T, D) -> (B, T, D)."""


class Block(nn.Module):
    """One transformer layer: wires attention, feed-forward and norms with residuals.

    Built as ``Block(config, dims, parts, layer_index)``; it hands ``layer_index`` to
    ``parts.make_attention``. ``honours_residual_scale``: whether it multiplies each residual
    branch by ``dims.residual_scale`` (a parametrization that sets one refuses a block that
    does not).
    """

    honours_residual_scale: bool = False


@dataclass(frozen=True)
class BlockParts:
    """Factories a block uses to build its attention, feed-forward and norms."""

    make_attention: Callable[[int], Attention]  # (layer_index) -> the layer's attention
    make_feedforward: Callable[[], FeedForward]
    make_norm: Callable[[int], nn.Module]  # (dim) -> a norm over that width


class AdjustsInit:
    """A model part that adjusts the default initialisation of its own submodules.

    The model initialises module by module in post-order (``nn.Module.apply``: children before
    their parent) and calls ``adjust_init()`` on such a part right after its children received
    the default init (``_init_weights`` in ``model/transformer.py``), so the part rescales
    weights that are already drawn (DeepNorm's beta on the value, output and feed-forward
    weights). It runs under ``torch.no_grad()``.
    """

    def adjust_init(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class AuxiliaryLoss:
    """A model part that adds a term to the training objective (a mixture of experts'
    load-balancing loss).

    While a trainer records (``AuxiliaryLosses``, which sets ``recording``), each forward
    stores its term, already weighted, as ``auxiliary_loss`` (a scalar); the trainer adds the
    sum over parts to the language-modelling loss before the backward pass. Outside a trainer
    nothing is stored, so a model never holds a graph between calls (a deep copy stays
    possible).
    """

    recording: bool = False
    auxiliary_loss: Tensor | None = None


class RoutedExperts:
    """A model part whose experts all run on every token while its paper dispatches each token
    to ``active_experts`` of them (a mixture of experts evaluated densely, for determinism and
    batching). ``runner.flops`` counts a token's *active* compute: the FLOPs the part
    computes, less those of ``len(experts) - active_experts`` experts. ``experts`` are alike
    (one shape), each taking (N, D) to (N, D)."""

    experts: nn.ModuleList
    active_experts: int


class AuxiliaryLosses:
    """The auxiliary terms of one model's parts during training.

    ``start()`` makes every ``AuxiliaryLoss`` part record, ``take()`` returns the sum of the
    terms the last forward stored and clears them (None when no part stored one: the trainers
    then add nothing, so a model without such parts trains on exactly its cross-entropy), and
    ``stop()`` ends recording. The recorded training loss stays the cross-entropy; only the
    objective that is differentiated gains the terms.
    """

    def __init__(self, model: nn.Module) -> None:
        self.parts = [module for module in model.modules() if isinstance(module, AuxiliaryLoss)]

    def start(self) -> None:
        for part in self.parts:
            part.recording = True

    def stop(self) -> None:
        for part in self.parts:
            part.recording, part.auxiliary_loss = False, None

    def take(self) -> Tensor | None:
        total: Tensor | None = None
        for part in self.parts:
            if part.auxiliary_loss is not None:
                term, part.auxiliary_loss = part.auxiliary_loss, None
                total = term if total is None else total + term
        return total
