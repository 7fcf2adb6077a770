"""Ctrl-C never lands inside a database call (``llmevo.interrupts``, ``runner.storage``), and
the trial an interrupt stopped is failed and retried wherever it landed
(``evolve.objective.fail_interrupted``).

Under load a group Ctrl-C to ``evolve --workers 2`` left trials RUNNING: the interrupt
landed inside a SQLAlchemy session (the workers read every trial while they check for
duplicates), and the interrupted session broke the writes that were to record the trial
(docs/LOG.md, 2026-12-04).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading
import time

import optuna
import pytest
import torch
from optuna.trial import TrialState

from llmevo import interrupts
from llmevo.evolve.objective import fail_interrupted
from llmevo.runner.optuna_private import trial_id
from llmevo.runner.storage import DeferringStorage, open_storage


@pytest.fixture(autouse=True)
def _fresh():
    interrupts.reset()
    yield
    interrupts.reset()


def test_an_interrupt_outside_a_deferred_block_is_raised_at_once():
    with pytest.raises(KeyboardInterrupt):
        interrupts.interrupt()
    assert interrupts.received()


def test_an_interrupt_inside_is_held_until_the_outermost_block_ends():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            with interrupts.deferred():
                interrupts.interrupt()
                reached.append("inner")
            reached.append("outer")  # the inner block's end does not raise
    assert reached == ["inner", "outer"]
    with interrupts.deferred():  # held once: nothing is left pending
        pass


def test_an_error_in_the_block_gives_way_to_the_held_interrupt():
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            interrupts.interrupt()
            raise ValueError("the call failed")


def test_an_allowed_stretch_inside_a_deferred_one_is_interruptible_again():
    """A worker defers Optuna's optimize and allows its objective: an interrupt during the
    objective is raised there (caught by it), one during Optuna's bookkeeping after it waits
    for optimize to return."""
    seen = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():  # optimize
            try:
                with interrupts.allowed():  # the objective
                    interrupts.interrupt()
                    seen.append("not reached")
            except KeyboardInterrupt:
                seen.append("objective")
            interrupts.interrupt()  # Optuna recording the trial: held
            seen.append("recorded")
    assert seen == ["objective", "recorded"]


def test_an_interrupt_held_before_the_allowed_stretch_is_raised_as_it_starts():
    seen = []
    with interrupts.deferred():
        interrupts.interrupt()  # Optuna creating the trial
        try:
            with interrupts.allowed():
                seen.append("not reached")
        except KeyboardInterrupt:
            seen.append("objective")
    assert seen == ["objective"]  # and nothing is left held for the deferred block's end


def test_another_thread_is_never_deferred():
    """Only the main thread receives signals: a heartbeat thread's storage call must not
    count as the main thread's."""
    inside = threading.Event()
    leave = threading.Event()

    def heartbeat() -> None:
        with interrupts.deferred():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=heartbeat)
    thread.start()
    try:
        inside.wait(10)
        with pytest.raises(KeyboardInterrupt):
            interrupts.interrupt()
    finally:
        leave.set()
        thread.join()


@pytest.fixture
def sigint_interrupts():
    """SIGINT handled as the command's handlers do: through ``interrupts.interrupt``."""
    before = signal.signal(signal.SIGINT, lambda _number, _frame: interrupts.interrupt())
    yield
    signal.signal(signal.SIGINT, before)


def test_a_deferred_import_runs_to_its_end_before_the_interrupt(tmp_path, monkeypatch,
                                                                 sigint_interrupts):
    """torch's import runs C++ that calls back into Python: an interrupt raised there aborts
    the process (SIGABRT). A module named to ``defer_imports`` runs to its end first."""
    (tmp_path / "slow_extension.py").write_text(
        "import os, signal\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "for _ in range(1000):\n"  # a signal is handled at the next bytecodes: here
        "    pass\n"
        "open(__file__ + '.finished', 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    interrupts.defer_imports("slow_extension")
    namespace: dict[str, object] = {}
    with pytest.raises(KeyboardInterrupt) as raised:
        exec("import slow_extension", namespace)
    assert (tmp_path / "slow_extension.py.finished").exists()  # its body ran to the end
    assert raised.traceback[-1].name == "__exit__"  # raised as the deferred block ended
    assert not any(str(entry.path).endswith("slow_extension.py") for entry in raised.traceback)


def test_a_signal_during_a_storage_call_waits_for_it(tmp_path, sigint_interrupts):
    """The signal arrives while the trial is being created: the call completes (the trial
    exists, RUNNING, and is remembered as started), the interrupt follows, and the file is
    not left locked (another connection writes at once)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    storage = open_storage(url)
    assert isinstance(storage, DeferringStorage)
    study = optuna.create_study(storage=storage, study_name="s")
    storage.on_start = lambda _trial: os.kill(os.getpid(), signal.SIGINT)  # inside the call
    with pytest.raises(KeyboardInterrupt):
        study.ask()
    [trial] = study.get_trials(deepcopy=False)
    assert trial.state == TrialState.RUNNING and storage.started == [trial_id(trial)]
    with sqlite3.connect(tmp_path / "s.db", timeout=0.5) as connection:
        connection.execute("UPDATE studies SET study_name = study_name")


def test_a_popped_waiting_trial_counts_as_started(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    study = optuna.create_study(storage=storage, study_name="s")
    study.enqueue_trial({"x": 0.5})
    assert storage.started == []  # enqueued: not started
    trial = study.ask()
    assert storage.started == [trial_id(trial)]


def _running(study: optuna.Study, params: dict[str, float], **attrs: object) -> optuna.Trial:
    """A RUNNING trial that drew ``params`` (enqueued, then popped) and holds ``attrs``."""
    study.enqueue_trial(params)
    trial = study.ask()
    for name in params:
        trial.suggest_float(name, 0.0, 1.0)
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    return trial


def test_the_interrupted_trial_is_failed_and_its_genome_enqueued_once(tmp_path):
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 's.db'}"), study_name="s")
    trial = _running(study, {"a": 0.25, "b": 0.5}, role="baseline", parent=None, state="running")
    assert fail_interrupted(study, trial_id(trial), {"a", "b"})
    assert not fail_interrupted(study, trial_id(trial), {"a", "b"})  # once
    interrupted, retry = study.get_trials(deepcopy=False)
    assert interrupted.state == TrialState.FAIL and interrupted.user_attrs["state"] == "interrupted"
    assert retry.state == TrialState.WAITING
    assert retry.system_attrs["fixed_params"] == {"a": 0.25, "b": 0.5}  # what enqueue_trial holds
    assert retry.user_attrs == {"parent": None, "role": "baseline", "retry_of": interrupted.number}


def test_a_trial_without_its_whole_genome_is_failed_but_not_retried(tmp_path):
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 's.db'}"), study_name="s")
    trial = _running(study, {"a": 0.25})
    assert fail_interrupted(study, trial_id(trial), {"a", "b"})
    [only] = study.get_trials(deepcopy=False)
    assert only.state == TrialState.FAIL and only.user_attrs["state"] == "interrupted"


def test_the_objective_marks_the_trial_and_leaves_telling_to_optuna(tmp_path):
    """``tell=False`` (the objective, as the interrupt passes): marked and retried, still
    RUNNING for Optuna to fail; the worker's second call on its way out only fails it."""
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 's.db'}"), study_name="s")
    trial = _running(study, {"a": 0.25})
    assert fail_interrupted(study, trial_id(trial), {"a"}, tell=False)
    assert study.get_trials(deepcopy=False)[0].state == TrialState.RUNNING
    assert fail_interrupted(study, trial_id(trial), {"a"})
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [TrialState.FAIL, TrialState.WAITING]  # one retry, not two


def test_a_finished_trial_is_left_alone(tmp_path):
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 's.db'}"), study_name="s")
    trial = _running(study, {"a": 0.25}, state="complete")
    study.tell(trial, 1.0)
    assert not fail_interrupted(study, trial_id(trial), {"a"})
    [only] = study.get_trials(deepcopy=False)
    assert only.state == TrialState.COMPLETE and only.user_attrs["state"] == "complete"


def test_the_trial_of_a_worker_that_had_to_be_killed_is_failed_by_the_command(tmp_path, data_dir):
    """A worker that did not stop within the grace period is killed; the command fails the
    trial its in-flight slot names, and retries its genome, as the worker would have."""
    from llmevo.evolve import EvolutionSettings
    from llmevo.evolve.study import open_study
    from llmevo.evolve.workers import NO_TRIAL, build_space, fail_in_flight

    plan = EvolutionSettings(preset="smoke", data_dir=data_dir, study="s", promotion="manifest",
                             storage=f"sqlite:///{tmp_path / 's.db'}").plan()
    space = build_space(plan)
    study = open_study(plan, space, open_storage(plan.storage_url))
    trial = study.ask()  # the baseline, popped by a worker that is then killed
    space.suggest(trial)
    fail_in_flight(plan, None, [trial_id(trial), NO_TRIAL])
    killed, retry = study.get_trials(deepcopy=False)
    assert killed.state == TrialState.FAIL and killed.user_attrs["state"] == "interrupted"
    assert retry.state == TrialState.WAITING and retry.user_attrs["retry_of"] == killed.number
    assert retry.user_attrs["role"] == "baseline"


def test_a_ctrl_c_while_the_workers_start_is_received_after_the_starts(sigint_interrupts,
                                                                       monkeypatch):
    """Starting multiprocessing's resource tracker unblocked SIGINT in the command while its
    workers started with it ignored: a Ctrl-C then was thrown away (and the workers, which
    ignore it while they start, trained on until the test's deadline)."""
    import multiprocessing
    import time

    from llmevo.evolve.workers import start_workers, stop_resource_tracker

    stop_resource_tracker()  # the first start launches it, as in a fresh command
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=time.sleep, args=(0,)) for _ in range(2)]
    start, started = spawn.Process.start, []

    def start_then_ctrl_c(process) -> None:
        start(process)
        started.append(process)
        if len(started) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # inside the window, as a terminal's Ctrl-C

    monkeypatch.setattr(spawn.Process, "start", start_then_ctrl_c)  # the class: not pickled
    try:
        with pytest.raises(KeyboardInterrupt):
            start_workers(processes)
        assert all(process.pid is not None for process in processes)  # after both starts
    finally:
        for process in processes:
            if process.pid is not None:
                process.join(30)
        stop_resource_tracker()


def test_an_interrupt_wrapped_by_pydantics_serializer_is_found_in_the_chain():
    """pydantic turns a KeyboardInterrupt raised inside a wrap serializer into a
    PydanticSerializationError (seen when a group Ctrl-C landed in a genome's fingerprint);
    ``wraps_interrupt`` finds it, and says no for an error with no interrupt behind it."""
    from pydantic import BaseModel, model_serializer
    from pydantic_core import PydanticSerializationError

    class Stopped(BaseModel):
        x: int = 1

        @model_serializer(mode="wrap")
        def _stop(self, handler):
            interrupts.reset()
            interrupts.interrupt()  # outside deferred(): raises KeyboardInterrupt here
            return handler(self)

    with pytest.raises(PydanticSerializationError) as caught:
        Stopped().model_dump()
    assert interrupts.wraps_interrupt(caught.value)
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert interrupts.wraps_interrupt(outer)
    assert not interrupts.wraps_interrupt(ValueError("plain"))
    interrupts.reset()


class _Finalized:
    """An object whose finalizer a signal lands in: the handler runs inside ``__del__``."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)
        for _ in range(1000):  # the handler runs at one of these instructions
            pass


@pytest.fixture
def swallowed():
    """SIGINT handled as the command line does (``interrupt()``), and one landing in a
    finalizer: Python's unraisable hook gets it (collected here) and the program goes on."""
    said = []
    previous, unraisable = signal.signal(signal.SIGINT, lambda *_: interrupts.interrupt()), sys.unraisablehook
    sys.unraisablehook = lambda args: said.append(type(args.exc_value))
    try:
        _Finalized()  # dropped at once: its finalizer runs and the interrupt lands inside
        for _ in range(20):
            time.sleep(0.001)  # nothing raised: swallowed
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = unraisable
    assert said == [KeyboardInterrupt] and interrupts.received()
    return said


def test_an_interrupt_a_finalizer_swallowed_stops_the_next_check(swallowed):
    """The lost Ctrl-C: a parallel reproduction trained on past 300 s after a group SIGINT."""
    with pytest.raises(KeyboardInterrupt):
        interrupts.stop_if_received()
    with interrupts.deferred():
        interrupts.stop_if_received()  # inside a deferred block the check waits for its end too


def test_the_check_is_silent_when_nothing_arrived():
    interrupts.stop_if_received()


def _tiny_training(steps: int):
    from llmevo.catalog import build_model, build_optimizer
    from llmevo.model.config import ModelConfig
    from llmevo.train.execution import RunSpec, train_many
    from llmevo.train.trainer import TrainConfig

    config = TrainConfig(steps=steps, batch_size=2, seq_len=16, lr=3e-3)
    stream = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0))
    return lambda path: train_many(lambda: build_model(ModelConfig(d_model=32, n_layers=1)), stream,
                                   [RunSpec(seed, config) for seed in (1, 2)], torch.device("cpu"),
                                   build_optimizer=build_optimizer, path=path, workers=2)


@pytest.mark.parametrize("path", ["sequential", "batched", "parallel"])
def test_training_stops_at_its_next_step_after_a_swallowed_interrupt(swallowed, path):
    import multiprocessing

    train = _tiny_training(steps=200)  # the old code trained them all and returned
    with pytest.raises(KeyboardInterrupt):
        train(path)
    assert not multiprocessing.active_children()  # the parallel path's workers are stopped


def test_training_runs_when_no_interrupt_arrived():
    assert len(_tiny_training(steps=2)("parallel")) == 2
