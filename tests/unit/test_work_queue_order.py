"""``work_queue.run_work_queue``: a worker whose popped item needs one another worker is still
running runs a waiting item that could start at once, instead of idling until the other ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmevo.errors import ConfigError
from llmevo.experiments.work_queue import ITEM_ATTR, RELEASED_ATTR, open_work_queue, run_work_queue


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # the other worker's trial is popped by hand
def test_a_blocked_item_goes_back_while_a_ready_one_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/queue.db"
    # 1 needs 0 (an arm they share); 2 needs nothing
    study = open_work_queue(url, "table", {"kind": "evidence table"}, [0, 1, 2], 5, 3600)
    other = study.ask()  # another worker holds item 0
    assert other.user_attrs[ITEM_ATTR] == 0
    order: list[int] = []

    def run(item: int, dependencies: dict) -> dict:
        order.append(item)
        if item == 2:  # while this worker runs 2, the other worker finishes 0
            study.tell(other, 0.0)
        if item == 1:
            assert list(dependencies) == [0]
        return {"ran": item}

    done = run_work_queue(study, [0, 1, 2], {0: [], 1: [0], 2: []}, run, grace_period=3600,
                          poll_seconds=0.05, wait_timeout=5, noun="comparison")
    assert order == [2, 1]  # 1 popped first, put back behind 2; run once 0 was complete
    assert sorted(done) == [0, 1, 2] and done[1].user_attrs["ran"] == 1
    released = [t.user_attrs[RELEASED_ATTR] for t in study.get_trials() if RELEASED_ATTR in t.user_attrs]
    assert released == ["comparison 0 still running; comparison 2 could run at once"]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_blocked_item_with_nothing_else_ready_waits(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/queue.db"
    # 2 needs 0 as well: nothing this worker could run while 0 runs elsewhere
    study = open_work_queue(url, "table", {"kind": "evidence table"}, [0, 1, 2], 5, 3600)
    study.ask()  # another worker holds item 0 and never finishes
    order: list[int] = []
    with pytest.raises(ConfigError, match="waited 0.5 s for comparison"):
        run_work_queue(study, [0, 1, 2], {0: [], 1: [0], 2: [0]}, lambda item, _: order.append(item) or {},
                       grace_period=3600, poll_seconds=0.05, wait_timeout=0.5, noun="comparison")
    assert order == []
    assert not any(RELEASED_ATTR in t.user_attrs and "could run" in t.user_attrs[RELEASED_ATTR]
                   for t in study.get_trials())
