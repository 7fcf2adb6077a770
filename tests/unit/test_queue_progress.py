"""``work_queue.queue_progress``: the launching process's one line on a queue it does not run."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmevo.experiments.work_queue import ITEM_ATTR, open_work_queue, queue_progress

LABELS = dict(enumerate(["rope", "alibi", "gelu"]))


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
    line = queue_progress(url, "table", LABELS, "comparison", _said)
    assert line.startswith("comparisons: 2 of 3 finished; last finished: alibi worse; about ")
    assert line.endswith(" min left at this pace")  # two done: the third at their pace
    assert queue_progress(url, "table", LABELS, "comparison").startswith("comparisons: 2 of 3 finished; about ")


def test_the_time_left_is_the_pace_of_the_finished_items() -> None:
    from datetime import datetime, timedelta

    from optuna.trial import TrialState, create_trial

    from llmevo.experiments.work_queue import _minutes_left

    start = datetime(2026, 12, 6, 2, 0)

    def trial(item: int, minutes: float | None):
        made = create_trial(state=TrialState.COMPLETE if minutes is not None else TrialState.RUNNING,
                            value=0.0 if minutes is not None else None, user_attrs={ITEM_ATTR: item})
        made.datetime_start = start
        made.datetime_complete = None if minutes is None else start + timedelta(minutes=minutes)
        return made

    trials = [trial(0, 10), trial(1, 20), trial(2, None)]
    done = {0: trials[0], 1: trials[1]}
    assert _minutes_left(trials, done, 10) == "80 min"  # 20 min for 2 items: 10 a piece, 8 left
    assert _minutes_left(trials, done, 40) == "6.3 h"  # 38 left
    assert _minutes_left(trials, {0: trials[0]}, 10) is None  # one finished: no pace yet
    assert _minutes_left(trials, done, 2) is None  # nothing left
