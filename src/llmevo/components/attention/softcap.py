"""Attention-logit soft-capping: ``logits -> cap * tanh(logits / cap)`` before the softmax.

Gemma Team, "Gemma 2: Improving Open Language Models at a Practical Size", arXiv 2408.00118
(section 2, "Logit soft-capping": attention logits capped at 50.0, final logits at 30.0). The
scores ``q k^T / sqrt(Dh)`` (plus any position bias, e.g. ALiBi's) are squashed smoothly into
(-cap, cap), then masked causally and normalised by the softmax as usual. Reference test: the
computation written head by head with ``math.tanh``-style explicit ops, and ``cap``'s limits
(a huge cap is plain attention; a tiny cap flattens the attention towards uniform)
(tests/reference/test_attention_variants_reference.py).

Scale at our size: llama_modern initialises its projections with std 0.02, so with head
dimension 16 and unit-RMS inputs its logits start with a standard deviation of about 0.03
(the reference test measures it), where any cap above 1 is the identity to within
``x^3 / (3 cap^2)``. Training grows them: llama_modern trained at the quick preset (seed 42,
lr 3e-3, 330 steps) has attention logits with a standard deviation of 2.1-2.3, a 99th
percentile |x| of 7-8, a 99.9th of 10-14 and a maximum of 15-22 (scripts/softcap_logit_range.py,
docs/LOG.md 2026-12-04). The paper's cap of 50 changes the top 1% of those by 1-1.6% and the
attention weights by a total variation of 0.1-0.2%: it bounds logits this model never
grows. The default here is **10**, near the 99.9th percentile: it changes the top 1% of the
trained logits by 18-27% and the weights by 3-7% (TV) while typical logits (|x| ~ 2, changed
by x^3 / 300 ~ 3%) keep their values, which is what the paper's cap does to Gemma 2's much
larger logits. The declared search space spans 3 (about the 99th percentile, strongly
binding) to 30 (barely binding).

Deviations: the default cap is 10, not 50 (above); only the attention logits are capped; the paper's final-logit cap (30) belongs to
the output head, which is not this slot. The cap is applied after the position bias is added
(Gemma 2 uses RoPE, which adds none).
"""

from __future__ import annotations

import torch
from pydantic import PositiveFloat
from torch import Tensor

from llmevo.components.attention.mha import (
    CausalSelfAttention,
    KVHeadsConfig,
    causal_mask,
    expand_kv,
)
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.registry import Paper, SearchDimension, register


class SoftcapConfig(KVHeadsConfig):
    cap: PositiveFloat = 10.0  # binds at this scale (module docstring); Gemma 2's is 50


def soft_cap(logits: Tensor, cap: float) -> Tensor:
    """``cap * tanh(logits / cap)``: smooth, odd, monotone, slope 1 at 0, bounded by ``cap``."""
    return cap * torch.tanh(logits / cap)


@register(
    slot="attention",
    name="softcap",
    config=SoftcapConfig,
    paper=Paper(
        arxiv_id="2408.00118",
        title="Gemma 2: Improving Open Language Models at a Practical Size",
        url="https://arxiv.org/abs/2408.00118",
        organization="Google DeepMind",
    ),
    ablation="mha",
    implementation_status="integrated",
    baseline=False,
    evolve_integrated=True,
    scope=(
        "Gemma 2's attention-logit soft-capping in a 2-layer LM at cap 10 (the paper's 50 does not "
        "bind at this scale), compared with plain attention; the final-logit cap and Gemma 2's "
        "other changes are not included."
    ),
    search_space={"cap": SearchDimension(low=3.0, high=30.0, log=True)},
)
class SoftcapAttention(CausalSelfAttention):
    def __init__(self, config: SoftcapConfig, dims: ModelDims, layer_index: int):
        super().__init__(dims, config.kv_heads)
        self.cap = config.cap

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, context: AttentionContext, k_positions: Tensor
    ) -> Tensor:
        """softmax(causal(cap tanh((q k^T / sqrt(Dh) + bias) / cap))) v  ->  (B, H, Tq, Dh)."""
        capped = soft_cap(self.logits(q, k, context, k_positions), self.cap)  # (B, H, Tq, Tk)
        allowed = causal_mask(q.shape[2], k.shape[2], q.device)  # (Tq, Tk)
        weights = capped.masked_fill(~allowed, -torch.inf).softmax(-1)
        return weights @ expand_kv(v, self.n_heads)  # (B, H, Tq, Dh)
