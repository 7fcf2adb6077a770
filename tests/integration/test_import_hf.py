"""Import of ``transformers`` Llama directories (``--init-from``): logits, tokenizer, refusals.

The reference is ``transformers`` itself: a random ``LlamaForCausalLM`` created here and
saved with ``save_pretrained``, whose own forward gives the logits ours must equal; and a
round trip through llmevo's own ``export_hf``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hf_llama import make_hf_llama, smol_like_tokenizer
from tokenizers import Tokenizer

from llmevo.catalog import build_model
from llmevo.data.codec import BPECodec
from llmevo.errors import ConfigError
from llmevo.hf.export import export_hf, interleaved_to_half_permutation
from llmevo.hf.load import (
    half_to_interleaved_permutation,
    load_llama,
    read_llama_checkpoint,
)
from llmevo.inference.checkpoint import save_checkpoint
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice

transformers = pytest.importorskip("transformers")

@pytest.fixture(scope="module")
def smol_tokenizer(data_dir: Path) -> Tokenizer:
    return smol_like_tokenizer(data_dir)


def _logits(model, tokens):
    with torch.no_grad():
        out = model(input_ids=tokens) if hasattr(model, "generation_config") else model(tokens)
    return out.logits if hasattr(out, "logits") else out


def test_the_permutations_are_inverse() -> None:
    for head_dim in (2, 8, 64):
        forward = interleaved_to_half_permutation(head_dim)
        back = half_to_interleaved_permutation(head_dim)
        assert torch.equal(forward[back], torch.arange(head_dim))
        assert torch.equal(back[forward], torch.arange(head_dim))


@pytest.mark.parametrize("tie,kv_heads,theta", [(True, 2, 10_000.0), (False, 4, 500.0), (True, 1, 1e5)])
def test_logits_equal_transformers(tmp_path, smol_tokenizer, tie, kv_heads, theta) -> None:
    folder = make_hf_llama(tmp_path / "hf", smol_tokenizer, tie=tie, kv_heads=kv_heads, theta=theta)
    reference = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    ours, checkpoint = load_llama(folder)
    config = checkpoint.model_config
    assert (config.d_model, config.n_layers, config.n_heads, config.tie_embeddings) == (32, 2, 4, tie)
    assert config.attention.config == {"kv_heads": kv_heads}
    assert config.position.config == {"theta": theta}
    assert config.norm.config == {"eps": 1e-5}
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, config.vocab_size, (3, 40), generator=generator)
    theirs = _logits(reference, tokens)
    mine = _logits(ours, tokens)
    assert theirs.abs().max() > 1.0  # not a near-zero output that any mapping would match
    assert torch.allclose(mine, theirs, atol=1e-5, rtol=0), (mine - theirs).abs().max()


def test_tokenizer_and_special_ids_are_the_checkpoints(tmp_path, smol_tokenizer) -> None:
    folder = make_hf_llama(tmp_path / "hf", smol_tokenizer)
    checkpoint = read_llama_checkpoint(folder)
    codec = BPECodec(checkpoint.tokenizer.tokenizer, checkpoint.tokenizer.special)
    assert (codec.pad_id, codec.bos_id, codec.eos_id) == (0, 0, 0)
    reference = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    text = "To be, or not to be: that is the question.\nWhether 'tis nobler"
    assert codec.encode(text) == reference(text, add_special_tokens=False)["input_ids"]
    ids = codec.encode(text)
    assert codec.byte_length(ids) == len(text.encode("utf-8"))
    assert codec.byte_length([0, 1, 2]) == 0  # the three specials stand for no text


def test_round_trip_of_our_own_export(tmp_path, smoke_corpus) -> None:
    info = smoke_corpus.tokenizer
    config = ModelConfig(vocab_size=info.vocab_size, n_layers=3, tie_embeddings=False,
                         attention=ComponentChoice(name="mha", config={"kv_heads": 2}),
                         position=ComponentChoice(name="rope", config={"theta": 500.0}),
                         feedforward=ComponentChoice(name="swiglu", config={"hidden": 96}))
    torch.manual_seed(11)
    model = build_model(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    exported = export_hf(save_checkpoint(tmp_path / "ckpt", model, config, info.tokenizer.to_str()),
                         tmp_path / "hf")
    loaded, checkpoint = load_llama(exported)
    assert checkpoint.model_config.model_copy(update={"max_seq_len": 64}) == config.model_copy(
        update={"norm": ComponentChoice(name="rmsnorm", config={"eps": 1e-6})})
    original, back = model.state_dict(), loaded.state_dict()
    assert original.keys() == back.keys()
    for name in original:  # the q/k rows are back in llmevo's order, bit for bit
        assert torch.equal(original[name], back[name]), name
    tokens = smoke_corpus.tokens["validation"][: 4 * 64].view(4, 64)
    assert torch.allclose(_logits(loaded, tokens), _logits(model, tokens), atol=1e-5, rtol=0)
    special = checkpoint.tokenizer.special
    assert (special.pad, special.bos, special.eos) == (0, 2, 3)


def _rewrite_config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize("changes,said", [
    ({"attention_bias": True}, "attention_bias true"),
    ({"mlp_bias": True}, "mlp_bias true"),
    ({"sliding_window": 64}, "sliding_window 64"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"head_dim": 16}, "head_dim 16"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "rope_parameters"),
    ({"model_type": "mistral"}, "not a Llama checkpoint"),
    ({"intermediate_size": 64}, "tensor model.layers.0.mlp.gate_proj.weight has shape [48, 32]"),
])
def test_unsupported_configurations_are_refused_by_name(tmp_path, smol_tokenizer, changes, said) -> None:
    folder = make_hf_llama(tmp_path / "hf", smol_tokenizer)
    _rewrite_config(folder, **changes)
    with pytest.raises(ConfigError, match="--init-from") as error:
        read_llama_checkpoint(folder)
    assert said in str(error.value) and "\n" not in str(error.value)


def test_every_reason_is_named_at_once(tmp_path, smol_tokenizer) -> None:
    folder = make_hf_llama(tmp_path / "hf", smol_tokenizer)
    _rewrite_config(folder, attention_bias=True, sliding_window=32)
    with pytest.raises(ConfigError, match="attention_bias true.*sliding_window 32"):
        read_llama_checkpoint(folder)


def test_missing_files_and_foreign_directories(tmp_path, smol_tokenizer, smoke_corpus) -> None:
    folder = make_hf_llama(tmp_path / "hf", smol_tokenizer)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match="tokenizer.json is missing"):
        read_llama_checkpoint(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ConfigError, match="model.safetensors is missing"):
        read_llama_checkpoint(folder)
    with pytest.raises(ConfigError, match="config.json is missing"):
        read_llama_checkpoint(tmp_path)
    with pytest.raises(ConfigError, match="is not a directory"):
        read_llama_checkpoint(tmp_path / "nowhere")
    ours = save_checkpoint(tmp_path / "llmevo-ckpt", build_model(ModelConfig()), ModelConfig(),
                           smoke_corpus.tokenizer.tokenizer.to_str())
    with pytest.raises(ConfigError, match="not a Llama checkpoint"):  # llmevo's own format
        read_llama_checkpoint(ours)
    (folder / "model.safetensors").write_bytes(b"not safetensors at all")
    with pytest.raises(ConfigError, match="not a safetensors file"):
        read_llama_checkpoint(folder)


def test_changed_weights_after_reading_are_refused(tmp_path, smol_tokenizer) -> None:
    from llmevo.hf.load import load_llama_weights

    folder = make_hf_llama(tmp_path / "hf", smol_tokenizer)
    checkpoint = read_llama_checkpoint(folder)
    make_hf_llama(tmp_path / "hf", smol_tokenizer, seed=4)  # other weights, same shapes
    with pytest.raises(ConfigError, match="changed since it was read"):
        load_llama_weights(build_model(checkpoint.model_config), checkpoint)
