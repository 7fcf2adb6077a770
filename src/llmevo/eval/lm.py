"""Language-model evaluation: next-token NLL, perplexity and bits per byte.

Non-overlapping windows of ``seq_len + 1`` tokens at stride ``seq_len`` cover the split
(the last window may be shorter), so every token after the first is predicted exactly
once. ``lm_loss`` is the mean NLL per predicted token; with ``max_windows`` (the
reference protocol's 32 windows of equal length) that equals the mean of per-window means.
``bits_per_byte`` divides the total NLL by ln 2 times the UTF-8 bytes of the predicted
tokens (special tokens 0 bytes).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from llmevo.eval.metrics import bits_per_byte, perplexity


def evaluation_windows(tokens: Tensor, seq_len: int, max_windows: int | None = None) -> list[Tensor]:
    """Non-overlapping (seq_len + 1)-token windows; the last one may be shorter."""
    windows = []
    for start in range(0, tokens.numel() - 1, seq_len):
        windows.append(tokens[start : start + seq_len + 1])
        if max_windows is not None and len(windows) == max_windows:
            break
    return windows


@torch.no_grad()
def evaluate_lm(
    model: nn.Module,
    tokens: Tensor,
    seq_len: int,
    device: torch.device,
    token_bytes: Tensor | None = None,
    batch_size: int = 64,
    max_windows: int | None = None,
) -> dict[str, float]:
    """lm_loss, perplexity and (with ``token_bytes``) bits_per_byte over ``tokens``."""
    was_training = model.training
    model.eval()
    windows = evaluation_windows(tokens, seq_len, max_windows)
    total_nll = 0.0
    total_tokens = 0
    total_bytes = 0
    full = [w for w in windows if w.numel() == seq_len + 1]
    rest = [w for w in windows if w.numel() != seq_len + 1]
    batches = [torch.stack(full[i : i + batch_size]) for i in range(0, len(full), batch_size)]
    batches += [w[None] for w in rest if w.numel() > 1]
    for batch in batches:  # (B, T + 1)
        batch = batch.to(device)
        logits = model(batch[:, :-1])  # (B, T, V)
        targets = batch[:, 1:]
        nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum")
        total_nll += nll.item()
        total_tokens += targets.numel()
        if token_bytes is not None:
            total_bytes += int(token_bytes[targets.cpu()].sum())
    model.train(was_training)
    lm_loss = total_nll / max(1, total_tokens)
    result = {"lm_loss": lm_loss, "perplexity": perplexity(lm_loss), "eval_tokens": float(total_tokens)}
    if token_bytes is not None and total_bytes > 0:
        result["bits_per_byte"] = bits_per_byte(total_nll, total_bytes)
        result["eval_bytes"] = float(total_bytes)
    return result
