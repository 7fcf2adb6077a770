"""A rich progress bar for training runs (implements ``llmevo.train.trainer.Progress``)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class RichTrainingProgress:
    def __init__(self, console: Console):
        self.console = console
        self._progress: Progress | None = None
        self._task = None

    def start(self, total: int, description: str) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.4f}"),
            TextColumn("{task.fields[rate]:,.0f} tok/s"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._progress.start()
        # escaped: arm names such as llama_modern[position=rope] are not rich markup
        self._task = self._progress.add_task(escape(description), total=total, loss=float("nan"),
                                             rate=0.0)

    def update(self, step: int, loss: float, tokens_per_second: float) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=step, loss=loss, rate=tokens_per_second)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
