"""Load a Hugging Face ``transformers`` Llama checkpoint directory as an llmevo model.

The inverse of ``hf.export``: a directory with ``config.json`` (``model_type: llama``),
``model.safetensors`` and ``tokenizer.json`` (SmolLM2-135M is one) becomes a ``Transformer``
whose genome is llama_modern's components at the checkpoint's sizes — RoPE at its theta
over the whole head, grouped attention with its key/value heads, SwiGLU at its
intermediate size, RMSNorm at its epsilon, pre-norm blocks, tied or untied embeddings —
and the tokenizer the checkpoint was trained with (``tokenizers``, its special ids from the
config).

RoPE layout: ``transformers`` rotates the halves ``(i, i + Dh/2)`` of each head, llmevo the
interleaved pairs ``(2i, 2i+1)``; each head's query and key rows are put back in the
order ``argsort([0, 2, ..., Dh-2, 1, 3, ..., Dh-1])``, the inverse of the export's.

Every configuration ``LlamaForCausalLM`` computes differently from that genome is refused
by name before a weight is read (attention or MLP biases, a sliding window, any RoPE
scaling, a head dimension other than hidden / heads, an activation other than SiLU,
attention dropout, quantization, sharded weights), and the weights must be exactly the
tensors the config describes, shape for shape. Reference tests:
``tests/integration/test_import_hf.py`` (logits against ``transformers``' own forward on a
random ``LlamaForCausalLM``; a round trip through ``export_hf``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from llmevo.catalog import build_model
from llmevo.data.codec import BPECodec, SpecialIds
from llmevo.data.tokenizer import TokenizerInfo
from llmevo.digests import sha256_file
from llmevo.errors import ConfigError, LlmevoError
from llmevo.hf.export import interleaved_to_half_permutation
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.skeleton import build_skeleton

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
MAX_CONFIG_BYTES = 1 << 20
MAX_TOKENIZER_BYTES = 64 << 20
# keys transformers leaves in some old checkpoints: buffers it recomputes, never weights
_IGNORED_WEIGHTS = ("rotary_emb.inv_freq",)


@dataclass(frozen=True)
class LlamaCheckpoint:
    """A checked Llama directory: the genome it holds, its tokenizer and the weights' sha256.
    Reading it loads no weight; ``load_llama_weights`` does (and checks the sha256 again)."""

    directory: Path
    model_config: ModelConfig
    tokenizer: TokenizerInfo
    weights_sha256: str
    dtype: str  # the weights' stored dtype (loaded as float32)

    def provenance(self) -> dict[str, Any]:
        """What an artifact records about the starting model."""
        return {"directory": str(self.directory), "weights_sha256": self.weights_sha256,
                "tokenizer_sha256": self.tokenizer.sha256, "stored_dtype": self.dtype,
                "genome": self.model_config.model_dump(mode="json")}


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"--init-from: {path} is {path.stat().st_size:,} bytes; a {what} is at "
                          f"most {MAX_CONFIG_BYTES:,}")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise ConfigError(f"--init-from: {path} is not valid JSON ({str(error)[:120]})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"--init-from: {path} holds a JSON {type(value).__name__}; expected an object")
    return value


def _positive_int(config: dict[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--init-from: config.json {key} is {value!r}; expected a positive integer")
    return value


def _rope_theta(config: dict[str, Any]) -> float:
    """RoPE's theta from v5's ``rope_parameters`` or v4's ``rope_theta``; any scaling refused."""
    parameters = config.get("rope_parameters")
    scaling = config.get("rope_scaling")
    if scaling is not None:
        raise ConfigError(f"--init-from: rope_scaling {json.dumps(scaling)[:80]} is not supported "
                          "(llmevo's RoPE has no scaling; only rope_scaling null)")
    theta = config.get("rope_theta", 10_000.0)
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise ConfigError(f"--init-from: rope_parameters {parameters!r} is not an object")
        rope_type = parameters.get("rope_type", "default")
        if rope_type != "default" or set(parameters) - {"rope_type", "rope_theta"}:
            raise ConfigError(f"--init-from: rope_parameters {json.dumps(parameters)[:80]} is "
                              "not supported (only rope_type 'default', no scaling)")
        theta = parameters.get("rope_theta", theta)
    if isinstance(theta, bool) or not isinstance(theta, int | float) or not theta > 1.0:
        raise ConfigError(f"--init-from: rope_theta {theta!r} must be a number above 1")
    return float(theta)


def llama_refusals(config: dict[str, Any]) -> list[str]:
    """Why llmevo's genome cannot compute what ``LlamaForCausalLM`` computes for ``config``
    (empty: it can). Checked one by one so that every reason is named."""
    reasons = []
    flags = {"attention_bias": "attention projections with biases",
             "mlp_bias": "MLP projections with biases"}
    for key, what in flags.items():
        if config.get(key, False):
            reasons.append(f"{key} true ({what}; llmevo's Llama has no biases)")
    if config.get("sliding_window") is not None:
        reasons.append(f"sliding_window {config['sliding_window']!r} (llmevo attends to the whole context)")
    activation = config.get("hidden_act", "silu")
    if activation != "silu":
        reasons.append(f"hidden_act {activation!r} (llmevo's SwiGLU gates with SiLU only)")
    dropout = config.get("attention_dropout", 0.0)
    if dropout not in (0, 0.0):
        reasons.append(f"attention_dropout {dropout!r} (llmevo attention has no dropout)")
    if config.get("quantization_config") is not None:
        reasons.append("quantization_config (quantized weights; llmevo loads float weights)")
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    head_dim = config.get("head_dim")
    if (head_dim is not None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0
            and (hidden % heads or head_dim != hidden // heads)):
        reasons.append(f"head_dim {head_dim!r} is not hidden_size / num_attention_heads "
                       f"({hidden} / {heads}; llmevo's heads split d_model)")
    return reasons


def llama_model_config(config: dict[str, Any]) -> ModelConfig:
    """The llmevo genome of a Llama ``config.json`` (refusing, by name, what it cannot hold)."""
    model_type = config.get("model_type")
    architectures = config.get("architectures") or ["LlamaForCausalLM"]
    if model_type != "llama" or architectures != ["LlamaForCausalLM"]:
        raise ConfigError(f"--init-from: not a Llama checkpoint (model_type {model_type!r}, "
                          f"architectures {architectures!r}); expected model_type 'llama', "
                          "LlamaForCausalLM")
    reasons = llama_refusals(config)
    if reasons:
        raise ConfigError("--init-from: unsupported Llama configuration: " + "; ".join(reasons))
    hidden = _positive_int(config, "hidden_size")
    heads = _positive_int(config, "num_attention_heads")
    kv_heads = _positive_int(config, "num_key_value_heads", heads)
    if hidden % heads or heads % kv_heads or (hidden // heads) % 2:
        raise ConfigError(f"--init-from: hidden_size {hidden}, num_attention_heads {heads}, "
                          f"num_key_value_heads {kv_heads}: heads must divide hidden_size into "
                          "an even head dimension, and key/value heads must divide heads")
    eps = config.get("rms_norm_eps", 1e-6)
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps > 0:
        raise ConfigError(f"--init-from: rms_norm_eps {eps!r} must be a positive number")
    tie = config.get("tie_word_embeddings", False)  # LlamaConfig's default
    if not isinstance(tie, bool):
        raise ConfigError(f"--init-from: tie_word_embeddings {tie!r} is not true or false")
    return ModelConfig(
        vocab_size=_positive_int(config, "vocab_size"),
        d_model=hidden,
        n_layers=_positive_int(config, "num_hidden_layers"),
        n_heads=heads,
        max_seq_len=_positive_int(config, "max_position_embeddings", 2048),
        tie_embeddings=tie,
        position=ComponentChoice(name="rope", config={"theta": _rope_theta(config)}),
        attention=ComponentChoice(name="mha", config={"kv_heads": kv_heads}),
        feedforward=ComponentChoice(name="swiglu",
                                    config={"hidden": _positive_int(config, "intermediate_size")}),
        norm=ComponentChoice(name="rmsnorm", config={"eps": float(eps)}),
        block=ComponentChoice(name="pre_norm"),
    )


def _special_id(config: dict[str, Any], tokenizer_config: dict[str, Any], role: str,
                tokenizer: Any) -> int | None:
    """A special id from config.json (a list, as Llama 3 writes eos: its first), else the
    token tokenizer_config.json names for the role."""
    value = config.get(f"{role}_token_id")
    if isinstance(value, list) and value:
        value = value[0]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    token = tokenizer_config.get(f"{role}_token")
    if isinstance(token, dict):
        token = token.get("content")
    return tokenizer.token_to_id(token) if isinstance(token, str) else None


def _read_tokenizer(folder: Path, config: dict[str, Any], vocab_size: int) -> TokenizerInfo:
    from tokenizers import Tokenizer

    path = folder / TOKENIZER_FILE
    if not path.is_file():
        raise ConfigError(f"--init-from: {path} is missing; the checkpoint's own fast tokenizer "
                          "is needed to tokenize the data")
    if path.stat().st_size > MAX_TOKENIZER_BYTES:
        raise ConfigError(f"--init-from: {path} is implausibly large ({path.stat().st_size:,} bytes)")
    try:
        text = path.read_text(encoding="utf-8")
        tokenizer = Tokenizer.from_str(text)
    except UnicodeDecodeError:
        raise ConfigError(f"--init-from: {path} is not UTF-8 text") from None
    except Exception as error:  # noqa: BLE001 - the tokenizers library raises plain Exception
        raise ConfigError(f"--init-from: {path} is not a tokenizers JSON ({str(error)[:100]})") from None
    tokenizer_config_path = folder / TOKENIZER_CONFIG_FILE
    tokenizer_config = (_read_json(tokenizer_config_path, "tokenizer config")
                        if tokenizer_config_path.is_file() else {})
    eos = _special_id(config, tokenizer_config, "eos", tokenizer)
    if eos is None:
        raise ConfigError(f"--init-from: {folder} names no end-of-sequence token (config.json "
                          "eos_token_id or tokenizer_config.json eos_token)")
    bos = _special_id(config, tokenizer_config, "bos", tokenizer)
    pad = _special_id(config, tokenizer_config, "pad", tokenizer)
    special = SpecialIds(pad=eos if pad is None else pad, bos=eos if bos is None else bos, eos=eos)
    if tokenizer.get_vocab_size(with_added_tokens=True) > vocab_size:
        raise ConfigError(f"--init-from: the tokenizer has {tokenizer.get_vocab_size():,} entries, "
                          f"more than the model's vocab_size {vocab_size:,}")
    info = TokenizerInfo(tokenizer=tokenizer, path=path, sha256=sha256_file(path), special=special)
    try:
        BPECodec(tokenizer, special)  # byte-level BPE, special ids in the vocabulary
    except LlmevoError as error:
        raise ConfigError(f"--init-from: {path}: {error}") from None
    return info


def _llama_names(config: ModelConfig) -> dict[str, str]:
    """llmevo parameter name -> transformers' name, for every weight the genome has."""
    names = {"embedding.weight": "model.embed_tokens.weight", "final_norm.weight": "model.norm.weight"}
    parts = {"attention_norm": "input_layernorm", "attention.query": "self_attn.q_proj",
             "attention.key": "self_attn.k_proj", "attention.value": "self_attn.v_proj",
             "attention.output": "self_attn.o_proj", "feed_forward_norm": "post_attention_layernorm",
             "feed_forward.gate": "mlp.gate_proj", "feed_forward.up": "mlp.up_proj",
             "feed_forward.down": "mlp.down_proj"}
    for index in range(config.n_layers):
        for ours, theirs in parts.items():
            names[f"blocks.{index}.{ours}.weight"] = f"model.layers.{index}.{theirs}.weight"
    if not config.tie_embeddings:
        names["head.weight"] = "lm_head.weight"
    return names


def _expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """transformers' name -> the shape the genome needs (built as a skeleton: bounded memory)."""
    skeleton = build_skeleton(config)
    shapes = {name: tuple(tensor.shape) for name, tensor in skeleton.state_dict().items()}
    return {theirs: shapes[ours] for ours, theirs in _llama_names(config).items()}


def _stored_shapes(weights: Path) -> tuple[dict[str, tuple[int, ...]], str]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(weights), framework="pt") as handle:
            stored = {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
            dtypes = {handle.get_slice(key).get_dtype() for key in handle.keys()}
    except (SafetensorError, OSError, ValueError) as error:
        raise ConfigError(f"--init-from: {weights} is not a safetensors file ({str(error)[:120]})") from None
    return stored, ",".join(sorted(dtypes))


def _check_weights(config: ModelConfig, stored: dict[str, tuple[int, ...]], weights: Path) -> None:
    expected = _expected_shapes(config)
    stored = {name: shape for name, shape in stored.items() if not name.endswith(_IGNORED_WEIGHTS)}
    if config.tie_embeddings:
        stored.pop("lm_head.weight", None)  # some tied checkpoints store the shared matrix twice
    missing = sorted(set(expected) - set(stored))
    unexpected = sorted(set(stored) - set(expected))
    if missing or unexpected:
        said = [f"missing {', '.join(missing[:3])}" if missing else "",
                f"not part of the config's model: {', '.join(unexpected[:3])}" if unexpected else ""]
        raise ConfigError(f"--init-from: {weights} does not hold the config's Llama "
                          f"({'; '.join(part for part in said if part)})")
    for name, shape in expected.items():
        if stored[name] != shape:
            raise ConfigError(f"--init-from: {weights}: tensor {name} has shape "
                              f"{list(stored[name])}; config.json's model needs {list(shape)}")


def read_llama_checkpoint(directory: Path | str) -> LlamaCheckpoint:
    """Check a Llama directory (config, tokenizer, the weights' names and shapes) and hash its
    weights, without loading them. Every problem is a one-line ``ConfigError``."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ConfigError(f"--init-from: {folder} is not a directory")
    config_path, weights = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    if not config_path.is_file():
        raise ConfigError(f"--init-from: {config_path} is missing; expected a transformers Llama "
                          "checkpoint directory (config.json, model.safetensors, tokenizer.json)")
    config = _read_json(config_path, "model config")
    model_config = llama_model_config(config)
    if not weights.is_file():
        sharded = (folder / f"{WEIGHTS_FILE}.index.json").is_file()
        raise ConfigError(f"--init-from: {weights} is missing" + (
            " (sharded weights, model.safetensors.index.json, are not supported)" if sharded
            else "; a Llama directory holds its weights in model.safetensors"))
    stored, dtype = _stored_shapes(weights)
    _check_weights(model_config, stored, weights)
    tokenizer = _read_tokenizer(folder, config, model_config.vocab_size)
    return LlamaCheckpoint(directory=folder, model_config=model_config, tokenizer=tokenizer,
                           weights_sha256=sha256_file(weights), dtype=dtype)


def half_to_interleaved_permutation(head_dim: int) -> Tensor:
    """Row order that puts Llama's half-split rows back in llmevo's interleaved pairs."""
    return torch.argsort(interleaved_to_half_permutation(head_dim))


def unpermute_rotary_rows(weight: Tensor, n_heads: int, head_dim: int) -> Tensor:
    """Each head's output rows of a q/k projection (H*Dh, D), from halves to pairs."""
    order = half_to_interleaved_permutation(head_dim)
    return weight.reshape(n_heads, head_dim, -1)[:, order].reshape(n_heads * head_dim, -1)


def load_llama_weights(model: nn.Module, checkpoint: LlamaCheckpoint) -> nn.Module:
    """Copy the checkpoint's weights (as float32) into ``model``, built from
    ``checkpoint.model_config``; the weights file must still have the sha256 read earlier."""
    from safetensors.torch import load_file

    weights = checkpoint.directory / WEIGHTS_FILE
    if sha256_file(weights) != checkpoint.weights_sha256:
        raise ConfigError(f"--init-from: {weights} changed since it was read (sha256 differs)")
    stored = load_file(str(weights))
    config = checkpoint.model_config
    head_dim = config.d_model // config.n_heads
    kv_heads = config.attention.config.get("kv_heads") or config.n_heads
    state = model.state_dict()
    for ours, theirs in _llama_names(config).items():
        tensor = stored[theirs].to(torch.float32)
        if ours.endswith("attention.query.weight"):
            tensor = unpermute_rotary_rows(tensor, config.n_heads, head_dim)
        elif ours.endswith("attention.key.weight"):
            tensor = unpermute_rotary_rows(tensor, kv_heads, head_dim)
        state[ours] = tensor
    if config.tie_embeddings:
        state["head.weight"] = state["embedding.weight"]
    model.load_state_dict(state, strict=True)
    if config.tie_embeddings:
        model.head.weight = model.embedding.weight  # load_state_dict copies; the tie stays
    return model


def load_llama(directory: Path | str) -> tuple[nn.Module, LlamaCheckpoint]:
    """The model a Llama directory holds (float32, eval mode) and its checked description."""
    checkpoint = read_llama_checkpoint(directory)
    model = load_llama_weights(build_model(checkpoint.model_config), checkpoint)
    return model.eval(), checkpoint
