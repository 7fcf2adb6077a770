"""Tiny ``transformers`` Llama checkpoints made in a test (the reference for ``--init-from``)."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

# SmolLM2's layout: <|endoftext|> is id 0 and serves as BOS, EOS and padding
SMOL_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def smol_like_tokenizer(data_dir: Path, vocab_size: int = 384) -> Tokenizer:
    """Byte-level BPE with SmolLM2's special tokens, on 60,000 characters of Tiny Shakespeare."""
    text = (data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:60_000]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SMOL_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(text.splitlines(), trainer=trainer)
    return tokenizer


def make_hf_llama(folder: Path, tokenizer: Tokenizer, *, tie: bool = True, kv_heads: int = 2,
                  theta: float = 10_000.0, seed: int = 3, **extra) -> Path:
    """A random transformers LlamaForCausalLM (hidden 32, 2 layers, 4 heads) saved to ``folder``
    with ``tokenizer`` as its tokenizer.json; ``extra`` goes into its LlamaConfig."""
    config = _transformers().LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=48,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=kv_heads,
        max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=tie,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
        bos_token_id=0, eos_token_id=0, pad_token_id=None, **extra)
    torch.manual_seed(seed)
    model = _transformers().LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1, larger weights: every parameter matters
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.2)
    model.save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def _transformers():
    import transformers

    return transformers
