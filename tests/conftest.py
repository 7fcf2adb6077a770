"""Shared fixtures. Tests may read the environment; the library may not."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_CACHE = REPO_ROOT / ".cache" / "llmevo-test"  # the cache_dir fixture's folder

# A pytest-xdist worker starts with COLUMNS=80 in its environment, and a rich Console created
# while COLUMNS is set keeps that width for good (llmevo.cli's console is made at import), so
# a test's own COLUMNS would be ignored. Unset before anything imports the CLI.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


def _skip_cuda_tests_without_cuda(items) -> None:
    """A test marked ``cuda`` skips where torch sees no CUDA device (``scripts/gpu_check.py``
    runs ``pytest -m cuda`` on a lent GPU, where none may skip)."""
    needing = [item for item in items if item.get_closest_marker("cuda")]
    if not needing:
        return
    import torch

    if torch.cuda.is_available():
        return
    for item in needing:
        item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
EMBEDDED_DATA = TEST_CACHE / "data"  # the data_dir fixture's folder when no data folder is given
FIXTURE_REFERENCES = REPO_ROOT / "tests" / "fixtures" / "reference-artifacts"
OFFLINE_MIRROR = "http://127.0.0.1:9"  # the discard port: nothing answers, nothing is fetched
NOT_EMBEDDED = "which the package does not embed"  # in the reason of a skip for want of data


def given_data_dir() -> Path | None:
    """The full data folder when one is given: ``$LLMEVO_DATA``, else ``<repo>/../shared/data``
    when it exists; None on a fresh clone."""
    if os.environ.get("LLMEVO_DATA"):
        return Path(os.environ["LLMEVO_DATA"]).resolve()
    return SHARED_DATA.resolve() if SHARED_DATA.is_dir() else None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The data directory: the full one when given (``given_data_dir``); else a default data
    folder of the test cache holding the sets embedded in the package (unpacked as a user's
    would be), whose mirror is a port where nothing answers. A test that reads another set
    there is skipped, naming the file (``_skip_without_full_data``)."""
    given = given_data_dir()
    if given is not None:
        return given
    from llmevo.data.store import prepare_managed, unpack_embedded

    folder = prepare_managed(EMBEDDED_DATA, OFFLINE_MIRROR)
    unpack_embedded(folder)  # tests may open these files directly
    return folder


@pytest.fixture
def full_data_dir(data_dir: Path) -> Path:
    """The full data folder, for a test whose *subprocess* reads sets the package does not
    embed (there ``_skip_without_full_data`` cannot reach); skipped without one."""
    if given_data_dir() is None:
        pytest.skip(f"needs the full data sets, some {NOT_EMBEDDED}: "
                    "set LLMEVO_DATA to a full data folder (llmevo data fetch --to DIR)")
    return data_dir


@pytest.fixture(scope="session", autouse=True)
def _tests_never_touch_the_user_data_folder():
    """A command run in-process without a data folder fills the test cache's default data
    folder, never the user's (``~/.cache/llmevo/data``)."""
    from llmevo.data import store

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store, "default_data_dir", lambda: TEST_CACHE / "default-data")
        yield


@pytest.fixture(scope="session", autouse=True)
def _skip_without_full_data():
    """Without a data folder, a test that asks the embedded-only folder for a set the package
    does not carry (WikiText-2 raw, GSM8K, HH-RLHF) is skipped with the file's name, instead of
    failing on the download that cannot happen. Reads of any other folder are untouched."""
    if given_data_dir() is not None:
        yield
        return
    from llmevo.data import store

    provide = store.provide

    def provide_or_skip(path, *args, **kwargs):
        root = store.managed_root(path)
        if root is not None and root == EMBEDDED_DATA.resolve() and not Path(path).is_file():
            relative = Path(path).absolute().relative_to(root).as_posix()
            if relative in store.ALL_PINS and relative not in store.EMBEDDED_FILES:
                pytest.skip(f"needs {relative}, {NOT_EMBEDDED}: "
                            "set LLMEVO_DATA to a full data folder (llmevo data fetch --to DIR)")
        return provide(path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store, "provide", provide_or_skip)
        yield


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """The reference artifacts: ``$LLMEVO_REFERENCE_ARTIFACTS``, else ``reference-artifacts``
    beside the given data folder, else the byte-identical copies committed under
    ``tests/fixtures/reference-artifacts`` (``test_reference_fixtures_match_the_shared_ones``)."""
    if os.environ.get("LLMEVO_REFERENCE_ARTIFACTS"):
        folder = Path(os.environ["LLMEVO_REFERENCE_ARTIFACTS"])
        if not folder.is_dir():
            pytest.fail(f"reference artifacts not found at {folder}; set LLMEVO_REFERENCE_ARTIFACTS")
        return folder
    given = given_data_dir()
    beside = None if given is None else given.parent / "reference-artifacts"
    return beside if beside is not None and beside.is_dir() else FIXTURE_REFERENCES


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """One cache for the whole test session (tokenizer, token arrays), kept between runs."""
    TEST_CACHE.mkdir(parents=True, exist_ok=True)
    return TEST_CACHE


_SESSION_MARK = "LLMEVO_TEST_SESSION"  # set by the outermost pytest; children inherit it


def pytest_configure(config) -> None:
    """The arm entries of earlier sessions are dropped, so every session starts from trained
    numbers: once, in the outermost pytest's main process. Never in a pytest-xdist worker,
    and never in a pytest a test starts (``components check`` runs the contract suite on this
    tree, which loads this file): either would delete, in the middle of another test, what
    that test had just trained."""
    if hasattr(config, "workerinput") or os.environ.get(_SESSION_MARK):
        return
    os.environ[_SESSION_MARK] = "1"
    shutil.rmtree(TEST_CACHE / "arms", ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _tests_never_touch_the_user_cache(cache_dir: Path):
    """CLI runs in tests use the test cache, never ``.cache/llmevo``: a test that patches
    training must not leave arm-cache entries a real run would read."""
    previous = os.environ.get("LLMEVO_CACHE")
    os.environ["LLMEVO_CACHE"] = str(cache_dir)
    yield
    if previous is None:
        os.environ.pop("LLMEVO_CACHE", None)
    else:
        os.environ["LLMEVO_CACHE"] = previous


@pytest.fixture(scope="session")
def smoke_corpus(data_dir: Path, cache_dir: Path):
    """The reference protocol's corpus (tokenized WikiText-2, 120k/8k/8k, narrative 120k)."""
    from llmevo.data.lm import load_lm_corpus
    from llmevo.runner.presets import get_preset

    return load_lm_corpus(data_dir, "tokens", get_preset("smoke").budgets, cache_dir)


@pytest.fixture(scope="session", autouse=True)
def _one_intra_op_thread():
    """Tiny tensors run far faster on one thread than on two contended ones."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def workdir(tmp_path, monkeypatch, cache_dir, data_dir):
    """An empty working folder (cwd) with the test cache and data directory in the env."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    monkeypatch.setenv("LLMEVO_DATA", str(data_dir))
    return work


def pytest_runtest_logreport(report) -> None:
    """With ``$LLMEVO_TEST_DATA_SKIPS=FILE``: append the node id of each test skipped for want
    of a data set (``.ci/run`` runs those again where the full data is). The outermost process
    only: pytest-xdist hands it every worker's reports."""
    record = os.environ.get("LLMEVO_TEST_DATA_SKIPS")
    if record and report.skipped and NOT_EMBEDDED in str(report.longrepr) and not _IN_WORKER:
        with open(record, "a", encoding="utf-8") as handle:
            handle.write(report.nodeid + "\n")


_IN_WORKER = "PYTEST_XDIST_WORKER" in os.environ


def pytest_addoption(parser):
    parser.addoption("--plugin", default=None, metavar="DIST",
                     help="contract suite: only the components this plugin distribution registered")


def pytest_collection_modifyitems(config, items):
    """Marked ``cuda`` without CUDA: skipped. ``--plugin DIST``: keep the contract tests of
    DIST's components, deselect the rest."""
    _skip_cuda_tests_without_cuda(items)
    plugin = config.getoption("--plugin")
    if plugin is None:
        return
    from llmevo.catalog import full_registry

    registry = full_registry()

    def origin(item) -> str | None:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "name" not in params:
            return None
        try:
            return registry.get(params.get("slot", "optimizer"), params["name"]).origin
        except Exception:  # a parameter called "name" that is not a component
            return None

    keep = [item for item in items if origin(item) == plugin]
    if not keep:
        raise pytest.UsageError(f"--plugin {plugin}: no collected test is about a component of it")
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


@pytest.fixture(autouse=True)
def _no_interrupt_outlives_its_test():
    """An interrupt a test delivered in this process (to the command line run in-process, to an
    in-process evolve worker) is forgotten when the test ends: training checks for one at every
    step (``interrupts.stop_if_received``), so a leftover would stop the next test's training."""
    yield
    from llmevo import interrupts

    interrupts.reset()
