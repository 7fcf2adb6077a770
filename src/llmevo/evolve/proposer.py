"""An external proposer: a command that sees the study's history and answers the next genome.

``llmevo evolve --proposer CMD`` replaces the sampler, and only the sampler: a person's
script or an LLM agent chooses which genome the study trains next, while the budget
(``--trials``), the trial's training, hurdles, duplicate check, rescoring, the champion's
selection and the final tuned comparison stay llmevo's. A proposer cannot buy a result with
extra runs: every answer that is a genome costs one trial of the budget, trained or not.

**A call.** Before each trial that the study still needs (and that no waiting trial, the
baseline or a retried one, fills), the command runs once, in its own process group, in the
command's working directory. It receives one JSON object (``REQUEST_SCHEMA``) on stdin, and
in a file when the command holds ``{request}`` (replaced by the file's path; ``{python}`` is
this interpreter)::

    {"schema": "llmevo.proposer/1", "study": "...",
     "objective": {"metric": "fitness", "split": "validation", "direction": "maximize", ...},
     "budget": {"trials": 8, "finished": 3, "remaining": 5},
     "space": {"slots": {slot: [component, ...]}, "genes": {gene: distribution},
               "component_genes": {slot: {component: [gene, ...]}},
               "parameter_budget": [min, max], "baseline_parameters": n},
     "baseline": {"genome": {...}, "params": {...}},
     "trials": [{"number", "state", "chosen_by", "genome", "params", "genome_hash", "label",
                 "fitness", "fitness_per_seed", "score", "parameters", "error",
                 "duplicate_of", "note"}, ...],
     "attempt": 1, "previous_error": null}

``state`` is complete, pruned, diverged, failed, invalid, duplicate, running, waiting or lost
(interrupted or killed; not counted, retried); ``fitness`` is the validation fitness of a
complete trial (higher is better). The genes' distributions are Optuna's JSON.

**An answer** is the last non-empty line of its stdout (lines before it are free for logs),
one JSON object of one of these forms:

- ``{"stop": true}``: the search ends here (the budget not spent); the champion is chosen
  and compared as after any search. Asked again when the same command is run again;
- a genome in the format ``reproduce --genome`` takes (``{"model": ..., "optimizer": ...,
  "train": ...}``), or ``{"genome": <that>}``;
- ``{"params": {gene: value, ...}}``: the genome as genes (the history's ``params``).

Beside ``genome`` or ``params``: ``"note"`` (text kept on the trial, 500 characters) and
``"parent"`` (a trial number of the history, for the champion's lineage).

**A bad answer** is one of two kinds. *Out of the space* (the answer is a genome, but not a
valid one, or a component, gene value or setting outside the space; the parameter budget is
judged by the trial as for a sampled genome): the trial is recorded as ``invalid`` with the
reason, nothing trains, it counts toward ``--trials`` as any invalid genome does, and the
proposer sees it in the next history. *Broken* (the command cannot start, exits nonzero,
outlives ``timeout``, whose process group is then killed, or answers no JSON object of these
forms): no trial; the proposer is asked again with ``previous_error`` set, and after
``ATTEMPTS`` broken answers in a row the command stops with one line and exit status 2. The
study keeps its finished trials, nothing is left running or waiting, no report is written:
fix the proposer and run the same command again.

**Record.** Each trial stores ``chosen_by`` (``proposer``) and ``proposer`` (the identity),
and the study stores every call (``CALLS_ATTR``) and every proposer that answered
(``PROPOSERS_ATTR``: its command and the sha256 of each file the command names); the
report's ``summary.json`` has them under ``proposer`` with the budget accounting.

Public API: ``resolve_proposer``, ``Proposing``, ``proposer_summary``,
``parse_answer``, ``Answer``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import distribution_to_json
from optuna.trial import FrozenTrial, TrialState
from pydantic import ValidationError

from llmevo.digests import sha256_file
from llmevo.errors import ConfigError, LlmevoError
from llmevo.evolve.plan import ProposerSpec
from llmevo.evolve.sampler import LOST_STATES
from llmevo.evolve.space import SearchSpace
from llmevo.evolve.study import finished_trials
from llmevo.experiments.experiment_file import kill_group, last_line
from llmevo.runner.genome import Genome

REQUEST_SCHEMA = "llmevo.proposer/1"
ATTEMPTS = 3  # broken answers in a row before the command stops
DEFAULT_TIMEOUT = 600.0  # seconds per call (an LLM agent may think for minutes)
NOTE_CHARS = 500
KEPT_GENOME_CHARS = 20_000  # an invalid genome longer than this is not stored on its trial
CALLS_ATTR = "llmevo:proposer_calls"
PROPOSERS_ATTR = "llmevo:proposers"
PYTHON_TOKEN = "{python}"
REQUEST_TOKEN = "{request}"
GENOME_KEYS = frozenset(Genome.model_fields)


class BrokenAnswer(LlmevoError):
    """A call that gave no usable answer (start, exit status, timeout, no JSON object)."""


def resolve_proposer(command: str, timeout: float, cwd: Path) -> ProposerSpec:
    """``command`` split as a shell would (no shell runs it); a word naming a file (relative
    to ``cwd``) is hashed. An empty or unparsable command is a ConfigError."""
    try:
        argv = tuple(shlex.split(command))
    except ValueError as error:
        raise ConfigError(f"--proposer {command!r}: cannot split it into words ({error})") from None
    if not argv:
        raise ConfigError("--proposer: empty command; give the command that answers the next genome")
    if not timeout > 0:
        raise ConfigError(f"--proposer-timeout {timeout:g}: expected seconds > 0")
    check_startable(argv, cwd)
    files = {}
    for word in argv:
        path = cwd / word
        if word not in (PYTHON_TOKEN, REQUEST_TOKEN) and path.is_file():
            files[word] = sha256_file(path)
    identity = hashlib.sha256(json.dumps({"argv": argv, "files": files}, sort_keys=True)
                              .encode()).hexdigest()
    return ProposerSpec(argv=argv, files=files, identity=identity, timeout=float(timeout), cwd=cwd)


PLACEHOLDER = re.compile(r"\{[A-Za-z_]+\}")
PYTHON_ARGUMENT_OPTIONS = frozenset({"-W", "-X", "-Q"})  # python options that take the next word


def check_startable(argv: Sequence[str], cwd: Path) -> None:
    """Before any work (a missing proposer was found only after the baseline trial trained):
    only the two placeholders, the program found (on PATH, or the file a path names,
    executable), and the script ``{python}`` runs there (its first word that is not an option,
    unless ``-c`` or ``-m`` comes first)."""
    for word in argv:
        for token in PLACEHOLDER.findall(word):
            if token not in (PYTHON_TOKEN, REQUEST_TOKEN):
                raise ConfigError(f"--proposer: unknown placeholder {token}; the known ones are "
                                  f"{PYTHON_TOKEN} (this interpreter) and {REQUEST_TOKEN} (the request file)")
    program = argv[0]
    if REQUEST_TOKEN in program:
        raise ConfigError(f"--proposer: {REQUEST_TOKEN} is the request file's path, not a program; "
                          f"e.g. '{PYTHON_TOKEN} my_proposer.py {REQUEST_TOKEN}'")
    if program == PYTHON_TOKEN:
        words = iter(argv[1:])
        for word in words:
            if word in PYTHON_ARGUMENT_OPTIONS:
                next(words, None)
            elif word.startswith(("-c", "-m")):
                return
            elif word != "-" and not word.startswith("-"):
                if REQUEST_TOKEN not in word and not (cwd / word).is_file():
                    raise ConfigError(f"--proposer: the script {word} is not a file (looked in {cwd})")
                return
        # no script: python would run the request on its stdin as a program
        raise ConfigError(f"--proposer {shlex.join(argv)}: {PYTHON_TOKEN} needs a script (or -c/-m); "
                          f"e.g. '{PYTHON_TOKEN} my_proposer.py'")
    if os.sep in program:
        path = cwd / program
        if not path.is_file():
            raise ConfigError(f"--proposer: {program} is not a file (looked in {cwd})")
        if not os.access(path, os.X_OK):
            raise ConfigError(f"--proposer: {program} is not executable; chmod +x it, or run it "
                              f"as '{PYTHON_TOKEN} {program}'")
    elif shutil.which(program) is None:
        raise ConfigError(f"--proposer: no program {program!r} on PATH")


@dataclass(frozen=True)
class Answer:
    """A parsed answer: ``stop``, or ``params`` (a point of the space), or ``invalid`` (why
    the genome it gave is out of the space, with the genome when it parsed)."""

    stop: bool = False
    params: dict[str, Any] | None = None
    invalid: str | None = None
    genome: dict[str, Any] | None = None
    note: str | None = None
    parent: int | None = None


def call(spec: ProposerSpec, request: dict[str, Any]) -> str:
    """Run the proposer once on ``request``: the last non-empty line of its stdout, or
    ``BrokenAnswer`` (cannot start, exit status, timeout: its process group killed)."""
    text = json.dumps(request)
    with tempfile.TemporaryDirectory(prefix="llmevo-proposer-") as scratch:
        request_file = Path(scratch) / "request.json"
        request_file.write_text(text, encoding="utf-8")
        argv = [sys.executable if word == PYTHON_TOKEN else word.replace(REQUEST_TOKEN, str(request_file))
                for word in spec.argv]
        try:
            process = subprocess.Popen(argv, cwd=spec.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, errors="replace",
                                       start_new_session=True)
        except OSError as error:
            raise BrokenAnswer(f"cannot start {argv[0]}: {error.strerror or error}") from None
        try:
            stdout, stderr = process.communicate(text, timeout=spec.timeout)
        except subprocess.TimeoutExpired:
            kill_group(process)
            raise BrokenAnswer(f"no answer within {spec.timeout:g} s (process group killed)") from None
        except BaseException:  # an interrupt: leave no proposer behind
            kill_group(process)
            raise
    if process.returncode != 0:
        last = last_line(stderr) or last_line(stdout)
        raise BrokenAnswer(f"exit status {process.returncode}" + (f": {last.strip()[:160]}" if last else ""))
    return last_line(stdout)


def parse_answer(line: str, space: SearchSpace, numbers: set[int]) -> Answer:
    """An answer line read against the space and the history's trial ``numbers``:
    ``BrokenAnswer`` when it is none of the forms, an ``Answer`` otherwise (``invalid`` set
    when it is a genome out of the space)."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        raise BrokenAnswer(f"the last stdout line is not JSON: {line.strip()[:80]!r}") from None
    if not isinstance(value, dict):
        raise BrokenAnswer(f"the answer is JSON but not an object: {line.strip()[:80]!r}")
    if value.get("stop") is True:
        if set(value) - {"stop", "reason", "note"}:
            raise BrokenAnswer(f"a stop answer with other keys: {', '.join(sorted(value))}")
        return Answer(stop=True, note=_note(value))
    if GENOME_KEYS & set(value) and "genome" not in value and "params" not in value:
        value = {"genome": value}  # a bare genome
    forms = [key for key in ("genome", "params") if key in value]
    if len(forms) != 1:
        raise BrokenAnswer('expected {"stop": true}, a genome, {"genome": ...} or {"params": ...}; '
                           f"got keys {', '.join(sorted(value)) or 'none'}")
    extra = sorted(set(value) - {forms[0], "note", "parent"})
    if extra:
        raise BrokenAnswer(f"unknown key{'s' if len(extra) > 1 else ''} {', '.join(extra)} beside "
                           f"'{forms[0]}' (allowed: note, parent)")
    parent = value.get("parent")
    if parent is not None and (isinstance(parent, bool) or not isinstance(parent, int)
                               or parent not in numbers):
        raise BrokenAnswer(f"parent {parent!r} is not a trial number of the history")
    note = _note(value)
    given = value[forms[0]]
    if not isinstance(given, dict):
        return Answer(invalid=f"{forms[0]} is {type(given).__name__}, not an object", note=note,
                      parent=parent)
    if forms[0] == "params":
        reason = space.outside(given)
        if reason is not None:
            return Answer(invalid=reason, note=note, parent=parent)
        return Answer(params=dict(given), note=note, parent=parent)
    try:
        genome = Genome.from_json(given)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "genome"
        return Answer(invalid=f"not a genome ({where}: {first['msg']})", genome=given, note=note,
                      parent=parent)
    try:
        params = space.genome_params(genome)
    except ConfigError as error:
        return Answer(invalid=str(error), genome=given, note=note, parent=parent)
    return Answer(params=params, note=note, parent=parent)


def _note(value: dict[str, Any]) -> str | None:
    note = value.get("note", value.get("reason"))
    return None if note is None else str(note)[:NOTE_CHARS]


def _state(trial: FrozenTrial) -> str:
    state = trial.user_attrs.get("state")
    if trial.state == TrialState.FAIL and state in LOST_STATES:
        return "lost"
    if trial.state == TrialState.WAITING:
        return "waiting"
    if state is None:
        return trial.state.name.lower()
    return str(state)


def chosen_by(trial: FrozenTrial) -> str:
    """Who chose a trial's genome: ``baseline``, ``proposer`` or ``sampler``."""
    attrs = trial.user_attrs
    return str(attrs.get("chosen_by") or ("baseline" if attrs.get("role") == "baseline" else "sampler"))


def history(study: optuna.Study, space: SearchSpace) -> list[dict[str, Any]]:
    """Every trial of the study as a proposer sees it (see the module docstring)."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        params = dict(trial.params) or None
        if params is None and trial.state == TrialState.WAITING:
            params = trial.system_attrs.get("fixed_params")
        rows.append({
            "number": trial.number,
            "state": _state(trial),
            "chosen_by": chosen_by(trial),
            "genome": attrs.get("genome"),
            "params": params,
            "genome_hash": attrs.get("genome_hash"),
            "label": attrs.get("label"),
            "fitness": trial.value if trial.state == TrialState.COMPLETE else None,
            "fitness_per_seed": attrs.get("fitness_per_seed"),
            "score": attrs.get("score"),
            "parameters": attrs.get("parameters"),
            "error": attrs.get("error"),
            "duplicate_of": attrs.get("duplicate_of"),
            "note": attrs.get("note"),
        })
    return rows


def describe_space(space: SearchSpace) -> dict[str, Any]:
    described = space.describe()
    component_genes: dict[str, dict[str, list[str]]] = {}
    for (slot, name), genes in space.component_genes.items():
        if genes:
            component_genes.setdefault(slot, {})[name] = list(genes)
    return {"slots": {slot: list(names) for slot, names in space.components.items()},
            "genes": {name: json.loads(distribution_to_json(distribution))
                      for name, distribution in space.genes.items()},  # the data slot's too
            "component_genes": component_genes,
            "parameter_budget": described["parameter_budget"],
            "baseline_parameters": described["baseline_parameters"]}


class Proposing:
    """The proposer's side of one worker's loop: ``step(study, finished)`` asks for the next
    genome and either enqueues it (True), records it as an invalid trial (True) or ends the
    search on a stop (False); ``ATTEMPTS`` broken answers in a row raise ConfigError."""

    def __init__(self, spec: ProposerSpec, space: SearchSpace, trials: int,
                 log: Callable[[str], None] = lambda _: None,
                 clock: Callable[[], float] = time.perf_counter):
        self.spec = spec
        self.space = space
        self.trials = trials
        self.log = log
        self.clock = clock
        self.registered = False

    def request(self, study: optuna.Study, finished: int, attempt: int,
                previous_error: str | None) -> dict[str, Any]:
        return {
            "schema": REQUEST_SCHEMA,
            "study": study.study_name,
            "objective": {"metric": "fitness", "split": "validation", "direction": "maximize",
                          "what": "the trial's validation fitness (higher is better); the champion "
                                  "is the best rescored trial and is then compared with the "
                                  "baseline by llmevo's tuned final comparison"},
            "budget": {"trials": self.trials, "finished": finished,
                       "remaining": max(0, self.trials - finished)},
            "space": describe_space(self.space),
            "baseline": {"genome": self.space.baseline.model_dump(mode="json"),
                         "params": self.space.to_params(self.space.baseline)},
            "trials": history(study, self.space),
            "attempt": attempt,
            "previous_error": previous_error,
        }

    def _register(self, study: optuna.Study) -> None:
        if self.registered:
            return
        known = dict(study.user_attrs.get(PROPOSERS_ATTR) or {})
        if self.spec.identity not in known:
            known[self.spec.identity] = {"command": list(self.spec.argv), "files": dict(self.spec.files)}
            study.set_user_attr(PROPOSERS_ATTR, known)
        self.registered = True

    def _record_call(self, study: optuna.Study, record: dict[str, Any]) -> None:
        calls = list(study.user_attrs.get(CALLS_ATTR) or [])
        calls.append({"proposer": self.spec.identity[:16], **record})
        study.set_user_attr(CALLS_ATTR, calls)

    def step(self, study: optuna.Study, finished: int) -> bool:
        self._register(study)
        previous: str | None = None
        for attempt in range(1, ATTEMPTS + 1):
            started = self.clock()
            numbers = {trial.number for trial in study.get_trials(deepcopy=False)}
            try:
                line = call(self.spec, self.request(study, finished, attempt, previous))
                answer = parse_answer(line, self.space, numbers)
            except BrokenAnswer as broken:
                previous = str(broken)
                self._record_call(study, {"finished": finished, "outcome": "broken", "error": previous,
                                          "seconds": round(self.clock() - started, 3), "trial": None})
                self.log(f"proposer: broken answer {attempt} of {ATTEMPTS}: {previous}")
                continue
            seconds = round(self.clock() - started, 3)
            if answer.stop:
                self._record_call(study, {"finished": finished, "outcome": "stop", "error": None,
                                          "seconds": seconds, "trial": None, "note": answer.note})
                self.log(f"proposer: stop after {finished} of {self.trials} trials")
                return False
            attrs = {"parent": answer.parent, "role": None, "chosen_by": "proposer",
                     "proposer": self.spec.identity[:16], "note": answer.note}
            if answer.params is None:  # out of the space: an invalid trial, nothing trains
                number = self._record_invalid(study, answer, attrs)
                self._record_call(study, {"finished": finished, "outcome": "out_of_space",
                                          "error": answer.invalid, "seconds": seconds, "trial": number})
                self.log(f"trial {number}: invalid (proposer): {answer.invalid}")
                return True
            study.enqueue_trial(answer.params, user_attrs=attrs)
            waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            self._record_call(study, {"finished": finished, "outcome": "genome", "error": None,
                                      "seconds": seconds, "trial": max(t.number for t in waiting)})
            return True
        raise ConfigError(
            f"the proposer gave {ATTEMPTS} broken answers in a row (last: {previous}); the study "
            f"keeps its {finished} finished trial(s) of {self.trials}: fix the proposer and run "
            "the same command again")

    def _record_invalid(self, study: optuna.Study, answer: Answer, attrs: dict[str, Any]) -> int:
        genome_attrs: dict[str, Any] = {}
        if answer.genome is not None and len(json.dumps(answer.genome)) <= KEPT_GENOME_CHARS:
            genome_attrs["genome"] = answer.genome
            try:
                genome = Genome.from_json(answer.genome)
                genome_attrs.update(genome_hash=genome.hash(), label=genome.label())
            except ValidationError:
                pass
        before = {trial.number for trial in study.get_trials(deepcopy=False)}
        study.add_trial(optuna.trial.create_trial(
            state=TrialState.FAIL,
            user_attrs={**attrs, **genome_attrs, "state": "invalid",
                        "error": f"out of the space: {answer.invalid}"[:500]}))
        added = [t.number for t in study.get_trials(deepcopy=False) if t.number not in before]
        return max(added)


def proposer_summary(study: optuna.Study, spec: ProposerSpec | None,
                     trials: int) -> dict[str, Any] | None:
    """The report's ``proposer`` block: who proposed (this run's proposer and every one that
    answered in this study), its calls by outcome, and what its genomes cost of the budget
    (trials by state, training runs); None for a study no proposer ever answered."""
    calls = list(study.user_attrs.get(CALLS_ATTR) or [])
    if spec is None and not calls:
        return None
    chosen = [t for t in study.get_trials(deepcopy=False) if chosen_by(t) == "proposer"]
    states: dict[str, int] = {}
    runs = 0
    for trial in chosen:
        state = _state(trial)
        states[state] = states.get(state, 0) + 1
        grid = trial.user_attrs.get("lr_grid")
        seeds = trial.user_attrs.get("seeds") or []
        if seeds:  # trained: its lr grid (or one lr) under the search seed, then rescoring seeds
            runs += (len(grid) if grid else 1) + len(seeds) - 1
    outcomes: dict[str, int] = {}
    for record in calls:
        outcomes[record["outcome"]] = outcomes.get(record["outcome"], 0) + 1
    finished = len(finished_trials(study))
    return {
        **(spec.describe() if spec is not None else {}),
        **({"timeout_s": spec.timeout, "attempts": ATTEMPTS} if spec is not None else {}),
        "proposers": study.user_attrs.get(PROPOSERS_ATTR) or {},
        "calls": {"total": len(calls), **outcomes,
                  "seconds": round(sum(record.get("seconds", 0.0) for record in calls), 3)},
        "stopped": bool(calls) and calls[-1]["outcome"] == "stop",
        "trials_chosen": len(chosen),
        "trial_states": dict(sorted(states.items())),
        "training_runs": runs,
        "budget": {"trials": trials, "finished": finished},
        "call_log": calls,
    }
