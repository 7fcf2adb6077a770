"""Per-step training records and where they go (TensorBoard, or any ``StepLogger``; the
experiment trackers, W&B and trackio among them, are ``train.tracking``).

The trainer calls ``logger.log_step(StepRecord(...))`` after every optimizer step; a
caller that trains several arms or replicas opens one named run per arm/replica from a
``RunLogs`` (``logs.run("method-seed42")``) and passes it in, and logs evaluation metrics
on the same run when training is done. ``TensorBoardLogs`` writes one TensorBoard run
directory per name, so the arms' curves overlay under the same tags:

- ``train/loss``, ``train/lr`` (of the first parameter group), ``train/grad_norm`` (the
  total gradient norm before clipping), at global step = optimizer steps done;
- ``<group>/<metric>`` for evaluation metrics (``validation/lm_loss``, ``test/fitness``,
  ``evolve/fitness``), and text entries (an evolved trial's genome).

Post-training or any other loop reuses the same two calls.

The event file is written here, in the caller's thread, through the guarded write path
(``artifacts.io.StreamFile``): records built by ``torch.utils.tensorboard.summary`` and framed
by TensorBoard's ``RecordWriter``, the file format ``SummaryWriter`` writes. ``SummaryWriter``
itself writes from a thread of its own, whose failure (a full disk) prints a traceback of its
own and reaches the caller only at a later call; here a failed write is one ``WriteError``
naming the event file, and the file is removed (half a log is not kept). Each record is
flushed as it is logged, so TensorBoard shows a run while it trains.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from llmevo.artifacts.io import StreamFile
from llmevo.errors import ConfigError

_EVENT_FILE_NUMBERS = itertools.count()  # event files opened by this process


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
    """A ``RunLogger`` writing one TensorBoard event file under ``log_dir``."""

    def __init__(self, log_dir: Path):
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.summary.writer.record_writer import RecordWriter
        from torch.utils.tensorboard.summary import scalar, text

        self._event, self._scalar, self._text = Event, scalar, text
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                f"{os.getpid()}.{next(_EVENT_FILE_NUMBERS):08d}")  # sorts in creation order
        self.file = StreamFile(Path(log_dir) / name)
        self._records = RecordWriter(self.file)
        self._write(self._event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event: Any) -> None:
        self._records.write(event.SerializeToString())
        self.file.flush()

    def _summary(self, summary: Any, step: int) -> None:
        self._write(self._event(wall_time=time.time(), step=step, summary=summary))

    def log_step(self, record: StepRecord) -> None:
        step = record.step + 1
        for tag, value in (("train/loss", record.loss), ("train/lr", record.lr),
                           ("train/grad_norm", record.grad_norm)):
            self._summary(self._scalar(tag, value), step)

    def log_metrics(self, group: str, metrics: Mapping[str, Any], step: int) -> None:
        self.log_metrics_flat({f"{group}/{name}": value for name, value in metrics.items()}, step)

    def log_metrics_flat(self, metrics: Mapping[str, Any], step: int) -> None:
        """Each finite number of ``metrics`` as a scalar under its own tag."""
        for tag, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                self._summary(self._scalar(tag, float(value)), step)

    def log_text(self, tag: str, text: str, step: int) -> None:
        self._summary(self._text(tag, text), step)

    def close(self) -> None:
        self.file.close()

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
