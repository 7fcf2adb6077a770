"""Export a checkpoint as a Hugging Face ``LlamaForCausalLM`` directory.

The directory holds ``config.json`` (``model_type: llama``), ``model.safetensors`` (float32,
``transformers`` parameter names), ``generation_config.json`` and the BPE tokenizer as a
fast tokenizer (``tokenizer.json`` + ``tokenizer_config.json``), so that
``AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)``
load it without llmevo. Writing it needs neither ``transformers`` nor a network.

Only genomes that ``LlamaForCausalLM`` computes exactly are exported: RoPE over the whole
head, multi-head / grouped / multi-query attention without extras, SwiGLU, RMSNorm,
pre-norm blocks, the plain transformer architecture. Everything else is refused by name
with the reason, before anything is written.

RoPE layout: llmevo rotates interleaved channel pairs ``(2i, 2i+1)`` of each head (the
RoFormer layout); ``transformers``' Llama rotates the halves ``(i, i + Dh/2)``
(``rotate_half``) with the same frequencies. Reordering each head's query and key
projection rows as ``[0, 2, 4, ..., Dh-2, 1, 3, ..., Dh-1]`` maps one onto the other; the
scores ``q . k`` are unchanged because queries and keys are permuted alike.
Reference test: ``tests/integration/test_export_hf.py`` (logits, greedy generation and
tokenizer ids against ``transformers``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from llmevo.artifacts.io import staged_folder, write_file_atomic, write_text_atomic
from llmevo.data.tokenizer import SPECIAL_TOKENS
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.model.parametrization import BASE_WIDTH, attention_scale, residual_scale

# Why each component has no LlamaForCausalLM equivalent (slot -> name -> reason).
_REASONS: dict[str, dict[str, str]] = {
    "position": {
        "alibi": "ALiBi adds a linear distance bias to attention scores; Llama has only rotary positions",
        "learned": "learned absolute position embeddings; Llama has only rotary positions",
        "sinusoidal": "sinusoidal absolute position embeddings; Llama has only rotary positions",
        "nope": "no position encoding; Llama always applies rotary positions",
    },
    "attention": {
        "qk_norm": "normalises queries and keys before the scores; Llama attention has no qk-norm",
        "value_residual": "mixes the first layer's values into every layer; Llama has no value residual",
    },
    "feedforward": {
        "relu2": "squared-ReLU MLP; Llama's MLP is gated SiLU (SwiGLU)",
        "gelu": "ungated GELU MLP; Llama's MLP is gated SiLU (SwiGLU)",
        "geglu": "GELU-gated MLP; Llama's MLP is gated SiLU (SwiGLU)",
    },
    "norm": {
        "layernorm": "LayerNorm subtracts the mean and has a bias; Llama uses RMSNorm",
    },
    "block": {
        "post_norm": "post-norm normalises the residual stream after each sub-layer; Llama is pre-norm",
        "sandwich": "sandwich norm adds a norm after each sub-layer; Llama is pre-norm only",
    },
}
_SUPPORTED = {
    "position": "rope",
    "attention": "mha",
    "feedforward": "swiglu",
    "norm": "rmsnorm",
    "block": "pre_norm",
}


def hf_refusals(config: ModelConfig) -> list[str]:
    """Why ``LlamaForCausalLM`` cannot represent this genome (empty: it can)."""
    if config.architecture != "transformer":
        return [f"architecture '{config.architecture}' is not a decoder-only token transformer"]
    reasons = []
    for slot, supported in _SUPPORTED.items():
        name = getattr(config, slot).name
        if name != supported:
            why = _REASONS.get(slot, {}).get(name, f"LlamaForCausalLM has no {slot} '{name}'")
            reasons.append(f"{slot} '{name}' ({why})")
    head_dim = config.d_model // config.n_heads
    if config.position.name == "rope":
        rotary_dim = config.position.config.get("rotary_dim")
        if rotary_dim is not None and rotary_dim != head_dim:
            reasons.append(
                f"position 'rope' with partial rotary (rotary_dim {rotary_dim} < head dim "
                f"{head_dim}; Llama rotates the whole head)"
            )
    if config.d_model % config.n_heads:
        reasons.append(f"d_model {config.d_model} is not a multiple of heads {config.n_heads}")
    if config.parametrization != "standard" and (
            config.d_model != BASE_WIDTH or attention_scale(config.parametrization, head_dim) is not None
            or residual_scale(config.parametrization, config.n_layers) is not None):
        reasons.append(f"parametrization '{config.parametrization}' at d_model {config.d_model}, "
                       f"{config.n_layers} layers (its logit, attention and residual multipliers are "
                       "not Llama's)")
    return reasons


def interleaved_to_half_permutation(head_dim: int) -> Tensor:
    """Row order ``[0, 2, ..., Dh-2, 1, 3, ..., Dh-1]``: llmevo's pair layout -> Llama's halves."""
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))


def permute_rotary_rows(weight: Tensor, n_heads: int, head_dim: int) -> Tensor:
    """Reorder each head's output rows of a q/k projection (H*Dh, D) for half-split RoPE."""
    order = interleaved_to_half_permutation(head_dim)
    return weight.view(n_heads, head_dim, -1)[:, order].reshape(n_heads * head_dim, -1)


def llama_state_dict(model: torch.nn.Module, config: ModelConfig) -> dict[str, Tensor]:
    """The model's weights under ``LlamaForCausalLM`` names (float32, contiguous)."""
    head_dim = config.d_model // config.n_heads
    kv_heads = config.attention.config.get("kv_heads") or config.n_heads
    weights: dict[str, Tensor] = {"model.embed_tokens.weight": model.embedding.weight}
    for index, block in enumerate(model.blocks):
        prefix = f"model.layers.{index}."
        attention, mlp = block.attention, block.feed_forward
        weights |= {
            prefix + "input_layernorm.weight": block.attention_norm.weight,
            prefix + "self_attn.q_proj.weight": permute_rotary_rows(
                attention.query.weight, config.n_heads, head_dim
            ),
            prefix + "self_attn.k_proj.weight": permute_rotary_rows(
                attention.key.weight, kv_heads, head_dim
            ),
            prefix + "self_attn.v_proj.weight": attention.value.weight,
            prefix + "self_attn.o_proj.weight": attention.output.weight,
            prefix + "post_attention_layernorm.weight": block.feed_forward_norm.weight,
            prefix + "mlp.gate_proj.weight": mlp.gate.weight,
            prefix + "mlp.up_proj.weight": mlp.up.weight,
            prefix + "mlp.down_proj.weight": mlp.down.weight,
        }
    weights["model.norm.weight"] = model.final_norm.weight
    if not config.tie_embeddings:
        weights["lm_head.weight"] = model.head.weight
    return {name: t.detach().to(torch.float32).contiguous().clone() for name, t in weights.items()}


def llama_config(config: ModelConfig, special_ids: dict[str, int | None]) -> dict[str, Any]:
    """``config.json`` for ``LlamaForCausalLM`` (both the v4 and v5 RoPE keys are written)."""
    theta = float(config.position.config.get("theta", 10_000.0))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "intermediate_size": int(config.feedforward.config.get("hidden", 192)),
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.attention.config.get("kv_heads") or config.n_heads,
        "head_dim": config.d_model // config.n_heads,
        "hidden_act": "silu",
        "max_position_embeddings": config.max_seq_len,
        "rms_norm_eps": float(config.norm.config.get("eps", 1e-6)),
        "rope_theta": theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": config.tie_embeddings,
        "use_cache": True,
        "torch_dtype": "float32",
        "bos_token_id": special_ids.get("<bos>"),
        "eos_token_id": special_ids.get("<eos>"),
        "pad_token_id": special_ids.get("<pad>"),
    }


def tokenizer_config(max_seq_len: int) -> dict[str, Any]:
    """``tokenizer_config.json``: the tokenizer.json as a ``PreTrainedTokenizerFast``.

    No BOS/EOS is added on encode and no spaces are cleaned on decode, so ids and text match
    what llmevo's ``tokenizers.Tokenizer`` gives.
    """
    pad, unk, bos, eos = SPECIAL_TOKENS
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": unk,
        "pad_token": pad,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_seq_len,
    }


def export_hf(checkpoint: Path | str, out: Path | str) -> Path:
    """Write ``checkpoint`` as a ``transformers`` Llama directory at ``out``; returns ``out``.

    ``out`` must not exist or be empty. The directory is built beside it and renamed into
    place (``artifacts.io.staged_folder``), so a failure leaves nothing half-written; a failed
    write is a ``WriteError`` naming the file and the cause.
    """
    from safetensors.torch import save_file
    from tokenizers import Tokenizer

    from llmevo.inference.checkpoint import load_checkpoint

    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"export: {target} exists and is not an empty directory; choose a new --out")
    loaded = load_checkpoint(checkpoint)
    refusals = hf_refusals(loaded.model_config)
    if refusals:
        raise ConfigError(
            "cannot export to LlamaForCausalLM: " + "; ".join(refusals)
        )
    if loaded.tokenizer_json is None:
        raise ConfigError(f"checkpoint {checkpoint} has no tokenizer.json; cannot export a tokenizer")
    tokenizer = Tokenizer.from_str(loaded.tokenizer_json)
    special_ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    config = loaded.model_config
    state = llama_state_dict(loaded.model, config)

    with staged_folder(target) as staging:
        write_file_atomic(staging / "model.safetensors", lambda temporary: save_file(
            state, str(temporary), metadata={"format": "pt"}))
        files = {
            "config.json": llama_config(config, special_ids),
            "generation_config.json": {
                "bos_token_id": special_ids["<bos>"],
                "eos_token_id": special_ids["<eos>"],
                "pad_token_id": special_ids["<pad>"],
            },
            "tokenizer_config.json": tokenizer_config(config.max_seq_len),
            "special_tokens_map.json": {
                key: value
                for key, value in tokenizer_config(config.max_seq_len).items()
                if key.endswith("_token")
            },
            "llmevo_export.json": {
                "source_checkpoint": str(Path(checkpoint)),
                "genome": config.model_dump(mode="json"),
                "metadata": loaded.metadata,
                "rope_layout": "q/k rows permuted per head from interleaved pairs to halves",
            },
        }
        for name, content in files.items():
            write_text_atomic(staging / name, json.dumps(content, indent=2) + "\n")
        write_text_atomic(staging / "tokenizer.json", loaded.tokenizer_json)
    return target
