"""Per-step training records and where they go (TensorBoard, or any ``StepLogger``).

The trainer calls ``logger.log_step(StepRecord(...))`` after every optimizer step; a
caller that trains several arms or replicas opens one named run per arm/replica from a
``RunLogs`` (``logs.run("method-seed42")``) and passes it in, and logs evaluation metrics
on the same run when training is done. ``TensorBoardLogs`` writes one TensorBoard run
directory per name through ``torch.utils.tensorboard.SummaryWriter``, so the arms' curves
overlay under the same tags:

- ``train/loss``, ``train/lr`` (of the first parameter group), ``train/grad_norm`` (the
  total gradient norm before clipping), at global step = optimizer steps done;
- ``<group>/<metric>`` for evaluation metrics (``validation/lm_loss``, ``test/fitness``,
  ``evolve/fitness``), and text entries (an evolved trial's genome).

Post-training or any other loop reuses the same two calls.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from llmevo.errors import ConfigError


@dataclass(frozen=True)
class StepRecord:
    """What one optimizer step did."""

    step: int  # 0-based index of the step just taken
    loss: float
    lr: float
    grad_norm: float
    tokens_seen: int


class StepLogger(Protocol):
    def log_step(self, record: StepRecord) -> None: ...


class RunLogger(StepLogger, Protocol):
    """One arm/replica's log: training steps, evaluation metrics, text."""

    def log_metrics(self, group: str, metrics: Mapping[str, Any], step: int) -> None: ...
    def log_text(self, tag: str, text: str, step: int) -> None: ...
    def close(self) -> None: ...


class RunLogs(Protocol):
    """A family of named runs (one per arm, seed, replica or trial)."""

    def run(self, name: str) -> RunLogger: ...


class TensorBoardRun:
    """A ``RunLogger`` writing TensorBoard event files under ``log_dir``."""

    def __init__(self, log_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log_step(self, record: StepRecord) -> None:
        step = record.step + 1
        self.writer.add_scalar("train/loss", record.loss, step)
        self.writer.add_scalar("train/lr", record.lr, step)
        self.writer.add_scalar("train/grad_norm", record.grad_norm, step)

    def log_metrics(self, group: str, metrics: Mapping[str, Any], step: int) -> None:
        for name, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(f"{group}/{name}", float(value), step)

    def log_text(self, tag: str, text: str, step: int) -> None:
        self.writer.add_text(tag, text, step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()

    def __enter__(self) -> TensorBoardRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TensorBoardLogs:
    """``RunLogs`` under ``root``: ``run(name)`` writes to ``root/name``."""

    def __init__(self, root: Path | str):
        try:
            import tensorboard  # noqa: F401  (SummaryWriter needs it)
        except ImportError:
            raise ConfigError(
                "--tensorboard needs the tensorboard package: pip install -e '.[hf]' "
                "(or pip install tensorboard)"
            ) from None
        self.root = Path(root)

    def run(self, name: str) -> TensorBoardRun:
        return TensorBoardRun(self.root / name)
