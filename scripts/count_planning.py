"""How often a ladder and ``reproduce --all`` plan a comparison, resolve the size dial and call
``ReproductionRequest.plan``, through planning and every run (``reproduce`` stubbed: it plans
what it is given, as the real one does, and trains nothing; the code-state reads are left out).
It runs on trees from before and after issue 33's sections, for the LOG's before/after figures:

    PYTHONPATH=src .venv/bin/python scripts/count_planning.py
"""

from __future__ import annotations

import importlib
import tempfile
from collections import Counter
from pathlib import Path

from llmevo.experiments import ReproductionRequest, evidence, ladder, pipeline

COUNTED: Counter[str] = Counter()


class Done(Exception):
    """Raised by the stand-in for ``reproduce`` once it has planned."""


def counting(module, name: str, key: str) -> None:
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        COUNTED[key] += 1
        return real(*args, **kwargs)

    setattr(module, name, wrapper)


def stand_in(request, progress=None, code=None):
    if isinstance(request, ReproductionRequest):
        request.plan()
    raise Done


def main() -> None:
    modules = [pipeline, ladder, evidence, importlib.import_module("llmevo.runner.size")]
    try:
        modules.append(importlib.import_module("llmevo.experiments.sections"))
    except ImportError:  # before the sections
        pass
    for module in modules:
        for name, key in (("plan_comparison", "comparison"), ("size_dial", "size")):
            if name in vars(module):
                counting(module, name, key)
    counting(ReproductionRequest, "plan", "plan")
    folder = Path(tempfile.mkdtemp())
    ladder.reproduce = evidence.reproduce = stand_in
    plan = ladder.LadderRequest(name="rope", rungs=[-2, -1, 0], data_dir=folder, out=folder / "l").plan()
    for rung in plan.rungs:
        try:
            ladder._run_rung(plan, rung, {"baseline": [], "method": []}, None, None)
        except Done:
            pass
    print("ladder, 3 rungs, planned and run:", dict(COUNTED))
    COUNTED.clear()
    table = evidence.EvidenceRequest(preset="smoke", only=["rope", "qk_norm", "muon"], data_dir=folder,
                                     out=folder / "t", tune_grid=[1e-3, 3e-3]).plan()
    for entry, reproduction in table.entries:
        if isinstance(reproduction, ReproductionRequest):  # before: the digest read the request
            evidence.request_sha256(reproduction)
        try:
            evidence._run_entry(entry, reproduction, None, "code", None)
        except Done:
            pass
    print("reproduce --all, 3 comparisons, planned and run:", dict(COUNTED))


if __name__ == "__main__":
    main()
