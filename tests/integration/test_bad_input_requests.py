"""Bad input to the requests and their files, found by a new user's walk (twenty-first session's
closing notes): each refused in one line, exit status 2, nothing written, before any work; the
same text from Python as from the command line where both doors exist."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import typer.main
from cli_runner import assert_refused, files_under, run_cli

from llmevo.errors import ConfigError
from llmevo.experiments import ExternalLadderRequest, ExternalRequest, ReproductionRequest
from llmevo.experiments.experiment_file import load_experiment
from llmevo.experiments.sections import EVOLUTION_REFUSED, LADDER_REFUSED, read_experiment


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _refused_alike(args: list[str], call, message: str, capsys, workdir: Path) -> None:
    """The command line refuses ``args`` and Python ``call()`` with the same line."""
    assert_refused(args, message, capsys, workdir)
    with pytest.raises(ConfigError) as raised:
        call()
    assert message in str(raised.value)


# --- experiment files -------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["reproduce", "ladder", "evolve"])
def test_an_empty_file_is_refused_not_a_default_study_or_a_component_name(command, tmp_path, capsys, workdir):
    """Before: ``evolve empty.toml`` started a default study; ``reproduce empty.toml`` read
    the file's name as a component's."""
    from llmevo.evolve import EvolutionSettings
    from llmevo.experiments import LadderRequest

    request = {"reproduce": ReproductionRequest, "ladder": LadderRequest, "evolve": EvolutionSettings}[command]
    path = _write(tmp_path, "empty.toml", "# nothing yet\n")
    _refused_alike([command, str(path)], lambda: read_experiment(path, request),
                   f"experiment file {path}: empty; it holds {request.__name__}'s fields", capsys, workdir)


@pytest.mark.parametrize("command", ["reproduce", "ladder"])
def test_a_file_without_name_is_refused_not_run_as_rope(command, tmp_path, capsys, workdir):
    from llmevo.experiments import LadderRequest

    request = ReproductionRequest if command == "reproduce" else LadderRequest
    path = _write(tmp_path, "nameless.toml", 'preset = "smoke"\nseeds = [42]\n')
    _refused_alike([command, str(path)], lambda: read_experiment(path, request),
                   f"experiment file {path}: no name; a {request.__name__} file names its component", capsys, workdir)


@pytest.mark.parametrize(("text", "said"), [
    ('name = "rope"\nbogus = 1\n', "bogus: no field of ReproductionRequest (its own: name,"),
    ('name = "rope"\n[tuning]\nbogus = 1\n', "[tuning] bogus: no field of the tuning section (its fields: tune,"),
    ('name = "rope"\nlr = 0.1\n', "lr: a field of the train section; put it under [train]"),
    ('name = "rope"\n[train]\nsteps = 0\n', "[train] steps: 0: Input should be greater than or equal to 1"),
    ('name = "rope"\n[train]\nsteps = 2.5\n', "[train] steps: 2.5 is not an integer"),
    ('name = "rope"\n[train]\nlr = "3e-3"\n', "[train] lr: '3e-3' is not a number"),
    ('name = "rope"\n[run]\nthreads = true\n', "[run] threads: True is not a number"),
    # strict booleans: "yes" and 1 are no booleans in a file (pydantic's lax mode took both)
    ('name = "rope"\n[tuning]\ntune = "yes"\n', "[tuning] tune: 'yes' is not true or false"),
    ('name = "rope"\nreport = 1\n', "report: 1 is not true or false"),
    ('name = "rope"\nseeds = [42, "43"]\n', "seeds: '43' is not a number"),
    # where this machine keeps things is never a file's (before: accepted and unused)
    ('name = "rope"\n[run]\ndata_dir = "/data"\n', "[run] data_dir: not in an experiment file: where this machine"),
    ('name = "rope"\n[run]\nrepo_root = "/src"\n', "[run] repo_root: not in an experiment file: llmevo checks"),
    ('name = "rope"\n[run]\ncommand = "x"\n', "[run] command: not in an experiment file: llmevo records"),
])
def test_a_bad_key_or_value_is_named_by_the_file_and_the_key(text, said, tmp_path, capsys, workdir):
    """Before: "ReproductionRequest: bogus: Extra inputs are not permitted", and a bad value
    reported as its option (``--steps 0``), not where it was written."""
    path = _write(tmp_path, "bad.toml", text)
    _refused_alike(["reproduce", str(path)], lambda: read_experiment(path, ReproductionRequest),
                   f"{path}: {said}", capsys, workdir)


@pytest.mark.parametrize("command", ["reproduce", "ladder", "evolve"])
@pytest.mark.parametrize(("make", "said"), [
    (lambda folder: folder / "missing.toml", "no such file; check the path"),
    (lambda folder: (folder / "dir.toml").mkdir() or folder / "dir.toml",
     "a folder, not a file; give the experiment's FILE.toml"),
    (lambda folder: (folder / "latin1.toml").write_bytes(b'name = "r\xffope"\n') and folder / "latin1.toml",
     "not UTF-8 text (byte 0xff at offset 9); save it as UTF-8"),
])
def test_a_file_that_cannot_be_read_says_why_and_what_to_do(command, make, said, tmp_path, capsys, workdir):
    """Before: "cannot be read (FileNotFoundError)", "(IsADirectoryError)", "(UnicodeDecodeError)"."""
    from llmevo.evolve import EvolutionSettings
    from llmevo.experiments import LadderRequest

    request = {"reproduce": ReproductionRequest, "ladder": LadderRequest, "evolve": EvolutionSettings}[command]
    path = make(tmp_path)
    _refused_alike([command, str(path)], lambda: read_experiment(path, request),
                   f"experiment file {path}: {said}", capsys, workdir)


@pytest.mark.parametrize("text", ['name = "rope"\ntrain = 3\n', 'name = "rope"\n[[train]]\nsteps = 2\n',
                                  'name = "rope"\ntrain = "steps=2"\n'])
def test_a_section_given_as_a_value_says_it_is_a_table(text, tmp_path, capsys, workdir):
    """Before: "train: no field of ReproductionRequest (...; its sections as tables: [run],
    [train], ...)", which named [train] as what it refused."""
    path = _write(tmp_path, "value.toml", text)
    _refused_alike(["reproduce", str(path)], lambda: read_experiment(path, ReproductionRequest),
                   f"{path}: train: the train section is one table, not a value; write [train] and its fields "
                   "under it (", capsys, workdir)


def test_a_good_file_still_reads(tmp_path):
    path = _write(tmp_path, "ok.toml", """
        name = "muon"
        seeds = [42, 43]
        margin = 2
        [train]
        lr = 3e-3
        steps = 5
        [tuning]
        tune = true
        tune_grid = [1e-3, 3e-3]
    """)
    values = read_experiment(path, ReproductionRequest)
    assert values == {"name": "muon", "seeds": [42, 43], "margin": 2, "lr": 3e-3, "steps": 5, "tune": True,
                      "tune_grid": [1e-3, 3e-3]}
    request = ReproductionRequest(**values, data_dir=tmp_path)
    assert request.train.steps == 5 and request.tuning.tune is True and request.margin == 2.0


# --- --set: one field, once; nothing llmevo sets itself ---------------------------------------

@pytest.mark.parametrize(("args", "said"), [
    (["reproduce", "rope", "--set", "name=muon"], "--set name=muon: name is given twice (by NAME and --set)"),
    (["reproduce", "rope", "--seeds", "42", "--set", "seeds=[43]"],
     "--set seeds=[43]: seeds is given twice (by --seeds and --set)"),
    (["reproduce", "rope", "--preset", "smoke", "--set", "preset=quick"],
     "--set preset=quick: preset is given twice (by --preset and --set)"),
    (["ladder", "rope", "--set", "name=muon"], "--set name=muon: name is given twice (by NAME and --set)"),
    (["ladder", "rope", "--rungs=-2,-1", "--set", "rungs=[-1,0]"], "rungs is given twice (by --rungs and --set)"),
    (["evolve", "--preset", "smoke", "--set", "preset=quick"], "preset is given twice (by --preset and --set)"),
    (["diagnose", "rope", "--set", "name=muon"], "--set name=muon: name is given twice (by NAME and --set)"),
    (["reproduce", "rope", "--set", "run.command=x"], "--set run.command=x: command is not set by hand: llmevo records"),
    (["reproduce", "rope", "--set", "run.repo_root=/tmp"], "repo_root is not set by hand: llmevo checks the checkout"),
    (["ladder", "rope", "--set", "run.cache_dir=/tmp"], "cache_dir is not set by hand: where this machine caches"),
    (["reproduce", "rope", "--set", "tuning.tune=yes"], "--set tuning.tune=yes: 'yes' is not true or false"),
    (["reproduce", "rope", "--set", "train.steps=1.5"], "--set train.steps=1.5: 1.5 is not an integer"),
])
def test_set_gives_a_field_once_and_never_what_llmevo_sets(args, said, capsys, workdir):
    """Before: ``--set name=muon`` silently replaced NAME, ``--seeds`` and ``--set seeds`` were
    both taken (the last won), ``--set run.command=...`` was accepted and unused."""
    assert_refused(args, said, capsys, workdir)


def test_set_over_an_options_default_is_taken(tmp_path):
    """An option left at its default is no conflict: ``--set`` gives the field."""
    from llmevo.cli.common import request_values

    values = request_values({"set_": ["seeds=[43]", "preset=quick"]}, ReproductionRequest, {"name": "NAME"})
    assert values == {"seeds": [43], "preset": "quick"}


# --- options a pipeline refuses are not listed -------------------------------------------------

def test_evolve_lists_no_option_its_study_refuses_and_still_refuses_each_with_its_reason(capsys, workdir):
    from llmevo.cli import commands

    params = typer.main.get_command(commands()).commands["evolve"].params
    hidden = {param.name for param in params if getattr(param, "hidden", False)}
    assert hidden == set(EVOLUTION_REFUSED), hidden ^ set(EVOLUTION_REFUSED)
    assert run_cli(["evolve", "--help"]) == 0
    shown = capsys.readouterr().out
    assert "--tracker" not in shown and "--val-every" not in shown and "--trials" in shown
    assert_refused(["evolve", "--tracker", "wandb"],
                   "--tracker does not apply here: a study logs its trials, seeds and final runs to --tensorboard",
                   capsys, workdir)


def test_ladder_lists_no_option_it_refuses_and_refuses_each_alike_from_python_and_the_cli(capsys, workdir):
    """Before: ``ladder --help`` listed --steps, --rung, --tune-space, ... (the refusals lived
    in the torch-importing ladder module). --tune-grid stays listed: ``ladder --experiment``
    reads it."""
    from llmevo.cli import commands
    from llmevo.experiments import LadderRequest

    assert LadderRequest.refused is LADDER_REFUSED
    params = typer.main.get_command(commands()).commands["ladder"].params
    hidden = {param.name for param in params if getattr(param, "hidden", False)}
    assert hidden == set(LADDER_REFUSED) - {"tune_grid"}, hidden ^ set(LADDER_REFUSED)
    assert run_cli(["ladder", "--help"]) == 0
    shown = capsys.readouterr().out
    for option in ("--steps", "--rung", "--tune-space", "--seq-len", "--batch-size", "--d-model"):
        assert f"{option} " not in shown, option
    assert "--rungs" in shown and "--tune-probe" in shown and "--tune-grid" in shown
    for args, keyword, said in [(["--steps", "2"], {"steps": 2}, "each rung's steps follow its size"),
                                (["--rung", "1"], {"rung": 1}, "--rungs chooses each rung's size"),
                                (["--tune-space", "x"], {"tune_space": "x"}, "a ladder tunes the learning rate")]:
        message = f"{args[0]} does not apply here: {said}"
        _refused_alike(["ladder", "rope", *args], lambda keyword=keyword: LadderRequest(name="rope", data_dir=workdir, **keyword),
                       message, capsys, workdir)


def test_diagnose_lists_only_the_run_fields_it_takes(capsys, workdir):
    from llmevo.cli import commands
    from llmevo.diagnostics.pipeline import DiagnoseRequest

    params = {param.name: param for param in typer.main.get_command(commands()).commands["diagnose"].params}
    shown = {name for name, param in params.items() if not getattr(param, "hidden", False)}
    assert {"data_dir", "device", "threads", "publish", "allow_dirty", "replace"} <= shown
    assert not shown & {"path", "tracker", "arm_cache", "val_every", "replicas_max", "tracker_dir"}
    _refused_alike(["diagnose", "rope", "--no-arm-cache"], lambda: DiagnoseRequest(name="rope", arm_cache=False),
                   "--no-arm-cache does not apply to diagnose, which trains no arm", capsys, workdir)
    _refused_alike(["diagnose", "rope", "--checkpoint", "ckpt"], lambda: DiagnoseRequest(name="rope", checkpoint="c"),
                   "--checkpoint applies to --full-experiment; drop it", capsys, workdir)


# --- the data folder ------------------------------------------------------------------------

def test_a_data_folder_that_is_a_file_says_so(tmp_path, capsys, workdir, monkeypatch):
    """Before: "does not exist; download it with: llmevo data fetch --to FILE"."""
    file = _write(tmp_path, "data.txt", "not a folder\n")
    monkeypatch.setenv("LLMEVO_DATA", str(file))
    assert_refused(["reproduce", "rope"], f"$LLMEVO_DATA {file} is a file, not a folder; point LLMEVO_DATA at "
                   "the data folder", capsys, workdir)
    assert_refused(["reproduce", "rope", "--data-dir", str(file)], f"--data-dir {file} is a file, not a folder; "
                   "give the data folder", capsys, workdir)


# --- verdict: the artifact before --docs ------------------------------------------------------

def test_verdict_names_a_bad_artifact_before_a_missing_docs_folder(tmp_path, capsys, workdir):
    from llmevo.experiments.verdict import VerdictService

    missing = tmp_path / "nosuch.json"
    _refused_alike(["verdict", str(missing), "--docs", "nodocs"],
                   lambda: VerdictService(Path("nodocs")).verdict(missing), f"{missing}: no such artifact",
                   capsys, workdir)


# --- external experiments --------------------------------------------------------------------

SCRIPT = """
    import json, os
    seed = int(os.environ["LLMEVO_PARAM_SEED"])
    v = float(os.environ["LLMEVO_PARAM_V"])
    size = float(os.environ["LLMEVO_PARAM_SIZE"])
    print(json.dumps({"loss": 1 + 0.01 * (seed % 7) + 0.1 * v + 0.001 * size}))
"""
TOML = """
    name = "stub"
    command = ["{python}", "script.py"]
    metric = "loss"
    [params]
    v = 1
    size = 8
    [ladder]
    param = "size"
    values = [8, 16]
    compute = "compute"
"""


@pytest.fixture()
def external(tmp_path, monkeypatch):
    """A command's folder (what a refusal must leave as it was), the run cache beside it, and a
    stub experiment outside it whose runs report no 'compute'."""
    monkeypatch.setenv("LLMEVO_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    _write(tmp_path / "exp", "script.py", SCRIPT)
    return work, _write(tmp_path / "exp", "experiment.toml", TOML)


def test_a_ladder_whose_runs_report_no_compute_is_refused_at_the_first_run(external, capsys):
    """Before: rung 1 trained whole (its artifact and README written), then the ladder stopped."""
    from llmevo.experiments import plan_external_ladder, run_external_ladder

    work, path = external
    said = "the runs report no 'compute', the compute the [ladder] table declares (a run reported loss)"
    assert_refused(["ladder", "--experiment", str(path), "--method", "v=2", "--seeds", "42,43", "--no-tune"],
                   said, capsys, work)
    runs = []
    plan = plan_external_ladder(ExternalLadderRequest(experiment=path, method="v=2", seeds=[42, 43], tune=False,
                                                      arm_cache=False, cache_dir=work.parent / "cache"))
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        run_external_ladder(plan, base_env={}, on_run=runs.append)
    assert runs == [] and files_under(work) == set()  # refused at the first run that reported


def test_publishing_an_experiment_in_no_git_repository_says_what_to_do(external, tmp_path):
    """Before: "cannot publish: FOLDER is unknown (not a git checkout)", also with --publish-to."""
    from llmevo.experiments import plan_external

    work, path = external
    request = ExternalRequest(experiment=path, method="v=2", publish=True, published_dir=tmp_path / "pub",
                              repo_root=tmp_path / "no-checkout")
    with pytest.raises(ConfigError, match=r"is in no git repository, so no commit records its code; commit it to "
                                          r"one \(git init && git add -A && git commit\), or pass --allow-dirty"):
        plan_external(request)
    assert not (tmp_path / "pub").exists() and files_under(work) == set()


def test_a_parameter_default_that_is_no_scalar_says_so(tmp_path, capsys):
    """Before: "params.v.bool: Input should be a valid boolean" (the union's last member)."""
    path = _write(tmp_path / "exp", "experiment.toml", TOML.replace("v = 1", "v = [1, 2]"))
    with pytest.raises(ConfigError, match=r"params: v = \[1, 2\]: a parameter's default is a number, true/false "
                                          "or text"):
        load_experiment(path)
    with pytest.raises(ConfigError, match=r"parameter v='\[1': expected an integer like its default 1"):
        from llmevo.experiments.experiment_file import parse_settings

        parse_settings("v=[1,2]", load_experiment(_write(tmp_path / "ok", "e.toml", TOML)).spec, "--method")


# --- the twenty-second session's walk (issue 47) ----------------------------------------------

def test_set_data_dir_is_a_path_not_a_traceback(tmp_path, capsys, workdir):
    """Before: ``--set run.data_dir=/nonexistent`` ended in a traceback (AttributeError: 'str'
    object has no attribute 'exists')."""
    missing = tmp_path / "nowhere"
    assert_refused(["reproduce", "rope", "--preset", "smoke", "--set", f"run.data_dir={missing}"],
                   f"data directory {missing} does not exist", capsys, workdir)


@pytest.mark.parametrize(("args", "said"), [
    (["reproduce", "rope", "--steps", "2", "--set", "train.steps=3"],
     "--set train.steps=3: steps is given twice (by --steps and --set); give it once"),
    (["reproduce", "rope", "--set", "train.steps=2", "--set", "train.steps=3"],
     "--set train.steps=3: steps is given twice (twice by --set); give it once"),
    (["reproduce", "rope", "--set", "train=3"],
     "--set train=3: train is a section, not a field; set one of its fields, --set train.FIELD=VALUE (its fields: steps,"),
])
def test_set_says_how_a_field_was_given_and_that_a_section_is_no_field(args, said, capsys, workdir):
    """Before: "given twice (by its option and --set, or twice by --set)"; ``--set train=3``:
    "ReproductionRequest has no field 'train'"."""
    assert_refused(args, said, capsys, workdir)


def test_a_ladder_file_at_another_preset_is_refused_by_what_it_gave(tmp_path, capsys, workdir):
    """Before: "--rung / --d-model / --layers / --heads scale the quick preset ...; got --preset
    smoke", naming options the ladder has none of (its file gave preset = "smoke")."""
    from llmevo.experiments import LadderRequest

    path = _write(tmp_path, "smoke.toml", 'name = "rope"\npreset = "smoke"\n')
    _refused_alike(["ladder", str(path)], lambda: LadderRequest(name="rope", preset="smoke", data_dir=workdir),
                   "preset smoke: a ladder's rungs scale the quick preset (rung 0 is quick); drop the preset, "
                   "or run one comparison with `llmevo reproduce NAME --preset smoke`", capsys, workdir)


@pytest.mark.parametrize(("text", "said"), [
    ('name = "x"\nmetric = "loss"\n', 'no command; the file declares the argv of one run (command = ["python", '),
    ('name = "x"\ncommand = ["python", "train.py"]\n', 'no metric; the file declares the metric that decides '
                                                       '(metric = "val_loss")'),
    ('name = "x"\n', "no command and no metric; the file declares the argv of one run"),
])
def test_an_external_file_missing_command_or_metric_says_what_to_declare(text, said, tmp_path, capsys, workdir):
    """Before: "--experiment FILE: command: Field required"."""
    path = _write(tmp_path, "ext.toml", text)
    _refused_alike(["reproduce", "--experiment", str(path), "--method", "lr=1e-2"], lambda: load_experiment(path),
                   f"--experiment {path}: {said}", capsys, workdir)


@pytest.mark.parametrize(("make", "said"), [
    (lambda folder: (folder / "dir.toml").mkdir() or folder / "dir.toml",
     "a folder, not a file; give the experiment's FILE.toml"),
    (lambda folder: (folder / "latin1.toml").write_bytes(b'name = "r\xffope"\n') and folder / "latin1.toml",
     "not UTF-8 text (byte 0xff at offset 9); save it as UTF-8"),
])
def test_an_external_file_that_cannot_be_read_says_why_as_the_request_files_do(make, said, tmp_path, capsys,
                                                                                 workdir):
    """Before: "cannot read: [Errno 21] Is a directory: ...", "cannot read: 'utf-8' codec can't
    decode byte 0xff in position 9: invalid start byte"."""
    path = make(tmp_path)
    _refused_alike(["reproduce", "--experiment", str(path), "--method", "lr=1e-2"], lambda: load_experiment(path),
                   f"--experiment {path}: {said}", capsys, workdir)


# --- issue 47, the four left by the walk: each names where its value came from -------------------

@pytest.mark.parametrize(("args", "text", "said"), [
    (["reproduce", "{file}"], 'name = "rope"\nseeds = []\n', "{file}: seeds: []: no seeds given"),
    (["reproduce", "rope", "--set", "seeds=[]"], None, "--set seeds=[]: []: no seeds given"),
    (["reproduce", "rope", "--set", "tuning.tune_seeds=[]"], None, "--set tuning.tune_seeds=[]: []: no seeds given"),
    (["ladder", "{file}"], 'name = "rope"\nseeds = [7, 7]\n', "{file}: seeds: [7, 7]: duplicate seeds [7]"),
])
def test_no_seeds_in_a_file_or_by_set_is_named_by_it_not_by_the_seeds_option(args, text, said, tmp_path, capsys,
                                                                             workdir):
    """Before: "--seeds: no seeds given; pass e.g. --seeds 42,43,44", for a file's seeds = []
    and for --set seeds=[] alike."""
    file = _write(tmp_path, "seeds.toml", text) if text else None
    said = said.format(file=file)
    assert_refused([arg.format(file=file) for arg in args], said + ("; give at least one, e.g. [42, 43, 44]"
                                                                    if "no seeds" in said else ""), capsys, workdir)
    if file is not None:
        from llmevo.experiments import LadderRequest

        with pytest.raises(ConfigError, match=re.escape(said)):
            read_experiment(file, ReproductionRequest if args[0] == "reproduce" else LadderRequest)


def test_the_python_door_names_the_seeds_option_as_the_command_line_does(workdir):
    for keyword, said in [({"seeds": []}, "--seeds: no seeds given; give at least one, e.g. [42, 43, 44]"),
                          ({"tune_seeds": [1, 1]}, "--tune-seeds: duplicate seeds [1]; each seed must appear once")]:
        with pytest.raises(ConfigError) as error:
            ReproductionRequest(name="rope", data_dir=workdir, **keyword)
        assert str(error.value) == said


@pytest.mark.parametrize(("args", "text", "said"), [
    (["ladder", "rope", "--set", "train.steps=2"], None, "--set train.steps=2: --steps does not apply here: "
                                                         "each rung's steps follow its size (--tokens-per-parameter)"),
    (["ladder", "rope", "--set", "tuning.tune_trials=3"], None, "--set tuning.tune_trials=3: --tune-trials does not "
                                                                "apply here: a ladder tunes the learning rate on each"),
    (["ladder", "{file}"], 'name = "rope"\n[train]\nsteps = 2\n', "{file}: [train] steps = 2: --steps does not "
                                                                  "apply here: each rung's steps follow its size"),
    (["evolve", "--set", "run.tracker=wandb"], None, "--set run.tracker=wandb: --tracker does not apply here: a study"),
])
def test_a_refused_field_by_set_or_a_file_is_named_by_it_not_by_its_option(args, text, said, tmp_path, capsys,
                                                                           workdir):
    """Before: ``ladder rope --set train.steps=2`` was refused as "--steps does not apply
    here", an option the user did not give (and ladder's --help does not list)."""
    file = _write(tmp_path, "ladder.toml", text) if text else None
    assert_refused([arg.format(file=file) for arg in args], said.format(file=file), capsys, workdir)


def test_diagnose_given_an_experiment_file_says_it_takes_none_and_lists_the_diagnostics(tmp_path, capsys, workdir):
    """Before: "unknown diagnostic 'FILE.toml'; known: ..."."""
    from llmevo.diagnostics.harness import DIAGNOSTICS
    from llmevo.diagnostics.pipeline import DiagnoseRequest, diagnose

    path = _write(tmp_path, "rope.toml", 'name = "rope"\n')
    said = (f"diagnose takes no experiment file ({path}); name a diagnostic ({', '.join(sorted(DIAGNOSTICS))}) "
            "and give its settings as options: llmevo diagnose rope --seeds 42")
    assert "rope" in DIAGNOSTICS
    _refused_alike(["diagnose", str(path), "--device", "cpu"],
                   lambda: diagnose(DiagnoseRequest(name=str(path), run={"device": "cpu"})), said, capsys, workdir)
    assert_refused(["diagnose", "nope", "--device", "cpu"], "unknown diagnostic 'nope'; known: ", capsys, workdir)


@pytest.mark.parametrize(("command", "shown"), [
    ('"python train.py --lr {lr}"', '["python", "train.py", "--lr", "{lr}"]'),
    ('"python \'my script.py\'"', '["python", "my script.py"]'),
    ('"python \'unclosed"', '["python", "train.py", ...]'),
])
def test_an_external_command_given_as_one_string_says_to_write_a_list(command, shown, tmp_path, capsys, workdir):
    """Before: "--experiment FILE: command: Input should be a valid list"."""
    path = _write(tmp_path, "ext.toml", f'name = "x"\ncommand = {command}\nmetric = "loss"\n')
    said = (f"--experiment {path}: command: one string, not a list of arguments; write it as a list, one entry "
            f"per argument: command = {shown}")
    _refused_alike(["reproduce", "--experiment", str(path), "--method", "lr=1e-2"], lambda: load_experiment(path),
                   said, capsys, workdir)
    assert_refused(["ladder", "--experiment", str(path), "--method", "lr=1e-2"], said, capsys, workdir)


# --- issue 47, twenty-third session: a refusal reached through --set or a file names what was given -----

@pytest.mark.parametrize(("args", "said"), [
    # a field the pipeline does not take: the --set the user typed, then the option it is
    (["diagnose", "rope", "--set", "run.arm_cache=false"],
     "--set run.arm_cache=false: --no-arm-cache does not apply to diagnose, which trains no arm"),
    (["diagnose", "rope", "--set", "run.tracker=wandb"],
     "--set run.tracker=wandb: --tracker does not apply to diagnose, which trains no arm"),
    # the library's refusal in its option's words, led by what the user wrote (both spellings)
    (["reproduce", "rope", "--preset", "quick", "--set", "size.rung=99"],
     "--set size.rung=99: --rung 99: unknown rung; known: -3..7"),
    (["reproduce", "rope", "--preset", "smoke", "--set", "size.rung=2"],
     "--set size.rung=2: --rung / --d-model / --layers / --heads scale the quick preset"),
    (["evolve", "--preset", "smoke", "--set", "size.rung=99"], "--set size.rung=99: --rung / --d-model / "),
    (["ladder", "rope", "--set", "rungs=[99]"], "--set rungs=[99]: --rungs: unknown rung 99; known: -3..7"),
    (["reproduce", "rope", "--set", "tuning.tune_grid=[]"],
     "--set tuning.tune_grid=[]: --tune-grid: no learning rate given"),
    (["reproduce", "rope", "--set", "tuning.tune=false", "--set", "tuning.tune_grid=[1e-3]"],
     "--set tuning.tune=false, --set tuning.tune_grid=[1e-3]: --tune-grid needs tuning; drop --no-tune"),
    (["evolve", "--set", "preset=bogus"], "--set preset=bogus: --preset bogus: unknown preset; known: smoke, quick, "),
    (["diagnose", "rope", "--set", "checkpoint=x"], "--set checkpoint=x: --checkpoint applies to --full-experiment"),
    (["reproduce", "rope", "--set", "post_training.post_steps=3"],
     "--set post_training.post_steps=3: --post-steps (post_steps): only for a post-training method"),
    # a value the field refuses: the key, the value given and what is accepted
    (["reproduce", "rope", "--set", "train.lr=abc"], "--set train.lr=abc: 'abc' is not a number"),
    (["reproduce", "rope", "--set", "train.steps=-1"], "--set train.steps=-1: -1: Input should be greater than or equal to 1"),
    (["ladder", "rope", "--set", "run.path=bogus"], "--set run.path=bogus: 'bogus': Input should be 'auto', 'sequential', "),
    (["reproduce", "rope", "--set", "run.device=tpu"], "--set run.device=tpu: 'tpu': Input should be 'auto', 'cpu', 'cuda' or"),
    (["diagnose", "rope", "--set", "run.device=tpu"], "--set run.device=tpu: 'tpu': Input should be 'auto', 'cpu', 'cuda' or"),
    (["reproduce", "rope", "--set", "seeds=-1"], "--set seeds=-1: seed -1 is out of range; seeds are integers 0 .. 2**63-1"),
    (["evolve", "--set", "run.arm_cache=0"], "--set run.arm_cache=0: 0 is not true or false"),
    # no value, and text meant as TOML that is not
    (["reproduce", "rope", "--set", "run.data_dir="], "--set run.data_dir=: no value given; give one after the '='"),
    (["ladder", "rope", "--set", "train.lr="], "--set train.lr=: no value given"),
    (["reproduce", "rope", "--set", "tuning.tune_grid=[1e-3,x]"],
     "--set tuning.tune_grid=[1e-3,x]: not a TOML value; write a list as [1e-3, 3e-3] or 1e-3,3e-3"),
])
def test_a_refusal_reached_through_set_names_the_set(args, said, capsys, workdir):
    """Before: "--no-arm-cache does not apply to diagnose", "--rung 99: unknown rung", "unknown
    preset 'bogus'", "unknown device 'tpu'" (options the user did not type, or no key at all),
    "--set train.lr: 'abc' ..." (the key without the text given); ``--set run.data_dir=`` read
    the working folder as the data folder, ``--set seeds=42`` was "Input should be a valid list"."""
    assert_refused(args, said, capsys, workdir)


ROPE = (Path(__file__).parents[2] / "experiments" / "rope.toml").read_text(encoding="utf-8")


@pytest.mark.parametrize(("change", "wrote", "said"), [
    (("", "[size]\nrung = 99\n"), "[size] rung = 99", "--rung 99: unknown rung; known: -3..7"),
    (("", "[run]\ndevice = \"tpu\"\n"), None, "[run] device: 'tpu': Input should be 'auto', 'cpu', 'cuda' or 'mps'"),
    (('preset = "quick"', 'preset = "bogus"'), 'preset = "bogus"', "--preset bogus: unknown preset; known: smoke,"),
    (("tune = true", "tune = false\ntune_grid = [1e-3]"), "[tuning] tune = false, [tuning] tune_grid = [0.001]",
     "--tune-grid needs tuning; drop --no-tune"),
    (('preset = "quick"', 'preset = "quick"\nseeds = 42'), None, "seeds: 42 is not a list; write one, e.g. [42]"),
])
def test_a_refusal_of_a_files_value_names_the_file_and_what_it_wrote(change, wrote, said, tmp_path, capsys, workdir):
    """experiments/rope.toml with a new user's mistake: the line names the file and the key as it
    was written, then the library's refusal (which Python gives alike). Before: the library's
    line alone, naming options the command line never had."""
    old, new = change
    path = _write(tmp_path, "rope.toml", ROPE.replace(old, new) if old else ROPE + new)
    assert_refused(["reproduce", str(path)], f"{path}: {wrote}: {said}" if wrote else f"{path}: {said}",
                   capsys, workdir)
    with pytest.raises(ConfigError) as raised:
        ReproductionRequest(**read_experiment(path, ReproductionRequest), data_dir=workdir).plan()
    assert said in str(raised.value)


def test_what_the_command_line_gives_over_a_file_is_named_not_the_file(tmp_path, capsys, workdir):
    path = _write(tmp_path, "rope.toml", ROPE + "[size]\nrung = 99\n")
    assert_refused(["reproduce", str(path), "--rung", "50"], "error: --rung 50: unknown rung", capsys, workdir)
    assert_refused(["reproduce", str(path), "--set", "size.rung=50"], "error: --set size.rung=50: --rung 50: ",
                   capsys, workdir)


def test_set_takes_one_item_for_a_list_and_a_comma_list():
    from llmevo.cli.common import request_values

    values = request_values({"set_": ["seeds=42", "tuning.tune_grid=3e-3,1e-2"]}, ReproductionRequest)
    assert values == {"seeds": [42], "tune_grid": [3e-3, 1e-2]}
