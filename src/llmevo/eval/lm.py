"""Language-model evaluation: next-token NLL, perplexity and bits per byte.

Non-overlapping windows of ``seq_len + 1`` tokens at stride ``seq_len`` cover the split
(the last window may be shorter), so every token after the first is predicted exactly
once. ``lm_loss`` is the mean NLL per predicted token; with ``max_windows`` (the
reference protocol's 32 windows of equal length) that equals the mean of per-window means.
``bits_per_byte`` divides the total NLL by ln 2 times the UTF-8 bytes of the predicted
tokens (special tokens 0 bytes).

The validation *curve* (``--val-every``: a report run's validation loss during training, read by
``eval.time_to_target``) is evaluated on a fixed subset of these windows, ``curve_windows``:
``CURVE_WINDOWS`` full-length windows evenly spaced over the windows the full evaluation reads
(all of them when there are fewer: at smoke, whose evaluation reads 32, the subset is the whole
evaluation, so a curve's last point is the run's validation ``lm_loss``). ``windows_loss`` is
the mean next-token NLL over a subset.
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


CURVE_WINDOWS = 32  # the validation curve's windows: the reference protocol's count


def curve_windows(tokens: Tensor, seq_len: int, max_windows: int | None = None,
                  count: int = CURVE_WINDOWS) -> Tensor:
    """The validation curve's windows (K, seq_len + 1): ``count`` full-length windows at
    indices ``i * n // count`` (i < count) of the ``n`` full windows ``evaluate_lm`` reads with
    ``max_windows``; all ``n`` when ``n <= count``."""
    full = [w for w in evaluation_windows(tokens, seq_len, max_windows) if w.numel() == seq_len + 1]
    if not full:
        raise ValueError(f"no full evaluation window of {seq_len + 1} tokens in {tokens.numel()} tokens")
    chosen = full if len(full) <= count else [full[i * len(full) // count] for i in range(count)]
    return torch.stack(chosen)  # (K, T + 1)


@torch.no_grad()
def windows_loss(model: nn.Module, windows: Tensor, device: torch.device, batch_size: int = 64) -> float:
    """The mean next-token NLL of ``model`` over ``windows`` (K, T + 1), in eval mode (the mode
    it had is restored), at full precision: what ``evaluate_lm`` computes on those windows."""
    was_training = model.training
    model.eval()
    try:
        total = 0.0
        for start in range(0, windows.shape[0], batch_size):
            batch = windows[start : start + batch_size].to(device)  # (B, T + 1)
            logits = model(batch[:, :-1])  # (B, T, V)
            total += F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten(),
                                     reduction="sum").item()
    finally:
        model.train(was_training)
    return total / (windows.shape[0] * (windows.shape[1] - 1))


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
