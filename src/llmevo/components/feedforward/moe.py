"""Top-k mixture of SwiGLU experts with the Switch Transformer load-balancing loss.

Fedus, Zoph and Shazeer, "Switch Transformers: Scaling to Trillion Parameter Models with
Simple and Efficient Sparsity", arXiv 2101.03961 (section 2.1: a router ``W_r`` gives
``p(x) = softmax(W_r x)`` over ``N`` experts, and the layer's output is the gate-weighted sum
of the selected experts; section 2.2, equations 4-6: the auxiliary loss
``alpha * N * sum_i f_i * P_i``, with ``f_i`` the fraction of tokens dispatched to expert
``i`` and ``P_i`` the mean router probability of expert ``i`` over the batch, minimal (equal
to ``alpha``) under uniform routing; ``alpha = 1e-2``). Jiang et al., "Mixtral of Experts",
arXiv 2401.04088 (section 2.1: top-2 of 8 SwiGLU experts, ``y = sum_i Softmax(Top2(x W_g))_i
* SwiGLU_i(x)``).

What it computes, per token ``x`` (D,): ``p = softmax(W_r x)`` (E,); the ``top_k`` largest
entries choose the experts; their gates are ``p_i`` renormalised over the chosen ones (equal to
Mixtral's softmax over the top-k logits; with ``top_k = 1`` the gate is Switch's ``p_i``
itself, so the router still learns from the language-modelling loss); the output is
``sum_i gate_i * SwiGLU_i(x)`` with each expert a SwiGLU of width ``hidden``. While a trainer
records, each forward stores ``balance_weight * E * sum_i f_i P_i`` over its batch's B x T
tokens as its auxiliary loss (``components.base.AuxiliaryLoss``); ``train()`` and the batched
replicas add the sum over layers to the cross-entropy they differentiate (the recorded
training loss stays the cross-entropy). ``f_i`` counts each of a token's ``top_k`` assignments as ``1/top_k`` of a token, so
``sum_i f_i = 1`` and the loss is Switch's equation 4 exactly at ``top_k = 1`` and
``balance_weight`` at uniform routing for any ``top_k`` (Hugging Face's Mixtral loss sums the
slots instead: ``top_k`` times this one).

Parameters at d_model 64, the defaults (8 experts, top-2, expert hidden 96 = SwiGLU's 192 / 2):
total per layer 8 x 3 x 64 x 96 + 64 x 8 = 147,968 (SwiGLU 192: 36,864); active per token
2 x 18,432 + 512 = 37,376, about SwiGLU's. With llama_modern: 361,792 in all (139,584 with
SwiGLU), 140,608 active.

Reference tests: the routed output against a per-token loop over the chosen experts with
the SwiGLU formula written out, the balancing loss against its closed form on a hand-made
routing, top-1 gates against Switch's ``p_i``, and the loss reaching the training objective
(tests/reference/test_block_new_reference.py).

Deviations: every expert runs on every token and the outputs are combined with the (sparse)
top-k gates: the same output as dispatching each token to its experts, with no capacity
limit and no dropped tokens (Mixtral's behaviour, not Switch's capacity factor), but the
compute is that of all ``E`` experts, so no speed advantage is measured (``--match flops``
counts a token's top-k experts, the paper's compute, through ``RoutedExperts``); it keeps the layer
causal, deterministic and batchable as replicas (vmap) without data-dependent shapes. No
router z-loss, no router jitter noise, no selective precision (the router's softmax is in
float32 as Switch's is). The post-training stages (SFT, DPO, GRPO) optimise their own
objectives without the balancing term.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import NonNegativeFloat, PositiveInt, model_validator
from torch import Tensor, nn

from llmevo.components.base import AuxiliaryLoss, FeedForward, ModelDims, RoutedExperts
from llmevo.components.feedforward.swiglu import GatedConfig, SwiGLU
from llmevo.registry import Paper, Scaling, SearchDimension, StrictModel, register


class MoEConfig(StrictModel):
    experts: Annotated[PositiveInt, Scaling.KEPT] = 8
    top_k: Annotated[PositiveInt, Scaling.KEPT] = 2
    hidden: Annotated[PositiveInt, Scaling.WIDTH] = 96  # each expert's SwiGLU width: SwiGLU's 192 / top_k (active params)
    balance_weight: NonNegativeFloat = 0.01  # Switch's alpha

    @model_validator(mode="after")
    def _k_within_experts(self) -> MoEConfig:
        if self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} exceeds experts {self.experts}")
        return self


def route(logits: Tensor, top_k: int) -> tuple[Tensor, Tensor, Tensor]:
    """Router logits (N, E) -> (probabilities (N, E) in float32, gates (N, E): each token's
    top-k probabilities renormalised over its chosen experts (top-1: the probability itself)
    and zero elsewhere, the chosen experts' indices (N, k))."""
    probs = torch.softmax(logits.float(), dim=-1)
    chosen, index = probs.topk(top_k, dim=-1)  # (N, k) each
    if top_k > 1:
        chosen = chosen / chosen.sum(dim=-1, keepdim=True)
    return probs, torch.zeros_like(probs).scatter(-1, index, chosen), index


def balance_loss(probs: Tensor, index: Tensor) -> Tensor:
    """Switch's ``E * sum_i f_i * P_i`` (unweighted): ``f_i`` the share of the (N x k) routing
    assignments that went to expert ``i`` (no gradient), ``P_i`` the mean probability of ``i``."""
    experts, top_k = probs.shape[-1], index.shape[-1]
    assigned = torch.zeros_like(probs).scatter(-1, index, 1.0)  # (N, E): 1 where chosen
    fraction = assigned.mean(dim=0) / top_k  # (E,), sums to 1
    return experts * (fraction * probs.mean(dim=0)).sum()


@register(
    slot="feedforward",
    name="moe",
    config=MoEConfig,
    paper=Paper(
        arxiv_id="2101.03961",
        title="Switch Transformers: Scaling to Trillion Parameter Models with Simple and "
        "Efficient Sparsity",
        url="https://arxiv.org/abs/2101.03961",
        organization="Google Brain",
    ),
    ablation="swiglu",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "A top-2 mixture of 8 SwiGLU experts (Mixtral's layer) with Switch's load-balancing "
        "loss in every layer of a 2-layer LM, compared with one dense SwiGLU of the same active "
        "parameters (2.6x the total) at an equal token budget; the experts are all evaluated "
        "(no dispatch, so no speed-up is claimed), and Switch's capacity factor, expert "
        "parallelism and large-scale runs are not reproduced."
    ),
    search_space={
        "experts": SearchDimension(choices=(4, 8)),
        "balance_weight": SearchDimension(low=1e-3, high=1e-1, log=True),
    },
)
class MixtureOfExperts(FeedForward, AuxiliaryLoss, RoutedExperts):
    def __init__(self, config: MoEConfig, dims: ModelDims):
        super().__init__()
        self.top_k = config.top_k
        self.active_experts = config.top_k  # a token's compute (runner.flops): its top-k experts
        self.balance_weight = config.balance_weight
        self.router = nn.Linear(dims.d_model, config.experts, bias=False)
        expert = GatedConfig(hidden=config.hidden)
        self.experts = nn.ModuleList(SwiGLU(expert, dims) for _ in range(config.experts))

    def forward(self, x: Tensor) -> Tensor:
        tokens = x.reshape(-1, x.shape[-1])  # (N, D), N = B * T
        probs, gates, index = route(self.router(tokens), self.top_k)  # (N, E), (N, E), (N, k)
        if self.recording:  # a trainer adds it to the objective (AuxiliaryLosses)
            self.auxiliary_loss = self.balance_weight * balance_loss(probs, index)
        outputs = torch.stack([expert(tokens) for expert in self.experts], dim=1)  # (N, E, D)
        mixed = (gates.to(outputs.dtype).unsqueeze(-1) * outputs).sum(dim=1)  # (N, D)
        return mixed.reshape(x.shape)  # (B, T, D)
