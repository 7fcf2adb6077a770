"""The experiment file (``llmevo.experiments.experiment_file``): the three ways a metric is
read, derived parameters, one-line refusals at load, N runs at once, the cache's recorded
time, where a comparison is published, and the documentation page naming every key."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
import time
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from llmevo.errors import ConfigError
from llmevo.experiments.experiment_file import (
    Experiment,
    RunFailed,
    Stop,
    execute,
    load_experiment,
    parse_settings,
    publish_folder,
    resolve_params,
    run_key,
    run_many,
    run_once,
    wall_summary,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE = REPO_ROOT / "docs" / "guide" / "experiment-file.md"

# what a public trainer prints (nanoGPT's train.py): the metric is read from it by a regex
TRAINER = """
    import os, sys
    seed = int(os.environ["LLMEVO_PARAM_SEED"])
    for step, val in ((0, 4.5), (250, 2.25), (500, 1.5 + seed / 1000)):
        print(f"step {step}: train loss {val - 0.1:.4f}, val loss {val:.4f}")
        print(f"iter {step}: loss {val + 1:.4f}, time 10.00ms")
    print("warning: something on stderr", file=sys.stderr)
    print("stderr val loss 9.0000", file=sys.stderr)
"""


def make(folder: Path, toml: str, script: str = TRAINER) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "script.py").write_text(textwrap.dedent(script), encoding="utf-8")
    path = folder / "experiment.toml"
    path.write_text(textwrap.dedent(toml), encoding="utf-8")
    return path


def header(read: str, params: str = "", extra: str = "") -> str:
    return (f'name = "x"\ncommand = ["{{python}}", "script.py"]\nmetric = "val_loss"\n{extra}\n'
            f"[read]\n{read}\n[params]\nlr = 0.001\n{params}")


def run(path: Path, seed: int = 7, **params) -> dict[str, float]:
    loaded = load_experiment(path)
    return execute(loaded, {**loaded.spec.params, **params}, seed, 60, dict(os.environ))


@pytest.mark.parametrize("read, expected", [
    ("from = \"regex\"\npattern = 'val loss ([0-9.]+)'", {"val_loss": 1.507}),  # one group: the metric
    ("from = \"regex\"\npattern = 'train loss (?P<train_loss>[0-9.]+), val loss (?P<val_loss>[0-9.]+)'",
     {"train_loss": 1.407, "val_loss": 1.507}),  # named groups, each a metric
    ("from = \"regex\"\npattern = 'step (\\d+): train loss ([0-9.]+), val loss ([0-9.]+)'\n"
     "groups = [\"step\", \"train_loss\", \"val_loss\"]", {"step": 500.0, "train_loss": 1.407, "val_loss": 1.507}),
    ("from = \"regex\"\nstream = \"stderr\"\npattern = 'val loss ([0-9.]+)'", {"val_loss": 9.0}),
])
def test_a_regex_reads_the_last_match(tmp_path, read, expected):
    """The last match of the pattern in the whole output (never an earlier step's value)."""
    got = run(make(tmp_path, header(read)))
    assert got == pytest.approx(expected)


def test_a_regex_that_does_not_match_or_captures_text_is_a_failed_run(tmp_path):
    with pytest.raises(RunFailed, match=r"has no match of 'val acc \(\[0-9.\]\+\)'"):
        run(make(tmp_path / "a", header("from = \"regex\"\npattern = 'val acc ([0-9.]+)'")))
    with pytest.raises(RunFailed, match="matched 'loss' for 'val_loss', not a number"):
        run(make(tmp_path / "b", header("from = \"regex\"\npattern = 'val (loss)'")))
    nan = 'print("val loss nan")'
    with pytest.raises(RunFailed, match="not a finite number"):
        run(make(tmp_path / "c", header("from = \"regex\"\npattern = 'val loss (\\S+)'"), nan))


def test_a_json_line_is_the_default_and_a_file_may_be_named(tmp_path):
    line = 'import json; print("log"); print(json.dumps({"val_loss": 2.5, "tag": "x"}))'
    assert run(make(tmp_path / "a", 'name = "x"\ncommand = ["{python}", "script.py"]\nmetric = "val_loss"', line)) \
        == {"val_loss": 2.5}
    writer = """
        import json, os, pathlib
        seed = int(os.environ["LLMEVO_PARAM_SEED"])
        out = pathlib.Path(f"out-{seed}")
        out.mkdir(exist_ok=True)
        if seed != 3:  # seed 3 writes nothing
            (out / "metrics.json").write_text(json.dumps({"val_loss": seed / 10}))
        assert os.environ["LLMEVO_METRICS_FILE"].endswith(f"out-{seed}/metrics.json")
    """
    path = make(tmp_path / "b", header('from = "file"\npath = "out-{seed}/metrics.json"'), writer)
    assert run(path, seed=2) == {"val_loss": 0.2}
    (tmp_path / "b" / "out-3").mkdir()
    (tmp_path / "b" / "out-3" / "metrics.json").write_text('{"val_loss": 0.9}')  # a stale file
    with pytest.raises(RunFailed, match=r"wrote no metrics file \(out-\{seed\}/metrics.json\)"):
        run(path, seed=3)


@pytest.mark.parametrize("toml, message", [
    (header("from = \"regex\"\npattern = 'val loss ([0-9.]+'"), "is not a regular expression"),
    (header("from = \"regex\"\npattern = 'val loss [0-9.]+'"), "has no group: capture the number"),
    (header("from = \"regex\"\npattern = '(a) (b)'"), "has 2 unnamed groups; name them"),
    (header("from = \"regex\"\npattern = '(a) (b)'\ngroups = [\"val_loss\"]"), "names 1 metric"),
    (header("from = \"regex\"\npattern = '(?P<a>x)'\ngroups = [\"val_loss\"]"), "names its groups"),
    (header("from = \"regex\"\npattern = 'train (?P<train_loss>x)'"), "metric 'val_loss' is not read by the pattern"),
    (header("from = \"regex\""), "needs pattern"),
    (header("from = \"json\"\npattern = '(x)'"), "pattern does not apply to from = 'json'"),
    (header("from = \"file\"\nstream = \"stderr\""), "stream does not apply to from = 'file'"),
    (header("from = \"json\"\npath = \"m.json\""), "path does not apply"),
    (header("from = \"yaml\""), "read.from: Input should be 'json', 'regex' or 'file'"),
    (header("from = \"file\"\npath = \"out-{run}.json\""), r"read.path 'out-\{run\}.json': \{run\} is not a parameter"),
    ('name = "x"\ncommand = ["{python}", "s.py"]\nmetric = "m"\nreport = "stdout"', "report = 'stdout' is now the"),
    ('name = "x"\ncommand = ["{python}", "s.py", "--lr={lr}"]\nmetric = "m"', r"\{lr\} is not a parameter"),
    ('name = "x"\ncommand = ["{python}", "s.py", "{"]\nmetric = "m"', "a literal brace is written"),
])
def test_bad_read_tables_are_one_line_at_load(tmp_path, toml, message):
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=message) as caught:
        load_experiment(path)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(f"--experiment {path}")


DERIVED = """
    name = "d"
    command = ["{python}", "script.py", "--min-lr={min_lr}", "--warmup={warmup}"]
    metric = "val_loss"
    [params]
    lr = 0.003
    steps = 200
    [derived]
    min_lr = "{lr} / 10"
    warmup = "max(1, int({steps} * {frac}))"
    frac = "0.1 if {steps} > 100 else 0.5"
    data_seed = "{seed} + 1"
"""
ECHO = """
    import json, os, sys
    with open(os.environ["LLMEVO_PARAMS_FILE"]) as handle:
        params = json.load(handle)
    print(json.dumps({"val_loss": 1.0, "argv_min_lr": float(sys.argv[1].split("=")[1]),
                      "argv_warmup": int(sys.argv[2].split("=")[1]), "env_frac": float(os.environ["LLMEVO_PARAM_FRAC"]),
                      "file_data_seed": params["data_seed"]}))
"""


def test_derived_parameters_reach_the_run_and_the_key_follows_their_inputs(tmp_path):
    path = make(tmp_path, DERIVED, ECHO)
    loaded = load_experiment(path)
    # the hand computation
    assert resolve_params(loaded.spec, {"lr": 0.003, "steps": 50}, 9) == {
        "lr": 0.003, "steps": 50, "min_lr": 0.003 / 10, "frac": 0.5, "warmup": 25, "data_seed": 10}
    got = execute(loaded, {"lr": 0.003, "steps": 200}, 4, 60, dict(os.environ))
    assert got == {"val_loss": 1.0, "argv_min_lr": 0.003 / 10, "argv_warmup": 20, "env_frac": 0.1, "file_data_seed": 5}
    key = run_key(loaded, {"lr": 0.003, "steps": 200}, 4)
    assert run_key(loaded, {"lr": 0.001, "steps": 200}, 4) != key  # an input moved
    path.write_text(textwrap.dedent(DERIVED).replace("{lr} / 10", "{lr} / 20"))
    assert run_key(load_experiment(path), {"lr": 0.003, "steps": 200}, 4) != key  # an expression moved
    with pytest.raises(ConfigError, match=r"--method: 'min_lr' is derived \(\{lr\} / 10\); set its inputs"):
        parse_settings("min_lr=0.1", loaded.spec, "--method")
    with pytest.raises(ConfigError, match="--method: derived.min_lr = .* fails for .*ZeroDivisionError"):
        parse_settings("lr=0", Experiment(name="z", command=["x"], metric="m", params={"lr": 1.0},
                                          derived={"min_lr": "1 / {lr}"}), "--method")


@pytest.mark.parametrize("derived, message", [
    ('a = "{b} + 1"\nb = "{a} * 2"', "derived parameters form a cycle: (a -> b -> a|b -> a -> b)"),
    ('a = "{nope} / 10"', r"derived.a = '\{nope\} / 10': \{nope\} is not a parameter"),
    ('a = "lr / 10"', r"write the parameter 'lr' as \{lr\}"),
    ('a = "__import__(\'os\').getcwd()"', r"__import__\(\) is not allowed"),
    ('a = "{lr}.__class__"', "derived.a = .* fails for"),
    ('a = "{lr} / 0"', "ZeroDivisionError"),
    ('a = "{lr} +"', "not an expression"),
    ('lr = "{seed}"', "'lr' is both a parameter and derived"),
    ('a = "9 ** 9 ** 9"', "fails for"),
    ('a = "float(\'inf\')"', "not a finite number, true/false or text"),
])
def test_bad_derived_parameters_are_one_line_at_load(tmp_path, derived, message):
    path = tmp_path / "bad.toml"
    path.write_text(f'name = "x"\ncommand = ["a"]\nmetric = "m"\n[params]\nlr = 0.1\n[derived]\n{derived}\n')
    with pytest.raises(ConfigError, match=message) as caught:
        load_experiment(path)
    assert "\n" not in str(caught.value)


def test_a_tuned_axis_may_not_be_derived(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\ncommand = ["a"]\nmetric = "m"\n[params]\nlr = 0.1\n[derived]\nmin_lr = "{lr}/10"\n'
                    '[tune]\nparam = "min_lr"\ngrid = [1.0]\n')
    with pytest.raises(ConfigError, match="tune.param 'min_lr' is derived"):
        load_experiment(path)


# each run says it started, then waits (at most 30 s) for every other run of the batch to have
# started too: it finishes in time only when the runs overlap, whatever the machine's speed
BARRIER = """
    import json, os, pathlib, time
    seed = int(os.environ["LLMEVO_PARAM_SEED"])
    folder = pathlib.Path(os.environ["LLMEVO_PARAM_FOLDER"])
    (folder / f"started-{seed}").write_text("")
    deadline = time.monotonic() + float(os.environ["LLMEVO_PARAM_WAIT"])
    while len(list(folder.glob("started-*"))) < int(os.environ["LLMEVO_PARAM_N"]):
        if time.monotonic() > deadline:
            raise SystemExit("alone")
        time.sleep(0.02)
    print(json.dumps({"val_loss": seed / 100}))
"""


def test_run_many_runs_n_at_once_and_returns_the_records_in_order(tmp_path):
    folder = tmp_path / "marks"
    folder.mkdir()
    path = make(tmp_path / "exp", f'name = "b"\ncommand = ["{{python}}", "script.py"]\nmetric = "val_loss"\n'
                                   f'timeout = 120\n[params]\nfolder = "{folder}"\nn = 2\nwait = 30.0\n', BARRIER)
    loaded = load_experiment(path)
    jobs = [(loaded.spec.params, seed) for seed in (5, 6)]
    seen = []
    records = run_many(loaded, jobs, workers=2, timeout=120, base_env=dict(os.environ), cache_dir=tmp_path / "c",
                       cache="use", on_run=lambda index, record: seen.append(index))
    assert [r["metrics"] for r in records] == [{"val_loss": 0.05}, {"val_loss": 0.06}] and sorted(seen) == [0, 1]
    assert all(r["status"] == "ok" and not r["cached"] for r in records)
    # one worker: the same barrier is never met (the reference that the test can fail)
    for mark in folder.iterdir():
        mark.unlink()
    short = {**loaded.spec.params, "wait": 1.0}
    records = run_many(loaded, [(short, 5), (short, 6)], workers=1, timeout=60, base_env=dict(os.environ),
                       cache_dir=tmp_path / "c", cache="off")
    assert records[0]["status"] == "failed" and "alone" in records[0]["error"]
    with pytest.raises(ConfigError, match="--workers must be at least 1"):
        run_many(loaded, jobs, workers=0, timeout=1, base_env={}, cache_dir=tmp_path, cache="off")


SLEEPER = """
    import json, os, pathlib, time
    seed = int(os.environ["LLMEVO_PARAM_SEED"])
    if seed == 2:
        pathlib.Path("sleeper.pid").write_text(str(os.getpid()))
        time.sleep(300)
    print(json.dumps({"val_loss": 1.0}))
"""


def test_an_interrupt_kills_every_run_still_going(tmp_path):
    path = make(tmp_path, 'name = "s"\ncommand = ["{python}", "script.py"]\nmetric = "val_loss"\n', SLEEPER)
    loaded = load_experiment(path)
    pid_file = tmp_path / "sleeper.pid"

    def interrupt(index, record):
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_many(loaded, [({}, 1), ({}, 2)], workers=2, timeout=600, base_env=dict(os.environ),
                 cache_dir=tmp_path / "c", cache="off", on_run=interrupt)
    assert time.monotonic() - started < 200  # not the sleeper's 300 s
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # a run a worker thread reaches after the stop never starts
    stop = Stop()
    stop.stop()
    pid_file.unlink()
    with pytest.raises(RunFailed, match="not started: the command was interrupted"):
        execute(loaded, {}, 2, 600, dict(os.environ), stop)
    assert not pid_file.exists()


def test_a_cached_run_keeps_the_time_it_took(tmp_path):
    script = 'import json, time; time.sleep(0.2); print(json.dumps({"val_loss": 1.0}))'
    loaded = load_experiment(make(tmp_path, 'name = "t"\ncommand = ["{python}", "script.py"]\nmetric = "val_loss"\n',
                                  script))
    options = dict(timeout=60, base_env=dict(os.environ), cache_dir=tmp_path / "cache", cache="use")
    first = run_once(loaded, {}, 1, **options)
    again = run_once(loaded, {}, 1, **options)
    assert not first["cached"] and first["wall_s"] >= 0.2
    assert again["cached"] and again["wall_s"] == first["wall_s"] and again["key"] == first["key"]
    failed = {"cached": False, "wall_s": 0.5}
    assert wall_summary([first, again, failed]) == {
        "total_s": first["wall_s"] * 2 + 0.5, "ran_s": first["wall_s"] + 0.5, "cached_s": first["wall_s"],
        "cached_runs": 1, "runs": 3}


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


def test_a_comparison_is_published_into_the_experiments_own_repository(tmp_path):
    llmevo = tmp_path / "llmevo"
    llmevo.mkdir()
    git(llmevo, "init", "-q")
    own = make(tmp_path / "mine" / "exp", 'name = "m"\ncommand = ["{python}", "script.py"]\nmetric = "val_loss"\n')
    git(tmp_path / "mine", "init", "-q")
    loaded = load_experiment(own)
    assert publish_folder(loaded, None, llmevo) == (tmp_path / "mine").resolve() / "docs" / "external"
    assert publish_folder(loaded, tmp_path / "elsewhere", llmevo) == (tmp_path / "elsewhere").resolve()
    with pytest.raises(ConfigError, match="is inside llmevo's own checkout"):
        publish_folder(loaded, llmevo / "docs", llmevo)
    loose = load_experiment(make(tmp_path / "loose", 'name = "l"\ncommand = ["{python}", "script.py"]\n'
                                                     'metric = "val_loss"\n'))
    with pytest.raises(ConfigError, match="is in no git repository.*--publish-to DIR"):
        publish_folder(loose, None, llmevo)
    inside = load_experiment(make(llmevo / "examples" / "e", 'name = "e"\ncommand = ["{python}", "script.py"]\n'
                                                            'metric = "val_loss"\n'))
    assert publish_folder(inside, None, llmevo) == llmevo.resolve() / "docs" / "external"  # an in-repo example


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key a model accepts, with its table (``read.from``), nested models recursively."""
    keys = []
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        keys.append(key)
        for inner in typing.get_args(field.annotation) or (field.annotation,):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                keys += _keys(inner, key + ".")
    return keys


def test_every_key_the_loader_accepts_is_documented():
    """Each key (nested ones by their table) has its own row on the experiment-file page."""
    page = PAGE.read_text(encoding="utf-8")
    keys = _keys(Experiment)
    assert {"name", "read.from", "read.pattern", "derived", "tune.grid", "ladder.compute"} <= set(keys)
    missing = [key for key in keys if not re.search(rf"^\| `{re.escape(key)}` \|", page, re.MULTILINE)]
    assert not missing, f"undocumented experiment-file keys: {missing}"
    documented = re.findall(r"^\| `([a-z_.]+)` \|", page, re.MULTILINE)
    assert sorted(set(documented) - set(keys)) == [], "the page documents keys the loader does not accept"
    for placeholder in ("{seed}", "{python}", "{{", "LLMEVO_PARAM_", "LLMEVO_PARAMS_FILE", "LLMEVO_METRICS_FILE"):
        assert placeholder in page


def test_an_installed_llmevo_publishes_into_a_clean_experiment_repository(tmp_path):
    """llmevo outside a checkout (a pip install) has no tree to check; the experiment's
    repository must still be clean, and the comparison lands in it."""
    from llmevo.experiments.external import ExternalRequest, plan_external

    repo = tmp_path / "mine"
    path = make(repo, 'name = "m"\ncommand = ["{python}", "script.py"]\nmetric = "val_loss"\n'
                      '[read]\nfrom = "regex"\npattern = \'val loss ([0-9.]+)\'\n[params]\nbeta = 1.0\n')
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "experiment")
    installed = tmp_path / "site-packages"
    installed.mkdir()
    request = ExternalRequest(experiment=path, method="beta=2.0", seeds=[1, 2, 3], publish=True, repo_root=installed,
                              cache_dir=tmp_path / "cache", report=False)
    plan = plan_external(request)
    assert plan.artifact == repo.resolve() / "docs" / "external" / "m" / "beta-2.0-vs-beta-1.0.json"
    (repo / "scratch.txt").write_text("uncommitted")
    with pytest.raises(ConfigError, match=f"the checkout at {repo.resolve()} has uncommitted changes"):
        plan_external(request)


def test_the_pages_example_files_are_valid():
    """Every complete experiment file on the page (``name = ...``) passes the loader's checks,
    and so do its `[read]` and `[derived]` snippets under a minimal header: the page's examples
    move with the format."""
    import tomllib

    blocks = re.findall(r"```toml\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    complete = [block for block in blocks if block.startswith("name = ")]
    assert len(complete) == 1 and len(blocks) >= 3
    for block in blocks:
        raw = tomllib.loads(block)
        if "name" not in raw:
            raw = {"name": "x", "command": ["{python}"], "metric": "val_loss",
                   "params": {"learning_rate": 1e-3, "max_iters": 2000}} | raw
        spec = Experiment(**raw)
        assert spec.read.source in ("json", "regex") and spec.metric == "val_loss"


def test_files_without_read_or_derived_keep_their_cache_keys():
    """A file written before ``[read]`` and ``[derived]`` names its runs as it did (the key's
    fields as they were, computed here by hand), so its cached runs stay valid."""
    import hashlib
    import json
    import sys

    loaded = load_experiment(REPO_ROOT / "examples" / "tiny_gpt" / "experiment.toml")
    params = {**loaded.spec.params, "steps": 15}
    argv = [entry.format_map({**params, "seed": 42, "python": sys.executable}) for entry in loaded.spec.command]
    fields = {"version": 1, "argv": argv, "files": loaded.files, "report": "stdout", "params": params, "seed": 42}
    old = hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode())
    assert run_key(loaded, params, 42) == old.hexdigest()


def test_a_run_cache_inside_the_experiments_repository_leaves_it_clean(tmp_path):
    """llmevo run from the experiment's own clone caches under ./.cache/llmevo there: git must
    not see it, or the next --publish would be refused as a dirty tree."""
    repo = tmp_path / "mine"
    path = make(repo, 'name = "m"\ncommand = ["{python}", "script.py"]\nmetric = "val_loss"\n'
                      '[read]\nfrom = "regex"\npattern = \'val loss ([0-9.]+)\'\n')
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "experiment")
    record = run_once(load_experiment(path), {}, 1, timeout=60, base_env=dict(os.environ),
                      cache_dir=repo / ".cache" / "llmevo", cache="use")
    assert record["status"] == "ok" and list((repo / ".cache" / "llmevo" / "external").glob("*/*.json"))
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""
