"""Replacing an artifact: never by one that holds less (a block, the L2 experiment, a seed)
unless asked (``llmevo.artifacts.replacement``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from llmevo.artifacts.replacement import Contents, check_replacement
from llmevo.artifacts.schema import validate_artifact
from llmevo.errors import ArtifactError, ConfigError

REPO = Path(__file__).resolve().parents[2]
TUNED = REPO / "docs/reproductions/2104.09864-rope/metrics/public-quick-tuned-seeds42-46.json"
RELAY = REPO / "docs/foundation-models/2610.21126-rope-relay/metrics/component-cpu-seeds42-44.json"


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _contents(data: dict[str, Any]) -> Contents:
    return Contents.of(validate_artifact(data))


CACHE = {"baseline": {"report_seeds": [42], "tuning": []}}


def test_what_an_artifact_holds():
    tuned = _contents({**_load(TUNED), "cache": CACHE})
    assert {"tuning", "statistics", "verdict", "per_seed"} <= tuned.blocks
    assert "cache" not in tuned.blocks  # which runs came from the arm cache is not evidence
    assert tuned.seeds == frozenset(range(42, 47)) and tuned.experiments == frozenset()
    relay = _contents(_load(RELAY))
    assert relay.experiments == frozenset({"full_experiment"}) and relay.seeds == {42, 43, 44}
    not_run = _load(RELAY)
    not_run["full_experiment"] = {"status": "not_run", "review_done": False}
    assert _contents(not_run).experiments == frozenset()


def _published(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "metrics" / "a.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_less_is_refused_naming_what_would_be_lost(tmp_path):
    data = _load(TUNED)
    path = _published(tmp_path, data)
    fewer = copy.deepcopy(data)
    del fewer["tuning"], fewer["test"]
    fewer["evaluation_protocol"]["seeds"] = [42, 43, 44]
    with pytest.raises(ConfigError) as refused:
        check_replacement(path, _contents(fewer), replace=False)
    message = str(refused.value)
    assert str(path) in message and "--replace" in message and "\n" not in message
    assert "the test and tuning blocks" in message and "seeds 45, 46" in message
    check_replacement(path, _contents(fewer), replace=True)  # asked for: allowed
    relay = _load(RELAY)
    path = _published(tmp_path, relay)
    relay["full_experiment"] = {"status": "not_run", "review_done": False}
    with pytest.raises(ConfigError, match=r"the L2 experiment \(full_experiment\)"):
        check_replacement(path, _contents(relay), replace=False)


def test_as_much_or_more_replaces(tmp_path):
    data = _load(TUNED)
    path = _published(tmp_path, {**data, "cache": CACHE})
    check_replacement(path, _contents(data), replace=False)  # no cache block: the same evidence
    more = copy.deepcopy(data)
    more["evaluation_protocol"]["seeds"] = [42, 43, 44, 45, 46, 47]
    more["extra_block"] = {"new": 1}
    check_replacement(path, _contents(more), replace=False)
    check_replacement(tmp_path / "nothing-there.json", _contents(data), replace=False)


def test_a_file_that_is_not_an_artifact_is_replaced_only_when_asked(tmp_path):
    data = _load(TUNED)
    notes = tmp_path / "notes.json"
    notes.write_text("my notes")
    with pytest.raises(ArtifactError, match="notes.json: not valid JSON.*--replace"):
        check_replacement(notes, _contents(data), replace=False)
    check_replacement(notes, _contents(data), replace=True)
    broken = tmp_path / "broken.json"
    broken.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(ArtifactError, match="broken.json.*--replace"):
        check_replacement(broken, _contents(data), replace=False)


def test_save_artifact_guards_the_replacement_when_asked_between_validating_and_writing(tmp_path):
    """``save_artifact(..., replace=...)``: the guard on the validated artifact, before the write;
    without ``replace`` it writes as it always did (the callers that check earlier)."""
    from llmevo.artifacts.io import save_artifact

    data = _load(TUNED)
    path = _published(tmp_path, data)
    before = path.read_bytes()
    fewer = copy.deepcopy(data)
    fewer["evaluation_protocol"]["seeds"] = [42, 43, 44]  # seeds 45 and 46 would be lost
    with pytest.raises(ConfigError, match="45"):
        save_artifact(fewer, path, replace=False)
    assert path.read_bytes() == before  # refused: nothing written
    broken = {**fewer, "verdict": "not a block"}
    with pytest.raises(ArtifactError):  # validated first: an invalid artifact is refused as such
        save_artifact(broken, path, replace=True)
    assert path.read_bytes() == before
    assert save_artifact(fewer, path, replace=True).evaluation_protocol.seeds == [42, 43, 44]
    assert json.loads(path.read_text())["evaluation_protocol"]["seeds"] == [42, 43, 44]
    path.write_bytes(before)
    save_artifact(fewer, path)  # no guard asked: written
    assert json.loads(path.read_text())["evaluation_protocol"]["seeds"] == [42, 43, 44]
