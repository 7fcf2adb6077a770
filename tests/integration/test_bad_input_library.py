"""Both doors refuse the same input in the same words: every rule the command line applies
lives in the typed request (``ReproductionRequest``, ``EvolutionSettings``), the command
line only parses and hands its values over; and what cannot fit in memory or in the data is
refused before any training (issue 23, causes 1 and 2)."""

from __future__ import annotations

import pytest
from cli_runner import run_cli

from llmevo.errors import ConfigError
from llmevo.evolve import EvolutionSettings
from llmevo.experiments import ReproductionRequest, reproduce

REPRODUCE = [  # (command-line options, the same through Python)
    (["--seeds", "42,-3"], {"seeds": [42, -3]}),
    (["--seeds", "42,42"], {"seeds": [42, 42]}),
    (["--tune", "--tune-seeds", "1000,1000"], {"tune": True, "tune_seeds": [1000, 1000]}),
    (["--steps", "0"], {"steps": 0}),
    (["--batch-size", "-1"], {"batch_size": -1}),
    (["--warmup-steps", "-1"], {"warmup_steps": -1}),
    (["--weight-decay", "-0.5"], {"weight_decay": -0.5}),
    (["--lr", "0"], {"lr": 0.0}),
    (["--lr", "nan"], {"lr": float("nan")}),
    (["--threads", "0"], {"threads": 0}),
    (["--replicas-max", "0"], {"replicas_max": 0}),
    (["--margin", "0"], {"margin": 0.0}),
    (["--margin", "inf"], {"margin": float("inf")}),
    (["--tune", "--tune-confirm", "-1"], {"tune": True, "tune_confirm": -1}),
    (["--tune-confirm", "2"], {"tune_confirm": 2}),
    (["--tune", "--tune-noise", "-1"], {"tune": True, "tune_noise": -1.0}),
    (["--tune", "--tune-noise", "nan"], {"tune": True, "tune_noise": float("nan")}),
    (["--no-tune", "--no-tune-probe"], {"tune": False, "tune_probe": False}),
    (["--tune-space", "lr", "--tune-probe"], {"tune_space": "lr", "tune_probe": True}),
]
EVOLVE = [
    (["--trials", "0"], {"trials": 0}),
    (["--population", "1"], {"population": 1}),
    (["--population", "3", "--tournament", "4"], {"population": 3, "tournament": 4}),
    (["--rescore-seeds", "-1"], {"rescore_seeds": -1}),
    (["--score-k", "-1"], {"score_k": -1.0}),
    (["--sampler-seed", "-1"], {"sampler_seed": -1}),
    (["--tune-confirm", "-1"], {"tune_confirm": -1}),
    (["--no-final-tune", "--no-tune-probe"], {"final_tune": False, "tune_probe": False}),
    (["--seeds", "42,42"], {"seeds": [42, 42]}),
    (["--seeds", "-5"], {"seeds": [-5]}),
    (["--study", "../up"], {"study": "../up"}),
    (["--replicas-max", "0"], {"replicas_max": 0}),
    # issue 37 round 4: a grace period a live trial cannot beat, a docs folder that is not there
    (["--heartbeat", "10", "--grace-period", "5"], {"heartbeat": 10, "grace_period": 5}),
    (["--docs", "/nonexistent/docs"], {"docs": "/nonexistent/docs"}),
]


def _cli_error(args: list[str], capsys) -> str:
    assert run_cli(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err.removeprefix("error: ")


@pytest.mark.parametrize(("options", "values"), REPRODUCE, ids=[" ".join(o) for o, _ in REPRODUCE])
def test_reproduce_refuses_the_same_input_through_both_doors(options, values, tmp_path, data_dir,
                                                              capsys):
    out = tmp_path / "a.json"
    cli = _cli_error(["reproduce", "rope", "--data-dir", str(data_dir), "--out", str(out), *options],
                     capsys)
    with pytest.raises(ConfigError) as error:
        reproduce(ReproductionRequest(name="rope", data_dir=data_dir, out=out, **values))
    assert str(error.value) == cli
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("options", "values"), EVOLVE, ids=[" ".join(o) for o, _ in EVOLVE])
def test_evolve_refuses_the_same_input_through_both_doors(options, values, tmp_path, data_dir,
                                                          capsys):
    cli = _cli_error(["evolve", "--preset", "smoke", "--data-dir", str(data_dir),
                      "--storage", f"sqlite:///{tmp_path}/s.db", *options], capsys)
    with pytest.raises(ConfigError) as error:
        EvolutionSettings(preset="smoke", data_dir=data_dir, storage=f"sqlite:///{tmp_path}/s.db",
                          **values).plan()
    assert str(error.value) == cli
    assert list(tmp_path.iterdir()) == []


def test_a_vocabulary_smaller_than_the_data_is_refused_before_training(tmp_path, data_dir):
    request = ReproductionRequest(name="rope", data_dir=data_dir, out=tmp_path / "a.json",
                                  base_model={"vocab_size": 7}, steps=2, device="cpu", threads=1)
    with pytest.raises(ConfigError, match=r"vocab_size 7 is too small for its data \(token ids up to \d+\)"):
        reproduce(request)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("options", "values", "what"), [
    (["relu2", "--against", "swiglu:hidden=1000000000"],
     {"name": "relu2", "against": "swiglu:hidden=1000000000"}, "384,000,065,856 parameters"),
    (["rope", "--batch-size", "1000000"], {"name": "rope", "batch_size": 1_000_000},
     "of activations at batch 1000000 x 64"),
])
def test_what_cannot_fit_in_memory_is_refused_before_training(options, values, what, tmp_path,
                                                              data_dir, capsys):
    out = tmp_path / "a.json"
    cli = _cli_error(["reproduce", *options, "--steps", "2", "--device", "cpu", "--threads", "1",
                      "--data-dir", str(data_dir), "--out", str(out)], capsys)
    assert what in cli and "GiB available; use a smaller model or batch" in cli
    with pytest.raises(ConfigError) as error:
        reproduce(ReproductionRequest(data_dir=data_dir, out=out, steps=2, device="cpu", threads=1,
                                      **values))
    # the same estimate (what is available moves with the machine's other processes)
    assert str(error.value).split(", but ")[0] == cli.split(", but ")[0]
    assert list(tmp_path.iterdir()) == []


def test_an_artifact_is_never_replaced_by_one_holding_less_without_replace(tmp_path, data_dir, capsys):
    out = tmp_path / "a.json"
    common = ["reproduce", "rope", "--steps", "2", "--device", "cpu", "--threads", "1",
              "--no-report", "--no-arm-cache", "--data-dir", str(data_dir), "--out", str(out)]
    assert run_cli([*common, "--seeds", "42,43"]) == 0
    before = out.read_bytes()
    err = _cli_error([*common, "--seeds", "42"], capsys)
    assert "holds seed 43 that the new artifact lacks; nothing was written" in err
    with pytest.raises(ConfigError, match="holds seed 43"):
        reproduce(ReproductionRequest(name="rope", steps=2, seeds=[42], device="cpu", threads=1,
                                      report=False, arm_cache=False, data_dir=data_dir, out=out))
    assert out.read_bytes() == before
    assert run_cli([*common, "--seeds", "42", "--replace"]) == 0
    assert out.read_bytes() != before


def test_allow_dirty_applies_to_publish_only(tmp_path, data_dir, capsys):
    err = _cli_error(["reproduce", "rope", "--allow-dirty", "--data-dir", str(data_dir),
                      "--out", str(tmp_path / "a.json")], capsys)
    with pytest.raises(ConfigError) as error:
        ReproductionRequest(name="rope", allow_dirty=True, data_dir=data_dir).plan()
    assert str(error.value) == err and "--allow-dirty applies to --publish only" in err


def test_an_evolution_that_cannot_fit_in_memory_is_refused_before_any_work(tmp_path, data_dir, capsys):
    """evolve used to skip the memory check reproduce makes: an impossible size started a study."""
    storage = tmp_path / "s.db"
    cli = _cli_error(["evolve", "--preset", "quick", "--trials", "1", "--workers", "2", "--d-model", "16384",
                      "--layers", "48", "--heads", "1024",
                      "--device", "cpu", "--threads", "1", "--no-report", "--data-dir", str(data_dir),
                      "--storage", f"sqlite:///{storage}", "--study", "x"], capsys)
    assert cli.startswith("evolution: llama_modern at the study's size: training needs about")
    assert "167,513,702,400 parameters" in cli and "x 6 runs at once" in cli
    assert "GiB available; use a smaller model or batch" in cli
    assert list(tmp_path.iterdir()) == []


def _section_cases(data_dir):
    from llmevo.experiments import LadderRequest
    from llmevo.experiments.sections import RunSection

    run = RunSection(data_dir=data_dir, threads=1)
    return [
        (lambda: ReproductionRequest(name="rope", run=run, threads=2), "threads is a field of the run section"),
        (lambda: ReproductionRequest(name="rope", run=run, data_dir=data_dir), "data_dir is a field of the run"),
        (lambda: EvolutionSettings(run=run, data_dir=data_dir), "data_dir is a field of the run section"),
        (lambda: LadderRequest(name="rope", run=run, threads=1), "threads is a field of the run section"),
        (lambda: ReproductionRequest(name="rope", data_dir=data_dir).updated(run=run, threads=2),
         "threads is a field of the run section"),
        (lambda: ReproductionRequest("rope"), "takes keywords only"),
        (lambda: ReproductionRequest(name="rope", data_dir=data_dir).updated({"steps": 3}), "takes keywords only"),
        (lambda: ReproductionRequest(name="rope", data_dir=data_dir, tune_grid=[]), "--tune-grid: no learning rate"),
        (lambda: EvolutionSettings(data_dir=data_dir, sampler_seed=2**40), "--sampler-seed 1099511627776"),
    ]


@pytest.mark.parametrize("case", range(9))
def test_a_section_and_its_flat_field_and_other_misuse_is_one_line(case, data_dir):
    """Issue 37 round 4: both ``run=`` and a flat field of it (the flat one silently won),
    positional values (a TypeError), an empty grid (silently the default grid) and a sampler
    seed numpy cannot take (a traceback when the study started) are one ConfigError each."""
    make, words = _section_cases(data_dir)[case]
    with pytest.raises(ConfigError) as error:
        make()
    assert words in str(error.value) and "\n" not in str(error.value)


def test_updated_moves_flat_fields_into_their_section_and_replaces_a_section_given_whole(data_dir):
    from llmevo.experiments.sections import RunSection

    request = ReproductionRequest(name="rope", data_dir=data_dir, threads=1, steps=2)
    changed = request.updated(steps=3)
    assert (changed.run.threads, changed.train.steps) == (1, 3)
    replaced = request.updated(run=RunSection(data_dir=data_dir))
    assert (replaced.run.threads, replaced.train.steps) == (None, 2)


def test_an_empty_tune_grid_on_the_command_line_is_refused(tmp_path, data_dir, capsys):
    err = _cli_error(["reproduce", "rope", "--steps", "2", "--tune-grid", "", "--data-dir", str(data_dir),
                      "--out", str(tmp_path / "a.json")], capsys)
    assert err == "--tune-grid: no value given (expected e.g. 1e-3,3e-3,1e-2)"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("options", "named"), [
    (["--proposer", "x"], "--proposer does not apply"),
    (["--trials", "3", "--workers", "2"], "--trials, --workers do not apply"),
    (["--replace"], "--replace does not apply"),
    (["--out", "somewhere"], "--out does not apply"),
])
def test_list_space_refuses_options_it_would_ignore(options, named, tmp_path, data_dir, capsys, monkeypatch):
    """Issue 37 round 4: ``evolve --list-space`` printed the space and exited 0 whatever else
    was given (a proposer, a study's trials, an output folder)."""
    monkeypatch.chdir(tmp_path)
    err = _cli_error(["evolve", "--list-space", "--preset", "smoke", *options], capsys)
    assert named in err and "which prints the space and exits" in err
    assert list(tmp_path.iterdir()) == []
    assert run_cli(["evolve", "--list-space", "--preset", "smoke", "--promotion", "manifest"]) == 0
    # an explicit default asks for nothing (issue 37): accepted; the space reads no data
    assert run_cli(["evolve", "--list-space", "--preset", "smoke", "--no-publish", "--workers", "1",
                    "--report"]) == 0
    refused = _cli_error(["evolve", "--list-space", "--data-dir", str(data_dir), "--no-report"], capsys)
    named_first, _, rest = refused.partition(" do not apply to --list-space")  # in the options' declared order
    assert rest and set(named_first.split(", ")) == {"--data-dir", "--no-report"}


def _bool_cases(data_dir):
    from llmevo.experiments import EvidenceRequest, LadderRequest
    from llmevo.experiments.sections import RunSection, TrainingSection

    return [  # (a request given a bool where a number goes, the option named, the same with the number)
        (lambda v: ReproductionRequest(name="rope", data_dir=data_dir, threads=v), "--threads"),
        (lambda v: ReproductionRequest(name="rope", data_dir=data_dir, seeds=[42, v]), "--seeds"),
        (lambda v: ReproductionRequest(name="rope", data_dir=data_dir, margin=v), "--margin"),
        (lambda v: ReproductionRequest(name="rope", data_dir=data_dir, steps=v), "--steps"),
        (lambda v: ReproductionRequest(name="rope", data_dir=data_dir, lr=v), "--lr"),
        (lambda v: ReproductionRequest(name="rope", data_dir=data_dir, tune=True, tune_grid=[1e-3, v]),
         "--tune-grid"),
        (lambda v: RunSection(data_dir=data_dir, threads=v), "--threads"),
        (lambda v: TrainingSection(batch_size=v), "--batch-size"),
        (lambda v: LadderRequest(name="rope", data_dir=data_dir, rungs=[-1, v]), "--rungs"),
        (lambda v: EvidenceRequest(data_dir=data_dir, steps=v), "--steps"),
        (lambda v: EvolutionSettings(data_dir=data_dir, trials=v), "--trials"),
        (lambda v: EvolutionSettings(data_dir=data_dir, score_k=v), "--score-k"),
    ]


@pytest.mark.parametrize("case", range(12))
def test_a_bool_where_a_number_goes_is_one_line(case, data_dir):
    """Issue 37: the request models took ``threads=True`` as 1 and ``seeds=[True]`` as [1]
    (pydantic's lax mode); a bool is refused where a number goes, the number itself accepted."""
    make, option = _bool_cases(data_dir)[case]
    for value in (True, False):
        with pytest.raises(ConfigError) as error:
            make(value)
        said = str(error.value)
        assert said.startswith(option) and f"a boolean ({value})" in said and "\n" not in said
    make(1)  # the number is taken
