"""Export to ``transformers``' LlamaForCausalLM: logits, greedy generation and tokenizer ids.

The reference is ``transformers`` itself, loading the exported directory with
``AutoModelForCausalLM`` / ``AutoTokenizer`` (no llmevo code on its side).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from llmevo.catalog import build_model
from llmevo.cli import app, main
from llmevo.errors import ConfigError
from llmevo.hf.export import export_hf, hf_refusals, interleaved_to_half_permutation
from llmevo.inference.checkpoint import save_checkpoint
from llmevo.inference.generate import SamplingConfig, generate
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice

transformers = pytest.importorskip("transformers")

GENOMES = {
    "llama_modern": {},
    "gqa_untied": {
        "n_heads": 4,
        "attention": ComponentChoice(name="mha", config={"kv_heads": 2}),
        "tie_embeddings": False,
    },
    "mqa_theta": {
        "n_heads": 4,
        "attention": ComponentChoice(name="mha", config={"kv_heads": 1}),
        "position": ComponentChoice(name="rope", config={"theta": 500.0}),
        "feedforward": ComponentChoice(name="swiglu", config={"hidden": 96}),
        "n_layers": 3,
    },
}


def _checkpoint(tmp_path, tokenizer_json, vocab_size, **overrides):
    config = ModelConfig(vocab_size=vocab_size, **overrides)
    torch.manual_seed(7)
    model = build_model(config).eval()
    with torch.no_grad():  # trained-looking weights: norms and embeddings away from init
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return model, save_checkpoint(tmp_path / "ckpt", model, config, tokenizer_json)


def _hf_logits(hf_model, tokens):
    with torch.no_grad():
        return hf_model(input_ids=tokens).logits


@pytest.mark.parametrize("genome", sorted(GENOMES))
def test_logits_generation_and_tokenizer_match_transformers(genome, tmp_path, smoke_corpus):
    info = smoke_corpus.tokenizer
    model, ckpt = _checkpoint(
        tmp_path, info.tokenizer.to_str(), info.vocab_size, **GENOMES[genome]
    )
    out = export_hf(ckpt, tmp_path / "hf")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf_model).__name__ == "LlamaForCausalLM" and hf_model.dtype == torch.float32
    assert sum(p.numel() for p in hf_model.parameters()) == model.num_parameters()

    generator = torch.Generator().manual_seed(0)
    random_batch = torch.randint(0, info.vocab_size, (3, 64), generator=generator)
    real_batch = smoke_corpus.tokens["validation"][: 4 * 64].view(4, 64)
    for batch in (random_batch, real_batch):
        with torch.no_grad():
            ours = model(batch)
        theirs = _hf_logits(hf_model, batch)
        assert torch.allclose(ours, theirs, atol=1e-4, rtol=0), (ours - theirs).abs().max()

    prompt = real_batch[0, :10].tolist()
    ours_greedy = generate(
        model, prompt, SamplingConfig(temperature=0.0, max_tokens=20), stop_token=3
    ).new_tokens
    with torch.no_grad():
        theirs_greedy = hf_model.generate(
            torch.tensor([prompt]), do_sample=False, max_new_tokens=20
        )[0, len(prompt) :].tolist()
    assert ours_greedy == theirs_greedy

    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    text = smoke_corpus.texts["validation"][:20_000]
    assert hf_tokenizer(text)["input_ids"] == info.tokenizer.encode(text).ids
    assert hf_tokenizer.decode(real_batch[1].tolist()) == info.tokenizer.decode(real_batch[1].tolist())


def test_theta_reaches_the_exported_config(tmp_path, smoke_corpus):
    info = smoke_corpus.tokenizer
    _, ckpt = _checkpoint(tmp_path, info.tokenizer.to_str(), info.vocab_size, **GENOMES["mqa_theta"])
    config = json.loads((export_hf(ckpt, tmp_path / "hf") / "config.json").read_text())
    assert config["rope_theta"] == 500.0 and config["num_key_value_heads"] == 1
    assert config["intermediate_size"] == 96 and config["num_hidden_layers"] == 3


def test_permutation_maps_pairs_to_halves():
    # llmevo's pair (2i, 2i+1) must land on Llama's (i, i + Dh/2).
    order = interleaved_to_half_permutation(8).tolist()
    assert order == [0, 2, 4, 6, 1, 3, 5, 7]
    for i in range(4):
        assert order[i] == 2 * i and order[i + 4] == 2 * i + 1


@pytest.mark.parametrize(
    ("slot", "choice", "named"),
    [
        ("position", "alibi", "ALiBi"),
        ("position", "rope:rotary_dim=8", "partial rotary"),
        ("feedforward", "relu2", "squared-ReLU"),
        ("block", "post_norm", "post-norm"),
        ("norm", "layernorm", "LayerNorm"),
        ("attention", "qk_norm", "qk-norm"),
    ],
)
def test_unrepresentable_genomes_are_refused_by_name(slot, choice, named):
    reasons = hf_refusals(ModelConfig().with_slot(slot, choice))
    assert len(reasons) == 1 and named in reasons[0]


def test_cli_exports_and_refuses_alibi_with_exit_2(tmp_path, smoke_corpus, capsys):
    info = smoke_corpus.tokenizer
    _, ckpt = _checkpoint(tmp_path, info.tokenizer.to_str(), info.vocab_size)
    result = CliRunner().invoke(app, ["export", str(ckpt), "--format", "hf", "--out", str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    # transformers alone loads it: llmevo is made unimportable in a fresh interpreter
    loader = (
        "import sys; sys.modules['llmevo'] = None\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(tmp_path / 'hf')!r})\n"
        f"t = AutoTokenizer.from_pretrained({str(tmp_path / 'hf')!r})\n"
        "print(type(m).__name__, len(t))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", loader], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": ""}, timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.split() == ["LlamaForCausalLM", str(info.vocab_size)]

    alibi_dir = tmp_path / "alibi"
    alibi_dir.mkdir()
    _, alibi = _checkpoint(alibi_dir, info.tokenizer.to_str(), info.vocab_size, position=ComponentChoice(name="alibi"))
    with pytest.raises(ConfigError, match="ALiBi"):
        export_hf(alibi, tmp_path / "hf-alibi")
    with pytest.raises(SystemExit) as exited:
        main(["export", str(alibi), "--format", "hf", "--out", str(tmp_path / "hf-alibi")])
    assert exited.value.code == 2 and "position 'alibi' (ALiBi" in capsys.readouterr().err
    assert not (tmp_path / "hf-alibi").exists()
    assert list(tmp_path.glob(".hf-alibi*")) == []
