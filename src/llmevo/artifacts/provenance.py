"""Provenance: which code, data, command and libraries produced an artifact.

``collect_provenance`` fills every field of the schema's ``provenance`` block, so that a
result can be traced to an exact commit (and whether the tree was dirty), the sha256 of
each implementation file and of the runner, the command line, the accelerator, the
library versions, the dataset fingerprint and the machine's numerics (``numerics``: the CPU,
the kernels torch dispatches to, the intra-op threads; the same code and seed trained on
another CPU gives other last bits, which a run near the stability edge turns into a
different number: docs/LOG.md, 2026-12-05, fifteenth session).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import inspect
import json
import os
import platform
import subprocess
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llmevo.digests import sha256_file
from llmevo.errors import (
    ArtifactError,
    CodeChangedError,
    CodeChangedWarning,
    ConfigError,
    WriteError,
)

NOT_A_CHECKOUT = "unknown (not a git checkout)"
NOT_INSTALLED = "not installed"
TRACKED_LIBRARIES = ("torch", "numpy", "tokenizers", "pydantic", "optuna", "llmevo")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # src/llmevo
# the llmevo source checkout: where --publish checks for uncommitted changes
REPO_ROOT = PACKAGE_ROOT.parents[1]
# every component and architecture: the ones an artifact's arms use are named by the arms
REGISTERS_EVERYTHING = "llmevo.catalog"


def module_path(name: str, root: Path = PACKAGE_ROOT) -> Path | None:
    """The source file of the llmevo module ``name`` under ``root`` (None: no such file)."""
    base = root.parent.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _listed_module_path(name: str, root: Path, listings: dict[Path, set[str]]) -> Path | None:
    """``module_path``, from folder listings kept in ``listings``."""
    base = root.parent.joinpath(*name.split("."))

    def entries(folder: Path) -> set[str]:
        if folder not in listings:
            try:
                listings[folder] = set(os.listdir(folder))
            except OSError:  # no such folder (a class name), or not a folder
                listings[folder] = set()
        return listings[folder]

    if f"{base.name}.py" in entries(base.parent) and base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if base.name in entries(base.parent) and "__init__.py" in entries(base) \
            and (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _statements(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Every statement of ``nodes`` and of the bodies nested in them: where an import can be
    (an expression holds none), without ``ast.walk``'s visit of every expression node."""
    for node in nodes:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _statements(inner)


_parsed: dict[tuple[str, Path, int, int], frozenset[str]] = {}  # (name, file, mtime, size) -> imports
IMPORTS_MEMO_FILE = "imports-v1.json"  # under a cache folder (use_imports_memo)
IMPORTS_MEMO_LIMIT = 4000  # entries; past it the memo starts again (edits add, nothing removes)


@dataclass
class _ImportsMemo:
    """Parsed import lists kept on disk between processes, keyed by a sha256 of the module's
    name and its file's bytes (so a hit is exactly what parsing the file would give): parsing
    the ~150 files a pipeline's closure reaches was ~0.4 s of every warm run (docs/LOG.md,
    2026-12-05, sixteenth session). An unreadable, malformed or unwritable memo is a miss."""

    path: Path | None
    entries: dict[str, list[str]]
    changed: bool = False

    @classmethod
    def open(cls, path: Path | None) -> _ImportsMemo:
        if path is None:
            return cls(None, {})
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            entries = {}
        valid = isinstance(entries, dict) and all(
            isinstance(v, list) and all(isinstance(m, str) for m in v) for v in entries.values())
        return cls(path, entries if valid and len(entries) <= IMPORTS_MEMO_LIMIT else {})

    def imports(self, name: str, path: Path) -> frozenset[str]:
        source, package = path.read_bytes(), path.name == "__init__.py"
        key = hashlib.sha256(f"{name}\0{package}\0".encode() + source).hexdigest()
        if key not in self.entries:
            self.entries[key] = sorted(_read_imports(name, package, source.decode("utf-8")))
            self.changed = True
        return frozenset(self.entries[key])

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        from llmevo.artifacts.io import write_text_atomic

        try:
            write_text_atomic(self.path, json.dumps(self.entries, sort_keys=True))
        except (OSError, WriteError):
            return
        self.changed = False


_memo_path: Path | None = None  # None: parse in memory only (the library's default)
_memo: _ImportsMemo | None = None


def use_imports_memo(path: Path | None) -> None:
    """Keep parsed import lists in the file ``path`` (None: in this process only); the run
    prologue points it into the cache folder."""
    global _memo_path, _memo
    if path != _memo_path:
        _memo_path, _memo = path, None


def _imports(name: str, path: Path) -> set[str]:
    """The llmevo modules a module's file imports anywhere (lazy imports too); a file read
    once per process while it is unchanged (two pipelines' closures share most files), and
    parsed once per content (``_ImportsMemo``)."""
    global _memo
    stat = path.stat()
    key = (name, path, stat.st_mtime_ns, stat.st_size)
    if key not in _parsed:
        if _memo is None:
            _memo = _ImportsMemo.open(_memo_path)
        _parsed[key] = _memo.imports(name, path)
    return set(_parsed[key])


def _read_imports(name: str, is_package: bool, source: str) -> set[str]:
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _statements(ast.parse(source).body):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(parts + ([node.module] if node.module else []))
            found.add(origin)
            found.update(f"{origin}.{alias.name}" for alias in node.names)
    return {module for module in found if module.split(".")[0] == "llmevo"}


def pipeline_modules(*roots: str, package_root: Path = PACKAGE_ROOT,
                     follow_catalog: bool = False) -> list[str]:
    """Every llmevo module that ``roots`` reach through their imports, sorted: the code a
    pipeline runs, derived instead of listed by hand. The catalog is included but not
    followed (it imports every component; an artifact names the ones its arms use) unless
    ``follow_catalog`` (the arm cache: any component's code may be what an arm runs)."""
    seen: dict[str, Path] = {}
    not_files: set[str] = set()  # names an import reaches that are no module file (a class)
    listings: dict[Path, set[str]] = {}  # folder -> its entries: one listing, not two stats a name
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in seen or name in not_files:
            continue  # looked at once: the files' imports name each module many times
        path = _listed_module_path(name, package_root, listings)
        if path is None:
            not_files.add(name)
            continue
        seen[name] = path
        if follow_catalog or name != REGISTERS_EVERYTHING:
            pending.extend(_imports(name, path))
    if _memo is not None:
        _memo.save()
    return sorted(seen)


def module_sources(names: Iterable[str], root: Path = PACKAGE_ROOT) -> list[Path]:
    """Source files of the llmevo modules ``names`` (``pipeline_modules``' list), found on
    disk without importing them: hashing a module's file must not import matplotlib or
    whatever else it imports (an error names a module with no file)."""
    files = []
    for name in names:
        path = module_path(name, root)
        if path is None:
            raise ArtifactError(f"no Python source file for module {name}")
        files.append(path.resolve())
    return files


def module_files(objects: Iterable[object]) -> list[Path]:
    """Source files of modules, classes or functions (instances map to their class).

    Resolved and deduplicated, in first-seen order; an object without a Python source
    file (a builtin, a C extension) is an ``ArtifactError``.
    """
    files: list[Path] = []
    for obj in objects:
        is_code = inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj)
        target = obj if is_code else type(obj)
        try:
            source = inspect.getsourcefile(target)  # type: ignore[arg-type]
        except TypeError:
            source = None
        if source is None:
            raise ArtifactError(
                f"no Python source file for {obj!r}; pass a module, class or function"
            )
        resolved = Path(source).resolve()
        if resolved not in files:
            files.append(resolved)
    return files


def _display_path(path: Path, repo_root: Path) -> str:
    resolved = path.resolve()
    try:
        return resolved.relative_to(repo_root.resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def combined_sha256(file_digests: dict[str, str]) -> str:
    """One sha256 over ``path\\0sha256\\n`` lines of the files, sorted by path."""
    digest = hashlib.sha256()
    for path, file_sha in sorted(file_digests.items()):
        digest.update(f"{path}\0{file_sha}\n".encode())
    return digest.hexdigest()


def _git(repo_root: Path, *args: str) -> str | None:
    try:
        completed = subprocess.run(
            ["git", "-C", str(repo_root), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return completed.stdout if completed.returncode == 0 else None


def git_head(repo_root: Path) -> str:
    """The commit checked out at ``repo_root`` (``NOT_A_CHECKOUT`` when it is not one)."""
    commit = _git(repo_root, "rev-parse", "HEAD")
    return NOT_A_CHECKOUT if commit is None else commit.strip()


def git_state(repo_root: Path, ignore: Path | None = None) -> tuple[str, bool | None]:
    """``(commit, dirty)`` of the checkout at ``repo_root``; ``(NOT_A_CHECKOUT, None)``
    when it is not one. Untracked files count as dirty; changes under ``ignore`` (a folder
    relative to ``repo_root``) do not."""
    commit = git_head(repo_root)
    if commit == NOT_A_CHECKOUT:
        return NOT_A_CHECKOUT, None
    spec = () if ignore is None else ("--", ".", f":(exclude){Path(ignore).as_posix()}")
    status = _git(repo_root, "status", "--porcelain", *spec)
    return commit, None if status is None else bool(status.strip())


def check_dirty_needs_publish(publish: bool, allow_dirty: bool) -> None:
    """``allow_dirty`` is a licence for ``publish`` only: given alone it is one refusal line
    (every request with both options validates them here)."""
    if allow_dirty and not publish:
        raise ConfigError("--allow-dirty applies to --publish only (an unpublished run may "
                          "come from any tree; provenance records whether it was dirty)")


def check_publishable(repo_root: Path, allow_dirty: bool, own_output: Path | None = None) -> None:
    """Refuse to publish from a checkout with uncommitted changes (or untracked files),
    unless ``allow_dirty``; a published result must trace to an exact commit. Outside a git
    checkout nothing can be checked, and publishing is refused too unless ``allow_dirty``.
    ``own_output``: the folder this publication writes (e.g. an evolution study's report,
    which ``evolve --explain`` adds to after the search wrote it); changes there do not count."""
    if allow_dirty:
        return
    inside = None  # a folder outside the checkout changes nothing git sees
    if own_output is not None and Path(own_output).resolve().is_relative_to(Path(repo_root).resolve()):
        inside = Path(own_output).resolve().relative_to(Path(repo_root).resolve())
    commit, dirty = git_state(repo_root, inside)
    if dirty is None:
        raise ConfigError(f"cannot publish: {repo_root} is {NOT_A_CHECKOUT}; "
                          "pass --allow-dirty to publish anyway (recorded in provenance)")
    if dirty:
        raise ConfigError(f"cannot publish: the checkout at {repo_root} has uncommitted changes; "
                          "commit them, or pass --allow-dirty (recorded in provenance)")


def library_versions() -> dict[str, str]:
    """Python and the libraries whose versions can move a result."""
    versions = {"python": platform.python_version()}
    for name in TRACKED_LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = NOT_INSTALLED
    return versions


def cpu_identity() -> dict[str, str]:
    """The CPU the math library dispatches on: vendor, model name, family/model/stepping, its
    cache size and a sha256 of its feature flags (Linux ``/proc/cpuinfo``; elsewhere
    ``platform.processor()``). MKL and oneDNN pick their kernels and blockings, and so the
    order of a matmul's sums, from these."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.split("\n\n", 1)[0].splitlines():  # the first processor's block
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    if not fields:
        return {"model": platform.processor() or platform.machine(), "flags_sha256": ""}
    flags = " ".join(sorted(fields.get("flags", fields.get("Features", "")).split()))
    return {
        "vendor": fields.get("vendor_id", fields.get("CPU implementer", "")),
        "model": fields.get("model name", fields.get("Processor", "")),
        "family_model_stepping": "/".join(fields.get(k, "") for k in ("cpu family", "model", "stepping")),
        "cache_size": fields.get("cache size", ""),
        "flags_sha256": hashlib.sha256(flags.encode("utf-8")).hexdigest()[:16],
    }


def machine_numerics() -> dict[str, Any]:
    """What on this machine can move a computed number besides the code and the data: the CPU
    (``cpu_identity``), torch's CPU kernel capability, the architecture, the intra-op
    threads now and the float32 matmul precision (call after ``torch.set_num_threads``)."""
    import torch  # imported by every caller already (they trained); not at module level

    return {
        "cpu": cpu_identity(),
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


@dataclass(frozen=True)
class CodeState:
    """The code a run used, read when the run starts: the commit, whether the tree was
    dirty, and the sha256 of every implementation file and of the runner. Capture it before
    training (``capture_code_state``), so that a commit or an edit made while a long run
    trains cannot end up in its provenance.

    ``watched`` (absolute path -> sha256) holds every ``.py`` file of the package the process
    imports from (``package_root``), the implementation files and the runner as they were then:
    parallel workers and lazily imported components load code after the start, so at write
    time ``code_changes`` reads them again (with HEAD of ``repo_root``) to tell whether code
    other than the recorded commit can have reached the run."""

    commit: str
    dirty: bool | None
    implementation_files: dict[str, str]
    runner_sha256: str
    watched: dict[str, str] = dataclass_field(default_factory=dict)
    repo_root: Path | None = None
    package_root: Path | None = None


def package_sources(package_root: Path = PACKAGE_ROOT) -> list[Path]:
    """Every ``.py`` file under ``package_root``, resolved and sorted: what a worker process
    or a lazy import can load."""
    return sorted(path.resolve() for path in Path(package_root).rglob("*.py"))


def _digests(paths: Iterable[Path | str]) -> dict[str, str | None]:
    """sha256 of each file (None: no longer there or unreadable), keyed by its path text."""
    found: dict[str, str | None] = {}
    for path in paths:
        try:
            found[str(path)] = sha256_file(path)
        except OSError:
            found[str(path)] = None
    return found


def capture_code_state(
    implementation_files: Iterable[Path], runner_file: Path, repo_root: Path,
    package_root: Path | None = PACKAGE_ROOT,
) -> CodeState:
    """The code state now (``CodeState``); ``package_root`` None watches only the
    implementation files and the runner."""
    implementation = [Path(path).resolve() for path in implementation_files]
    runner = Path(runner_file).resolve()
    watched = {str(path): sha256_file(path) for path in [*implementation, runner]}  # each must be there
    if package_root is not None:
        watched.update((key, value) for key, value in _digests(package_sources(package_root)).items()
                       if value is not None)
    file_digests = {_display_path(path, repo_root): watched[str(path)] for path in implementation}
    commit, dirty = git_state(repo_root)
    return CodeState(commit, dirty, dict(sorted(file_digests.items())), watched[str(runner)], watched,
                     Path(repo_root), None if package_root is None else Path(package_root).resolve())


@dataclass(frozen=True)
class CodeChange:
    """How the code differs from a run's start state (``code_changes``): HEAD now where it
    moved (None: it did not), and the watched files that differ, appeared or went away
    (display paths, sorted)."""

    commit_now: str | None
    files: list[str]

    def describe(self, start_commit: str) -> str:
        parts = []
        if self.commit_now is not None:
            parts.append(f"HEAD moved from {start_commit[:12]} to {self.commit_now[:12]}")
        if self.files:
            shown = ", ".join(self.files[:CHANGED_FILES_SHOWN])
            more = len(self.files) - CHANGED_FILES_SHOWN
            parts.append(f"{len(self.files)} source file{'s' if len(self.files) != 1 else ''} changed "
                         f"({shown}{f' and {more} more' if more > 0 else ''})")
        return "; ".join(parts)

    def record(self) -> dict[str, Any]:
        """The artifact's optional ``provenance.code_changed`` block."""
        return {"commit_now": self.commit_now, "files": list(self.files)}


CHANGED_FILES_SHOWN = 3  # in an error line; the artifact's record lists them all


def code_changes(start: CodeState) -> CodeChange | None:
    """What changed since ``start`` was captured, read now (None: nothing): HEAD of its
    checkout, and the sha256 of every watched file plus any ``.py`` file that appeared under
    its package. One git call, and a stat of each source (``sha256_file`` reads again only a
    file whose size, modification time or inode moved; measured in docs/LOG.md, 2026-12-06)."""
    commit_now = None
    if start.repo_root is not None and start.commit != NOT_A_CHECKOUT:
        head = git_head(start.repo_root)  # git_state's reader: one answer to "which commit"
        commit_now = None if head == start.commit else head
    paths = set(start.watched)
    if start.package_root is not None:
        paths.update(str(path) for path in package_sources(start.package_root))
    now = _digests(sorted(paths))
    root = start.repo_root or Path("/")
    files = sorted(_display_path(Path(path), root) for path in paths if now[path] != start.watched.get(path))
    return None if commit_now is None and not files else CodeChange(commit_now, files)


def check_code_unchanged(start: CodeState, publish: bool, allow_dirty: bool = False,
                         what: str = "the artifact") -> CodeChange | None:
    """At write time: refuse to publish (``CodeChangedError``, nothing written) when the code
    changed since ``start`` (``code_changes``), unless ``allow_dirty``; otherwise return the
    change (None: none) for the artifact to record, with a ``CodeChangedWarning``."""
    change = code_changes(start)
    if change is None:
        return None
    said = change.describe(start.commit)
    if publish and not allow_dirty:
        raise CodeChangedError(
            f"cannot publish {what}: the code changed while the run trained ({said}), so workers or "
            f"lazily imported modules may have run code other than {start.commit[:12]}; nothing was "
            "written. The trained runs are in the arm cache: rerun the same command from a tree nobody "
            "changes while it runs, and the runs whose code did not change load from the cache")
    warnings.warn(f"the code changed while the run trained ({said}); the artifact records it in "
                  "provenance.code_changed", CodeChangedWarning, stacklevel=2)
    return change


def collect_provenance(
    *,
    command: str,
    dataset_fingerprint: str,
    accelerator: str,
    artifact_path: str | None,
    implementation_files: Iterable[Path] = (),
    runner_file: Path | None = None,
    repo_root: Path | None = None,
    code: CodeState | None = None,
    allow_dirty: bool | None = None,
    publish: bool = False,
    since: CodeState | None = None,
) -> dict[str, Any]:
    """Every provenance field of schema v2, in the documented order.

    ``code`` is the code state captured when the run started; without it the code state is
    read now from ``implementation_files``, ``runner_file`` and ``repo_root``.
    ``allow_dirty`` records whether a published artifact was allowed to come from a dirty
    tree (``--publish --allow-dirty``); None (not recorded) for unpublished runs.

    A start state (``code``, or ``since`` where the code state is read now) is compared with
    the code now (``check_code_unchanged``): a change refuses ``publish`` (unless
    ``allow_dirty``) before anything is written, and is otherwise recorded as
    ``code_changed`` with a warning."""
    start = code if code is not None else since
    change = None if start is None else check_code_unchanged(
        start, publish, bool(allow_dirty), artifact_path or "the artifact")
    if code is None:
        if runner_file is None or repo_root is None:
            raise ArtifactError("collect_provenance needs either code= or runner_file and repo_root")
        code = capture_code_state(implementation_files, runner_file, repo_root, package_root=None)
    return {
        "artifact_path": artifact_path,
        "code_commit": code.commit,
        "code_dirty": code.dirty,
        **({} if allow_dirty is None else {"allow_dirty": allow_dirty}),
        **({} if change is None else {"code_changed": change.record()}),
        "implementation_sha256": combined_sha256(code.implementation_files),
        "implementation_files": dict(code.implementation_files),
        "runner_sha256": code.runner_sha256,
        "command": command,
        "accelerator": accelerator,
        "library_versions": library_versions(),
        "numerics": machine_numerics(),
        "dataset_fingerprint": dataset_fingerprint,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
