"""Two worker processes on one PostgreSQL study: no trial lost or duplicated.

Needs a server: ``LLMEVO_TEST_POSTGRES_URL`` (``.ci/run`` starts PostgreSQL 15 and sets it);
skipped when unset.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter

import pytest
from evolve_support import tiny_plan
from optuna.trial import TrialState

from llmevo.evolve.objective import FINAL_STATES
from llmevo.evolve.study import finished_trials, open_storage, open_study
from llmevo.evolve.workers import build_space, run_workers

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
POSTGRES_URL = os.environ.get("LLMEVO_TEST_POSTGRES_URL")


@pytest.mark.skipif(not POSTGRES_URL, reason="LLMEVO_TEST_POSTGRES_URL is not set")
def test_two_workers_share_one_postgres_study(data_dir, cache_dir):
    plan = tiny_plan(POSTGRES_URL, data_dir, cache_dir, trials=8, workers=2,
                         study=f"pg-{uuid.uuid4().hex[:8]}")
    study = open_study(plan, build_space(plan), open_storage(plan, heartbeat=False))
    run_workers(plan)
    trials = study.get_trials()
    numbers = [t.number for t in trials]
    assert numbers == list(range(len(numbers)))  # each trial number exactly once
    assert all(t.state not in (TrialState.RUNNING, TrialState.WAITING) for t in trials)
    assert all(t.user_attrs.get("state") in FINAL_STATES for t in trials)
    finished = finished_trials(study)
    assert plan.trials <= len(finished) <= plan.trials + plan.workers - 1
    trained = Counter(t.user_attrs["genome_hash"] for t in trials
                      if t.user_attrs.get("state") != "duplicate")
    assert max(trained.values()) == 1  # no genome trained twice
    assert trials[0].user_attrs["role"] == "baseline"
    workers_seen = {t.user_attrs.get("worker") for t in trials}
    assert workers_seen == {0, 1}  # both processes did work
