"""How often a ladder and ``reproduce --all`` plan a comparison, resolve the size dial and call
``ReproductionRequest.plan``, through planning and every run (``reproduce`` stubbed: it plans what
it is given, as the real one does, and trains nothing). Works on trees before and after issue 33's
sections (pass ``sections`` after them), for the LOG's before/after figures:

    PYTHONPATH=src .venv/bin/python scripts/count_planning.py [sections]
"""
import sys
import tempfile
from collections import Counter
from pathlib import Path

import llmevo.runner.scale as scale_module
from llmevo.experiments import ReproductionRequest, evidence, ladder, pipeline

counted = Counter()
def wrap(module, name, key):
    real = getattr(module, name)
    def w(*a, **k):
        counted[key] += 1
        return real(*a, **k)
    setattr(module, name, w)
wrap(pipeline, "plan_comparison", "comparison")
for m in [pipeline, ladder, evidence, scale_module] + ([__import__("llmevo.experiments.sections", fromlist=["x"])] if "sections" in sys.argv else []):
    if hasattr(m, "size_dial"): wrap(m, "size_dial", "size")
wrap(ReproductionRequest, "plan", "plan")
class Done(Exception): pass
def fake(request, progress=None, code=None):
    plan = request.plan() if isinstance(request, ReproductionRequest) else request
    raise Done
tmp = Path(tempfile.mkdtemp())
ladder.reproduce = fake
ladder.code_state = lambda plan: None
rq = ladder.LadderRequest(name="rope", rungs=[-2, -1, 0], data_dir=tmp, out=tmp / "l")
p = rq.plan()
for rung in p.rungs:
    try: ladder._run_rung(p, rung, {"baseline": [], "method": []}, None, None)
    except Done: pass
print("ladder, 3 rungs, plan + code state + 3 runs:", dict(counted)); counted.clear()
evidence.reproduce = fake
evidence.code_state = lambda plan: None
er = evidence.EvidenceRequest(preset="smoke", only=["rope", "qk_norm", "muon"], data_dir=tmp, out=tmp / "t", tune_grid=[1e-3, 3e-3])
ep = er.plan()
evidence.table_code_states(ep)
for index, (entry, r) in enumerate(ep.entries):
    try:
        evidence.request_sha256(r) if isinstance(r, ReproductionRequest) else None
        evidence._run_entry(entry, r, None, "c", None)
    except Done: pass
print("--all, 3 comparisons, plan + digests + code states + 3 runs:", dict(counted))
