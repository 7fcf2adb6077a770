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
(the reference test measures it); the paper's cap of 50 is more than a thousand standard
deviations away and the map is the identity to within ``x^3 / (3 cap^2)`` (< 1e-4 for
|x| < 1) until training grows the logits: at 50 it only bounds runaway logits, it does not
reshape typical ones. ``cap`` is a config field for a cap that binds (e.g. 5).

Deviations: only the attention logits are capped; the paper's final-logit cap (30) belongs to
the output head, which is not this slot. The cap is applied after the position bias is added
(Gemma 2 uses RoPE, which adds none).
"""

from __future__ import annotations

import torch
from pydantic import PositiveFloat, PositiveInt
from torch import Tensor

from llmevo.components.attention.mha import CausalSelfAttention, causal_mask, expand_kv
from llmevo.components.base import AttentionContext, ModelDims
from llmevo.registry import Paper, SearchDimension, StrictModel, register


class SoftcapConfig(StrictModel):
    kv_heads: PositiveInt | None = None
    cap: PositiveFloat = 50.0


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
        "Gemma 2's attention-logit soft-capping (cap 50) in a 2-layer LM, compared with plain "
        "attention; the final-logit cap and Gemma 2's other changes are not included."
    ),
    search_space={"cap": SearchDimension(low=5.0, high=50.0, log=True)},
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
