"""An external proposer's answers read against the space, its command resolved, and the
options it replaces refused (``llmevo.evolve.proposer``; the runs: integration tests)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.evolve import EvolutionSettings
from llmevo.evolve.proposer import BrokenAnswer, parse_answer, resolve_proposer
from llmevo.evolve.space import build_search_space
from llmevo.runner.presets import get_preset


@pytest.fixture(scope="module")
def space():
    return build_search_space(full_registry(), get_preset("smoke"))


@pytest.fixture(scope="module")
def base(space):
    return space.to_params(space.baseline)


def _line(value) -> str:
    return json.dumps(value)


def test_a_stop_a_genome_and_params_are_read(space, base):
    assert parse_answer(_line({"stop": True, "reason": "enough"}), space, {0}).stop
    genome = space.to_genome({**base, "attention.mha.kv_heads": 2}).model_dump(mode="json")
    for answer in (genome, {"genome": genome, "note": "fewer kv heads", "parent": 0}):
        read = parse_answer(_line(answer), space, {0})
        assert read.invalid is None and read.params["attention.mha.kv_heads"] == 2
        assert space.to_genome(read.params).model_dump(mode="json") == genome
    read = parse_answer(_line({"params": {**base, "train.lr": 1e-3}, "note": "x" * 900}), space, {0})
    assert read.params["train.lr"] == 1e-3 and len(read.note) == 500
    # the baseline as the whole genome llmevo gave it: a point of the space
    whole = parse_answer(_line(space.baseline.model_dump(mode="json")), space, set())
    assert whole.params == base


@pytest.mark.parametrize(("answer", "reason"), [
    ("unknown-component", "attention 'no_such_attention' is not in the space (there: mha)"),
    ({"params": {"attention": "mha"}}, "no component for slot 'position'"),
    ("drop-gene", "no value for gene attention.mha.kv_heads"),
    ("extra-gene", "position.learned.theta is not a gene"),
    ("lr-out", "gene train.lr = 1.0 is outside"),
    ("kv-out", "gene attention.mha.kv_heads = 3 is outside"),
    ("wider", "the genome sets what no gene of the space holds (model.d_model: 128"),
    ("non-gene-key", "model.position.config.scale"),
    ("config-missing", "no value for gene position.rope.theta"),
    ({"genome": {"model": {}}}, "not a genome (optimizer: Field required)"),
    ({"params": [1, 2]}, "params is list, not an object"),
])
def test_an_answer_out_of_the_space_is_an_invalid_trial_with_its_reason(space, base, answer, reason):
    genome = space.baseline.model_dump(mode="json")
    made = {
        "unknown-component": {"params": {**base, "attention": "no_such_attention"}},
        "drop-gene": {"params": {k: v for k, v in base.items() if k != "attention.mha.kv_heads"}},
        "extra-gene": {"params": {**base, "position.learned.theta": 1.0}},
        "lr-out": {"params": {**base, "train.lr": 1.0}},
        "kv-out": {"params": {**base, "attention.mha.kv_heads": 3}},
        "wider": {"genome": {**genome, "model": {**genome["model"], "d_model": 128}}},
        "non-gene-key": {"genome": {**genome, "model": {**genome["model"], "position": {
            "name": "rope", "config": {**genome["model"]["position"]["config"], "scale": 2}}}}},
        "config-missing": {"genome": {**genome, "model": {**genome["model"], "position": {
            "name": "rope", "config": {"rotary_dim": None}}}}},
    }
    read = parse_answer(_line(made.get(answer, answer) if isinstance(answer, str) else answer),
                        space, {0})
    assert read.params is None and not read.stop
    assert reason in read.invalid


@pytest.mark.parametrize(("line", "message"), [
    ("sure, here is a genome", "not JSON"),
    ("[1, 2]", "not an object"),
    ('{"stop": true, "params": {}}', "a stop answer with other keys"),
    ('{"genom": {}}', "expected {\"stop\": true}, a genome"),
    ('{"params": {}, "genome": {}}', "expected {\"stop\": true}, a genome"),
    ('{"params": {}, "why": "x"}', "unknown key why"),
    ('{"params": {}, "parent": 7}', "parent 7 is not a trial number"),
    ('{"stop": false}', "expected {\"stop\": true}, a genome"),
    ("", "not JSON"),
])
def test_an_answer_of_no_form_is_broken(space, line, message):
    with pytest.raises(BrokenAnswer, match=None) as raised:
        parse_answer(line, space, {0, 1})
    assert message in str(raised.value)


def test_the_command_is_split_and_its_files_hashed(tmp_path):
    script = tmp_path / "propose.py"
    script.write_text("print('{\"stop\": true}')\n")
    spec = resolve_proposer("{python} propose.py --fast '{request}'", 30, tmp_path)
    assert spec.argv == ("{python}", "propose.py", "--fast", "{request}")
    assert spec.files == {"propose.py": hashlib.sha256(script.read_bytes()).hexdigest()}
    script.write_text("print('{\"stop\": true}')  # edited\n")
    assert resolve_proposer("{python} propose.py --fast '{request}'", 30, tmp_path).identity != spec.identity
    for bad, message in (("", "empty command"), ("python 'unclosed", "cannot split it into words")):
        with pytest.raises(ConfigError, match=message):
            resolve_proposer(bad, 30, tmp_path)


def _settings(**values) -> EvolutionSettings:
    return EvolutionSettings(preset="smoke", data_dir=Path("."), **values)


@pytest.mark.parametrize(("values", "message"), [
    ({"sampler": "tpe"}, "--sampler configures the sampler, which --proposer replaces"),
    ({"sampler": "regularized"}, "--sampler configures the sampler"),  # given, though the default
    ({"sampler_seed": 3}, "--sampler-seed configures the sampler"),
    ({"tournament": 2}, "--tournament configures the sampler"),
    ({"population": 4}, "--population sizes the sampler's population and the hurdles' reference"),
    ({"workers": 2}, "--workers 2: a proposer study runs one worker"),
])
def test_options_the_proposer_replaces_are_refused(values, message):
    with pytest.raises(ConfigError, match=None) as raised:
        _settings(proposer="python propose.py", **values)
    assert message in str(raised.value)
    _settings(**values)  # without a proposer they apply


def test_the_population_sizes_the_hurdles_of_a_one_lr_proposer_study():
    settings = _settings(proposer="python propose.py", population=4, trial_lr_factors=[])
    assert settings.population == 4
    with pytest.raises(ConfigError, match="--proposer-timeout applies to --proposer"):
        _settings(proposer_timeout=5)
