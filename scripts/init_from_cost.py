"""What ``reproduce sft --init-from SMOLLM2_DIR`` costs on a CPU: one JSON line per measurement.

A random ``LlamaForCausalLM`` of SmolLM2-135M's configuration (no download: the weights are
random, the cost is the same) is saved with ``save_pretrained`` (bfloat16, as SmolLM2 ships),
read and loaded by ``llmevo.hf.load``, then timed for a few post-training steps
(forward, backward, AdamW on every parameter) and evaluation forwards at the preset's window
(64 tokens) and the stage's batch. The numbers are estimates for that machine and thread
count; multiply by the preset's steps and windows.

    PYTHONPATH=src python scripts/init_from_cost.py --threads 1 --batch 16 --steps 3
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

SMOLLM2_135M = {  # config.json of HuggingFaceTB/SmolLM2-135M
    "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": True,
    "bos_token_id": 0, "eos_token_id": 0,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=16, help="examples per step (quick's stage: 16)")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    from llmevo.hf.load import load_llama

    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder) / "smollm2-135m-random"
        config = transformers.LlamaConfig(**SMOLLM2_135M)
        torch.manual_seed(0)
        transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(directory)
        # a size-matched byte-level stand-in: the 256 byte characters, then pairs of them
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        entries = alphabet + [a + b for a in alphabet for b in alphabet]
        vocab = {entry: index for index, entry in enumerate(entries[: SMOLLM2_135M["vocab_size"]])}
        tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.save(str(directory / "tokenizer.json"))
        started = time.perf_counter()
        model, _ = load_llama(directory)
        print(json.dumps({"load_seconds": round(time.perf_counter() - started, 2),
                          "parameters": sum(p.numel() for p in model.parameters())}))
    tokens = torch.randint(0, SMOLLM2_135M["vocab_size"], (args.batch, args.seq_len))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for _ in range(args.steps + 1):  # the first is a warm-up
        started = time.perf_counter()
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - started)
    print(json.dumps({"train_step_seconds": round(sum(times[1:]) / args.steps, 2),
                      "batch": args.batch, "seq_len": args.seq_len, "threads": args.threads}))
    model.eval()
    times = []
    with torch.no_grad():
        for _ in range(args.steps + 1):
            started = time.perf_counter()
            model(tokens)
            times.append(time.perf_counter() - started)
    print(json.dumps({"eval_forward_seconds": round(sum(times[1:]) / args.steps, 2),
                      "windows": args.batch, "seq_len": args.seq_len, "threads": args.threads}))


if __name__ == "__main__":
    main()
