"""Whole-model architectures as registry entries (slot ``architecture``), with manifests.

``llama_modern`` is the baseline every architecture is compared against. ``blt-bytes`` is
the byte-level Byte Latent Transformer (entropy patching over UTF-8 bytes), compared in
bits per byte; ``blt`` is the token-level stand-in of the reference artifact, kept only as
a cheap proxy and labelled so in its scope.
"""

from __future__ import annotations

from llmevo.model.blt import BLTStandin, ByteLatentTransformer
from llmevo.model.transformer import Transformer
from llmevo.registry import EmptyConfig, Paper, register

BLT_PAPER = Paper(
    arxiv_id="2412.09871",
    title="Byte Latent Transformer: Patches Scale Better Than Tokens",
    url="https://arxiv.org/abs/2412.09871",
    organization="Meta FAIR",
)

register(
    slot="architecture",
    name="llama_modern",
    config=EmptyConfig,
    implementation_status="full",
    promotion_eligible=True,
    evolve_integrated=True,
    scope="The baseline decoder: d_model 64, 2 layers, 4 heads, SwiGLU 192, RMSNorm, RoPE, tied embeddings.",
)(Transformer)

register(
    slot="architecture",
    name="blt-bytes",
    config=EmptyConfig,
    manifest_ref="reproduction:blt-bytes",
    paper=BLT_PAPER,
    ablation="llama_modern",
    implementation_status="full",
    evaluation_tier="l2_public_dataset",
    supports_kv_cache=False,
    supports_replicas=False,
    scope=(
        "Byte-level BLT at small scale: a frozen 35k-parameter causal byte LM gives next-byte "
        "entropies; patches start where entropy crosses a global threshold calibrated to the BPE "
        "tokenizer's bytes per token; local encoder (byte + hash n-gram embeddings, cross-attention "
        "pooling), latent transformer from llama_modern's registered blocks, local decoder. "
        "Compared with BPE llama_modern in bits per byte at an equal budget of training bytes. Not "
        "reproduced: the 8B scale, FLOP-matched scaling laws, 500k hash buckets, per-layer pooling."
    ),
)(ByteLatentTransformer)

register(
    slot="architecture",
    name="blt",
    config=EmptyConfig,
    manifest_ref="reproduction:blt",
    paper=BLT_PAPER,
    ablation="llama_modern",
    implementation_status="component_only",
    evaluation_tier="l2_public_dataset",
    supports_kv_cache=False,
    supports_replicas=False,
    scope=(
        "PROXY, not BLT: the reference artifact's token-level stand-in. A bigram surprisal over "
        "BPE tokens decides patch boundaries, low-surprisal neighbours share a latent patch, and "
        "states are expanded back to token targets. No bytes, no entropy model, no bits-per-byte "
        "claim about BLT; see blt-bytes for the real mechanism."
    ),
)(BLTStandin)
