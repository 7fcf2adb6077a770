"""How a model's initialisation, output scale, attention scale and per-parameter learning
rates follow its width: ``standard`` (today's) or ``mup``.

``mup`` is the Maximal Update Parametrization of Yang et al., "Tensor Programs V: Tuning
Large Neural Networks via Zero-Shot Hyperparameter Transfer", arXiv 2203.03466, in the form
of its **Table 8** ("alternative (equivalent) μP formulation for easier implementation", the
one the ``mup`` package implements with ``MuSharedReadout``; it allows tied embeddings, which
``llama_modern`` has), for Adam-family optimizers, anchored at a *base width* so that μP at
the base width is the standard model bit for bit. With ``m = d_model / BASE_WIDTH`` (the
width multiplier; every hidden size the size dial sets follows the width, so every hidden
matrix's ``fan_in`` and ``fan_out`` grow by ``m``):

=================  =====================  =====================  ==========================
Table 8            input weights, biases,  output weights          hidden weights
                   gains (vector-like)     (the logits' readout)   (every ``nn.Linear`` weight
                                                                   in the blocks)
=================  =====================  =====================  ==========================
init. variance     1/fan_in: constant in   1 (constant in width)   1/fan_in
                   width (fan_in is the                            -> std 0.02 / sqrt(m)
                   vocabulary or 1)
                   -> std 0.02 as today    -> std 0.02 as today
multiplier         1                       1/fan_in -> logits x    1
                                           1/m
Adam lr            1 -> lr                 1 -> lr                 1/fan_in -> lr / m
=================  =====================  =====================  ==========================

The anchor: today's init draws every ``nn.Linear`` and ``nn.Embedding`` weight from
N(0, 0.02²); the table's proportionalities are taken relative to it, so at ``m = 1`` nothing
changes (multiplying by 1.0 and dividing by 1.0 are exact). Attention scores use
``1/d_head`` instead of ``1/sqrt(d_head)`` (TP5 section 4 / appendix: "attention logit
scaled by 1/d"), anchored at the base head dimension: ``sqrt(BASE_HEAD_DIM) / d_head``, which is
today's 1/4 whenever the head dimension is 16 (every rung of the size dial keeps it; a
head dimension of its own needs an attention component that reads ``ModelDims.attention_scale``).

Weight decay: a hidden matrix's decoupled decay per step, ``lr x weight_decay``, is kept as it
is at the base width (its group's ``weight_decay`` is multiplied by ``m`` as its lr is divided
by it), which is the ``mup`` package's ``MuAdam`` default (``decoupled_wd=False``). The
embedding is tied to the readout, so its gradients carry the 1/m output multiplier; Table 8
keeps its init and lr constant all the same, as here.

What cannot honour it is refused before training (``runner.size.check_parametrization``):
an optimizer whose update is not Adam-like per parameter group (``OptimizerComponent.per_group_lr``:
Muon, NorMuon and SOAP precondition matrices and would need their own μP rules; Adam-mini
shares a second moment per block; schedule-free AdamW weights its average by the lr), a
model part whose ``nn.Linear`` in the blocks has a dimension that does not follow the width
(a mixture of experts' router: an output-like weight Table 8 would give a multiplier, not
a hidden weight's lr), a matrix of a block that is not an ``nn.Linear``, an attention that
computes its own score scale at a head dimension other than the base's, and whole
architectures other than the transformer.

``completep`` is ``mup`` plus CompleteP's depth rule (Dey et al., "Don't be lazy: CompleteP
enables compute-efficient deep transformers", arXiv 2505.01618, Table 1 at alpha = 1, checked
against its reference implementation EleutherAI/nanoGPT-mup, branch completep): with
``m_L = n_layers / BASE_DEPTH`` every residual branch is multiplied by ``m_L^-alpha = BASE_DEPTH
/ n_layers`` (``x + (L_base/L) f(norm(x))``, read by blocks that declare
``honours_residual_scale``: the pre-norm block, the paper's pre-LN layout); the lr correction
``m_L^(alpha-1)`` of the hidden weights, norm gains and biases is 1 at alpha = 1, and the init
has no depth term, so nothing else changes with depth. At ``BASE_DEPTH`` layers it is ``mup``
exactly.

Deviations: the base width is quick's 64 (``BASE_WIDTH``) and the base depth quick's 2
(``BASE_DEPTH``) whatever model is trained; the papers' tunable constant multipliers (their
"base multipliers") are today's values; Adam's epsilon is not scaled (the references divide it
by ``m``, and CompleteP the hidden layers' by ``m x m_L`` too: at eps 1e-8 against this model's
gradient scales it does not bind). The weight decay rule is ``MuAdam``'s (above); the
nanoGPT-mup reference keeps ``weight_decay`` under μP (so ``lr x wd`` shrinks by ``1/m``) and
multiplies it by ``m`` under CompleteP, as here.

Public API: ``Parametrization``, ``PARAMETRIZATIONS``, ``BASE_WIDTH``, ``BASE_HEAD_DIM``,
``BASE_DEPTH``, ``INIT_STD``, ``width_multiplier``, ``attention_scale``, ``residual_scale``,
``output_multiplier``, ``hidden_matrix_names``, ``apply_init``, ``lr_multipliers``.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

Parametrization = Literal["standard", "mup", "completep"]
PARAMETRIZATIONS: tuple[str, ...] = ("standard", "mup", "completep")
WIDTH_RULES = ("mup", "completep")  # the parametrizations with μP's width rule
BASE_WIDTH = 64  # quick's d_model: at this width mup is the standard model exactly
BASE_HEAD_DIM = 16  # quick's head dimension (64 / 4 heads); every rung keeps it
BASE_DEPTH = 2  # quick's depth: at this depth completep is mup exactly
INIT_STD = 0.02  # today's N(0, 0.02^2) for every nn.Linear and nn.Embedding weight


def width_multiplier(parametrization: str, d_model: int) -> float:
    """``m = d_model / BASE_WIDTH`` under ``mup`` and ``completep``; 1.0 under ``standard``."""
    return d_model / BASE_WIDTH if parametrization in WIDTH_RULES else 1.0


def attention_scale(parametrization: str, head_dim: int) -> float | None:
    """The attention scores' scale: None (today's ``1/sqrt(head_dim)``) under ``standard`` or
    at the base head dimension; ``sqrt(BASE_HEAD_DIM) / head_dim`` (1/d, anchored at the base)
    under ``mup`` and ``completep`` otherwise."""
    if parametrization not in WIDTH_RULES or head_dim == BASE_HEAD_DIM:
        return None
    return math.sqrt(BASE_HEAD_DIM) / head_dim


def residual_scale(parametrization: str, n_layers: int) -> float | None:
    """Each residual branch's multiplier: ``BASE_DEPTH / n_layers`` (CompleteP, alpha = 1) under
    ``completep`` away from the base depth; None (no multiplier) otherwise."""
    if parametrization != "completep" or n_layers == BASE_DEPTH:
        return None
    return BASE_DEPTH / n_layers


def output_multiplier(parametrization: str, d_model: int) -> float:
    """What the logits are multiplied by: ``1/m`` under μP's width rule (Table 8's output multiplier
    ``1/fan_in``, anchored at the base width), 1.0 under ``standard``."""
    return 1.0 / width_multiplier(parametrization, d_model)


def hidden_matrix_names(model: nn.Module, blocks: str = "blocks") -> list[str]:
    """Names of the hidden weights: every ``nn.Linear`` weight inside ``model.<blocks>``."""
    stack = model.get_submodule(blocks)
    return [f"{blocks}.{name}.weight" for name, module in stack.named_modules()
            if isinstance(module, nn.Linear)]


@torch.no_grad()
def apply_init(model: nn.Module, parametrization: str, d_model: int) -> None:
    """Rescale the hidden weights, already drawn at std ``INIT_STD``, to ``INIT_STD / sqrt(m)``
    (init variance proportional to 1/fan_in); nothing else changes. A no-op at ``m = 1``."""
    multiplier = width_multiplier(parametrization, d_model)
    if multiplier == 1.0:
        return
    named = dict(model.named_parameters())
    for name in hidden_matrix_names(model):
        named[name].mul_(1.0 / math.sqrt(multiplier))


def lr_multipliers(model: nn.Module, parametrization: str, d_model: int) -> dict[str, float]:
    """Parameter name -> its learning-rate multiplier where it is not 1: ``1/m`` for every
    hidden weight under ``mup`` and ``completep`` (Table 8's Adam lr ``1/fan_in``; CompleteP's
    depth correction is 1 at alpha = 1); empty under ``standard`` or at ``m = 1``."""
    multiplier = width_multiplier(parametrization, d_model)
    if multiplier == 1.0:
        return {}
    return {name: 1.0 / multiplier for name in hidden_matrix_names(model)}
