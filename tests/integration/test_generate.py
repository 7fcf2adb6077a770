"""KV-cache decoding over every registered position x attention pair, checkpoints, generate."""

from __future__ import annotations

import dataclasses
import pickletools
from itertools import product

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from typer.testing import CliRunner

from llmevo.catalog import build_model, full_registry
from llmevo.cli import app
from llmevo.errors import ArtifactError, ConfigError
from llmevo.inference.checkpoint import load_checkpoint, save_checkpoint
from llmevo.inference.generate import SamplingConfig, cached_logits, generate
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice

REGISTRY = full_registry()
SMALL = {"vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 32}
PAIRS = list(product(REGISTRY.names("position"), REGISTRY.names("attention")))


def _model(position: str = "rope", attention: str = "mha", **attention_config):
    config = ModelConfig(
        **SMALL,
        position=ComponentChoice(name=position),
        attention=ComponentChoice(name=attention, config=attention_config),
    )
    torch.manual_seed(0)
    return config, build_model(config).eval()


@pytest.mark.parametrize(("position", "attention"), PAIRS)
def test_cached_decoding_matches_full_forward(position, attention):
    try:
        _, model = _model(position, attention)
    except ConfigError as error:
        pytest.skip(f"{position} x {attention} is not a valid pair: {error}")
    tokens = torch.randint(0, 64, (2, 20), generator=torch.Generator().manual_seed(1))
    if not model.supports_kv_cache:
        with pytest.raises(ConfigError, match="not supported by"):
            cached_logits(model, tokens, prefill=7)
        return
    with torch.no_grad():
        full = model(tokens)
    assert (cached_logits(model, tokens, prefill=7) - full).abs().max() <= 1e-5


def test_grouped_query_attention_cache():
    _, model = _model(kv_heads=2)
    tokens = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (cached_logits(model, tokens, prefill=1) - model(tokens)).abs().max() <= 1e-5


def test_component_without_cache_support_is_named():
    _, model = _model()
    spec = model.specs["attention"]
    refusing = spec.manifest.model_copy(update={"supports_kv_cache": False})
    model.specs["attention"] = dataclasses.replace(spec, manifest=refusing)
    with pytest.raises(ConfigError, match="attention 'mha'"):
        generate(model, [1, 2, 3], SamplingConfig(max_tokens=2))


def test_learned_positions_refuse_a_too_long_prompt_before_work():
    _, model = _model("learned")
    with pytest.raises(ConfigError, match="longer than the model's 32 positions"):
        generate(model, list(range(40)), SamplingConfig(max_tokens=1))
    with pytest.raises(ConfigError, match="use at most 2 new tokens"):
        generate(model, list(range(30)), SamplingConfig(max_tokens=5))


def test_generate_is_deterministic_for_a_seed():
    _, model = _model()
    runs = [
        generate(model, [1, 2, 3], SamplingConfig(temperature=1.0, top_k=20, max_tokens=12, seed=s))
        for s in (7, 7, 8)
    ]
    assert runs[0].new_tokens == runs[1].new_tokens != runs[2].new_tokens
    assert len(runs[0].new_tokens) == 12
    greedy = generate(model, [1, 2, 3], SamplingConfig(temperature=0.0, max_tokens=4))
    with torch.no_grad():
        first = int(model(torch.tensor([[1, 2, 3]]))[0, -1].argmax())
    assert greedy.new_tokens[0] == first


def _tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=64,
        special_tokens=["<pad>", "<unk>", "<bos>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()[:40],
    )
    tokenizer.train_from_iterator(["the cat sat on the mat"] * 20, trainer=trainer)
    return tokenizer


def _no_pickle(path) -> bool:
    """A safetensors file: 8-byte header length, a JSON header, raw tensor bytes; no pickle."""
    data = path.read_bytes()
    header_length = int.from_bytes(data[:8], "little")
    if not data[8 : 8 + header_length].strip().startswith(b"{"):
        return False
    try:
        list(pickletools.genops(data))
    except Exception:
        return True
    return False


def test_checkpoint_round_trip_and_generate_cli(tmp_path):
    config, model = _model()
    tokenizer = _tokenizer()
    folder = save_checkpoint(tmp_path / "ckpt", model, config, tokenizer.to_str(), {"steps": 3})
    loaded = load_checkpoint(folder)
    assert loaded.model_config == config and loaded.metadata == {"steps": 3}
    assert loaded.model.head.weight is loaded.model.embedding.weight
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(loaded.model(tokens), model(tokens))
    assert _no_pickle(folder / "model.safetensors")
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]

    runner = CliRunner()
    args = ["generate", "--checkpoint", str(folder), "--prompt", "the cat", "--max-tokens", "5"]
    first, second = runner.invoke(app, args), runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.output.startswith("the cat") and first.output == second.output


def test_checkpoint_errors(tmp_path):
    with pytest.raises(ArtifactError, match="config.json is missing"):
        load_checkpoint(tmp_path)
    config, model = _model()
    folder = save_checkpoint(tmp_path / "ckpt", model, config)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(ArtifactError, match="sha256 differs"):
        load_checkpoint(folder)
