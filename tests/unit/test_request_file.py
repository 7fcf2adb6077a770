"""Issue 47: each knob declared once (the options are the sections' fields), refusals by
declaration (the same text from Python and the command line), and the experiment file (the
request's serialized form; the evidence table's rows are files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main

from llmevo.cli import commands
from llmevo.cli.common import parse_set
from llmevo.errors import ConfigError
from llmevo.experiments import EvidenceRequest, LadderRequest, ReproductionRequest
from llmevo.experiments.evidence import EXPERIMENTS, evidence_entries
from llmevo.experiments.sections import (
    LaunchSection,
    PostTrainingSection,
    RunSection,
    SizeSection,
    TrainingSection,
    TuningSection,
    experiment_of,
    experiment_toml,
    read_experiment,
)

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = (RunSection, TrainingSection, TuningSection, SizeSection, PostTrainingSection, LaunchSection)


def _params(command: str) -> dict:
    group = typer.main.get_command(commands())
    return {param.name: param for param in group.commands[command].params}


def test_every_section_field_is_an_option_of_reproduce_with_its_description_as_help():
    params = _params("reproduce")
    for section in SECTIONS:
        for name, info in section.model_fields.items():
            if name in {"command", "repo_root", "cache_dir"}:  # provenance, $LLMEVO_CACHE
                assert name not in params
                continue
            assert name in params, name
            assert info.description and params[name].help.startswith(info.description), name
    assert "set_" in params


def test_set_reaches_a_field_of_any_section_and_the_request_itself():
    assert parse_set("train.lr=3e-3", ReproductionRequest) == ("lr", 3e-3)
    assert parse_set("tuning.tune_grid=1e-3,3e-3", ReproductionRequest) == ("tune_grid", [1e-3, 3e-3])
    assert parse_set("tuning.tune_grid=[1e-3, 3e-3]", ReproductionRequest) == ("tune_grid", [1e-3, 3e-3])
    assert parse_set("train.schedule=wsd", ReproductionRequest) == ("schedule", "wsd")
    assert parse_set("margin=2", ReproductionRequest) == ("margin", 2)
    for bad, said in (("train.nope=1", "no field 'nope'"), ("trian.lr=1", "no section 'trian'"),
                      ("lr", "expected SECTION.FIELD=VALUE"),
                      ("post_training.post_steps=1", "no section 'post_training'")):
        with pytest.raises(ConfigError, match=said):
            parse_set(bad, EvidenceRequest if bad.startswith("post_training") else ReproductionRequest)


@pytest.mark.parametrize(("given", "said"), [
    ({"weight_decay": 0.2}, "--all runs the whole table; --weight-decay applies to one comparison"),
    ({"param": "mup"}, "--all runs the whole table; --param applies to one comparison"),
    ({"arm_cache": False}, "--all runs the whole table; --no-arm-cache applies to one comparison"),
    ({"post_steps": 3, "val_every": 5}, "--all runs the whole table; --post-steps, --val-every applies"),
])
def test_the_table_refuses_what_it_does_not_take_from_python_as_from_the_command_line(given, said, capsys):
    with pytest.raises(ConfigError) as refused:
        EvidenceRequest(data_dir=Path("."), **given)
    assert said in str(refused.value)
    EvidenceRequest(data_dir=Path("."), weight_decay=None, post_steps=None)  # a default asks for nothing


def test_a_ladder_refuses_what_it_does_not_take_and_receives_the_training_section(tmp_path):
    with pytest.raises(ConfigError, match="--steps does not apply here: each rung's steps follow its size"):
        LadderRequest(name="rope", data_dir=tmp_path, steps=3)
    ladder = LadderRequest(name="rope", rungs=[-1, 0], data_dir=tmp_path, weight_decay=0.05, tune_noise=2.0)
    rung = ladder.rung_request(0, -1, tmp_path)
    assert rung.train == ladder.train and rung.tuning.tune_noise == 2.0 and rung.tuning.tune is True
    assert rung.size.rung == -1 and rung.size.param == ladder.size.param


def test_the_experiments_folder_is_exactly_the_published_table():
    """One file per row of the published family (the leaderboard's Holm rows), nothing else."""
    board = json.loads((ROOT / "docs" / "LEADERBOARD.json").read_text())
    published = {(row["name"], row["against"]) for row in board["rows"] if row.get("holm") is not None}
    rows = {(entry.name, entry.against) for entry in evidence_entries()}
    assert rows == published
    assert len(list(EXPERIMENTS.glob("*.toml"))) == len(published)
    # each row is itself a reproduction of record: quick, tuned (optimizers over their space)
    for path in EXPERIMENTS.glob("*.toml"):
        request = ReproductionRequest(**read_experiment(path, ReproductionRequest), data_dir=Path("."))
        assert request.preset == "quick" and request.tuning.tune is True


def test_an_experiment_file_is_the_request_serialized(tmp_path):
    request = ReproductionRequest(name="muon", preset="quick", seeds=[42, 43], data_dir=tmp_path, threads=1,
                                  lr=2e-3, schedule="wsd", wsd_decay=0.3, tune_space="lr", tune_trials=4,
                                  rung=-1, margin=2.0)
    text = experiment_toml(experiment_of(request))
    assert "data_dir" not in text and "[train]" in text and "[size]" in text
    path = tmp_path / "muon.toml"
    path.write_text(text)
    again = ReproductionRequest(**read_experiment(path, ReproductionRequest), data_dir=tmp_path)
    assert again.model_dump() == request.model_dump()
    path.write_text("name = 'rope'\n[nope]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"\[nope\] is no section of ReproductionRequest"):
        read_experiment(path, ReproductionRequest)


def test_no_request_declares_a_shared_section_field_itself():
    """A knob is declared once: a request's own fields never restate a section's."""
    from llmevo.evolve import EvolutionSettings

    shared = {name for section in SECTIONS for name in section.model_fields}
    for request in (ReproductionRequest, LadderRequest, EvidenceRequest, EvolutionSettings):
        own = set(request.model_fields) - set(request.sections())
        assert not own & shared, (request.__name__, own & shared)
