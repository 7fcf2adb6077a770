"""What the publish-time code check costs, and what a forked training worker imports after the fork.

``--cost``: medians over repetitions of reading a reproduction's code state at its start (the
recorded files only, as before; and with every source file of the package watched, as now)
and of ``code_changes`` at its write. ``--workers NAME``: a reproduction of NAME on the
parallel path (forked workers, two seeds, a few steps, nothing cached) that lists, per worker,
the llmevo modules it imported after the fork (read from disk then, not the parent's).

    PYTHONPATH=src python scripts/code_check_cost.py --cost --data-dir /work/shared/data
    PYTHONPATH=src python scripts/code_check_cost.py --workers rope --data-dir /work/shared/data
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def median_ms(call: Callable[[], object], repetitions: int) -> float:
    times = []
    for _ in range(repetitions):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def cost(data_dir: Path, repetitions: int) -> None:
    from llmevo.artifacts import provenance
    from llmevo.experiments import reproduction
    from llmevo.experiments.pipeline import ReproductionRequest, _implementation_modules

    plan = ReproductionRequest(name="rope", data_dir=data_dir, seeds=[42], threads=1).plan()
    files = (provenance.module_files(reproduction.implementation_objects(plan.comparison))
             + provenance.module_sources(_implementation_modules()))
    runner = Path(reproduction.__file__)
    state = provenance.capture_code_state(files, runner, plan.repo_root)
    print(json.dumps({
        "implementation_files": len(files), "package_files": len(provenance.package_sources()),
        "start_recorded_only_ms": median_ms(lambda: provenance.capture_code_state(
            files, runner, plan.repo_root, package_root=None), repetitions),
        "start_with_package_ms": median_ms(lambda: provenance.capture_code_state(files, runner, plan.repo_root),
                                           repetitions),
        "write_check_ms": median_ms(lambda: provenance.code_changes(state), repetitions),
        "load_average": os.getloadavg()[0]}))


def worker_imports(name: str, data_dir: Path) -> None:
    from llmevo.experiments import ReproductionRequest, reproduce
    from llmevo.train import execution

    out = Path(tempfile.mkdtemp())
    original = execution._worker

    def worker(*args: object) -> None:
        before = {module for module in sys.modules if module.startswith("llmevo")}
        try:
            original(*args)
        finally:
            after = {module for module in sys.modules if module.startswith("llmevo")}
            (out / f"worker-{os.getpid()}.json").write_text(json.dumps(sorted(after - before)))

    execution._worker = worker
    reproduce(ReproductionRequest(name=name, steps=3, seeds=[42, 43], device="cpu", threads=1, report=False,
                                  arm_cache=False, path="parallel", data_dir=data_dir, out=out / "a.json"))
    imported = [json.loads(path.read_text()) for path in sorted(out.glob("worker-*.json"))]
    print(json.dumps({"name": name, "workers": len(imported), "imported_after_fork": imported}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="The shared data folder.")
    parser.add_argument("--cost", action="store_true", help="Time the start state and the write check.")
    parser.add_argument("--repetitions", type=int, default=21, help="Repetitions per timing (median).")
    parser.add_argument("--workers", metavar="NAME", help="List what NAME's forked workers import after the fork.")
    args = parser.parse_args()
    if args.cost:
        cost(args.data_dir, args.repetitions)
    if args.workers:
        worker_imports(args.workers, args.data_dir)


if __name__ == "__main__":
    main()
