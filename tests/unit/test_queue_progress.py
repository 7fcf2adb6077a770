"""``work_queue.queue_progress``: the launching process's one line on a queue it does not run."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmevo.experiments.work_queue import ITEM_ATTR, open_work_queue, queue_progress

LABELS = ["rope", "alibi", "gelu"]


def _said(trial) -> str | None:
    outcome = trial.user_attrs.get("outcome")
    return None if outcome is None else f"{outcome['label']} {outcome['classification']}"


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # the test pops trials by hand, not by optimize
def test_a_queue_reads_as_finished_running_and_last(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/queue.db"
    assert queue_progress(url, "table", LABELS, "comparison", _said) is None  # no database yet: not created by us
    assert not (tmp_path / "queue.db").exists()
    study = open_work_queue(url, "table", {"kind": "evidence table"}, [0, 1, 2], 5, 20)
    assert queue_progress(url, "other", LABELS, "comparison", _said) is None  # no such study
    assert queue_progress(url, "table", LABELS, "comparison", _said) == "comparisons: 0 of 3 finished"

    first = study.ask()  # pops the lowest waiting trial: item 0
    assert first.user_attrs[ITEM_ATTR] == 0
    assert queue_progress(url, "table", LABELS, "comparison", _said) == "comparisons: 0 of 3 finished; running: rope"
    second = study.ask()
    first.set_user_attr("outcome", {"label": "rope", "classification": "better"})
    study.tell(first, 0.0)
    assert queue_progress(url, "table", LABELS, "comparison", _said) == (
        "comparisons: 1 of 3 finished; running: alibi; last finished: rope better")
    second.set_user_attr("outcome", {"label": "alibi", "classification": "worse"})
    study.tell(second, 0.0)
    assert queue_progress(url, "table", LABELS, "comparison", _said) == (
        "comparisons: 2 of 3 finished; last finished: alibi worse")
    assert queue_progress(url, "table", LABELS, "comparison") == "comparisons: 2 of 3 finished"
