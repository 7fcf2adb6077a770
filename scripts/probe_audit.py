"""What the lr grid's adequacy probe (``runner.tuning.adequacy_probe``) would do to published
rows: for each arm of each lr-grid-tuned artifact, the probe the protocol would now train
(``probe_lr`` of the arm's recorded grid, its extension included) is trained on the artifact's
tuning seeds at the artifact's training settings (``selection_noise.request_for``, the arm
cache used: a run trained before identically is loaded), and compared with the arm's best on
those seeds before it, against the seed noise the probe uses (the declared 1.42% with one
tuning seed). Nothing is published or rerun; each arm's record goes to the runs file (one JSON
line each, resumed: an arm already there is not trained again).

    LLMEVO_CACHE=/work/main/.cache/llmevo PYTHONPATH=src python scripts/probe_audit.py \\
        --runs probe-audit.jsonl --threads 1 ARTIFACT.json ...
    python scripts/probe_audit.py --shape docs/reproductions/*/metrics/public-quick-tuned*.json

``--check``: also retrain each arm's recorded best on the tuning seeds, to see that the
settings rebuilt here give the artifact's number. ``--shape`` trains nothing: over every
grid arm, whether the tuning-seed loss falls monotonically from the grid's bottom to its best
and rises monotonically from the best to its top (the reason the probe looks above only).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch
from measure_common import data_and_cache_dirs, done_records

from llmevo.artifacts import load_artifact
from llmevo.experiments.plans import PREPARATIONS
from llmevo.experiments.reproduction import cache_code_modules
from llmevo.experiments.selection_noise import request_for
from llmevo.runner.cache import ArmCache
from llmevo.runner.run import arm_train_config, score_arm
from llmevo.runner.tuning import GridTuner, gap_percent, probe_lr, seed_noise, tune_arm
from llmevo.runner.views import load_views


def tuning_seed_means(arm: dict, seeds: list[str]) -> dict[float, float | None]:
    """Each full-length setting's mean over the block's tuning ``seeds`` alone (None: diverged)."""
    means = {}
    for setting in arm["settings"]:
        if setting.get("stopped_at") is not None:
            continue
        values = [setting["validation"].get(seed) for seed in seeds]
        finite = all(v is not None and math.isfinite(v) for v in values)
        means[setting["lr"]] = math.fsum(values) / len(values) if finite else None
    return means


def arm_shape(means: dict[float, float | None]) -> dict:
    """Below the best: does the loss fall at every step up to it? Above: does it rise at
    every step after it (a diverged run counts as a rise)?"""
    lrs = sorted(means)
    finite = {lr: m for lr, m in means.items() if m is not None}
    best = min(finite, key=lambda lr: (finite[lr], lr))
    place = lrs.index(best)
    below, above = lrs[: place + 1], lrs[place:]
    falls = all(means[a] is not None and means[b] is not None and means[a] > means[b]
                for a, b in zip(below, below[1:], strict=False))
    rises = all(means[b] is None or (means[a] is not None and means[b] > means[a])
                for a, b in zip(above, above[1:], strict=False))
    return {"best_place": place, "points": len(lrs), "falls_below": falls, "rises_above": rises,
            "below_points": place, "above_points": len(lrs) - 1 - place}


def shape_report(paths: list[Path]) -> None:
    counted = {"arms": 0, "below": 0, "below_ok": 0, "above": 0, "above_ok": 0}
    breaks = []
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        block = data.get("tuning")
        if not block or block.get("protocol", "grid") != "grid":
            continue
        seeds = [str(s) for s in block["seeds"]]
        for label, arm in block["arms"].items():
            shape = arm_shape(tuning_seed_means(arm, seeds))
            counted["arms"] += 1
            if shape["below_points"]:
                counted["below"] += 1
                counted["below_ok"] += shape["falls_below"]
            if shape["above_points"]:
                counted["above"] += 1
                counted["above_ok"] += shape["rises_above"]
            if not (shape["falls_below"] and shape["rises_above"]):
                breaks.append((path.parent.parent.name, label, "below" if not shape["falls_below"] else "above"))
    print(f"grid arms: {counted['arms']}; with points below the best: {counted['below']}, the loss falling "
          f"at every step to the best in {counted['below_ok']}; with points above: {counted['above']}, rising "
          f"at every step after it in {counted['above_ok']}")
    for row, label, side in breaks:
        print(f"  not monotone {side} the best: {row} {label}")


def audit(path: Path, data_dir: Path, cache_dir: Path, check: bool, done: set, runs: Path) -> None:
    artifact = load_artifact(path)
    block = artifact.tuning
    if block is None or block.protocol != "grid":
        print(f"{path}: not an lr-grid-tuned artifact; skipped")
        return
    raw = json.loads(path.read_text(encoding="utf-8"))["tuning"]
    seeds = [str(s) for s in block.seeds]
    plan = request_for(artifact, data_dir, cache_dir).updated(path="sequential", threads=1).plan()
    comparison, metric = plan.comparison, plan.comparison.metric
    corpus, preset, views = load_views(plan.preset, [arm.data for arm in comparison.arms],
                                       plan.data_dir, plan.cache_dir, None)
    cache = ArmCache.open(plan.cache_dir, plan.device, plan.execution, "use", cache_code_modules())
    for arm in comparison.arms:
        key = (str(path), arm.label)
        if key in done:
            continue
        if arm.prepare is not None:
            arm = replace(arm, model=PREPARATIONS[arm.prepare](arm, views[arm.data], corpus,
                                                               plan.cache_dir, plan.seeds[0]))
        recorded = raw["arms"][arm.label]
        means = tuning_seed_means(recorded, seeds)
        finite = {lr: m for lr, m in means.items() if m is not None}
        best = min(finite, key=lambda lr: (finite[lr], lr))
        noise = seed_noise(None, [[s["validation"].get(seed) for seed in seeds] for s in recorded["settings"]
                                  if s["lr"] in finite], len(seeds))
        probe = probe_lr(sorted(means))
        lrs = (best, probe) if check else (probe,)
        data = views[arm.data]
        entries = None if cache is None else cache.tuning(arm, data, preset, metric, comparison.objective)
        started = time.perf_counter()
        result = tune_arm(arm.label, arm_train_config(arm, data, preset),
                          GridTuner(lrs, tuple(block.seeds), extend_edges=False),
                          partial(score_arm, arm, data, preset, device=plan.device, metric=metric,
                                  execution=plan.execution, cache=entries))
        seconds = time.perf_counter() - started
        by_lr = {s.lr: s for s in result.settings}
        probed = by_lr[probe]
        gap = None if probed.mean is None else gap_percent(probed.mean, finite[best])
        record = {
            "artifact": str(path), "row": path.parent.parent.name, "arm": arm.label,
            "grid": sorted(means), "chosen": recorded["chosen"]["lr"], "best_before": best,
            "best_mean": finite[best], "probe": probe, "probe_values": {str(k): v for k, v in probed.values.items()},
            "probe_mean": probed.mean, "gap_percent": gap, "threshold_percent": noise.threshold,
            "moves": gap is not None and -gap > noise.threshold,
            "cached": [list(c) for c in result.cached], "seconds": round(seconds, 1),
            **({"check_mean": by_lr[best].mean} if check else {}),
        }
        with runs.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
        print(json.dumps(record))


def table(records: list[dict]) -> None:
    print("| row | arm | grid | best before (tuning seed) | probe | probe's loss | gap % | moves (noise 1.42%) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in records:
        grid = f"{min(r['grid']):.3g} .. {max(r['grid']):.3g} ({len(r['grid'])})"
        loss = "diverged" if r["probe_mean"] is None else f"{r['probe_mean']:.4f}"
        gap = "—" if r["gap_percent"] is None else f"{r['gap_percent']:+.2f}"
        check = "" if "check_mean" not in r else f" [retrained {r['check_mean']:.4f}]"
        against = Path(r["artifact"]).name.partition("-vs-")[2].partition("-seeds")[0]
        row = r["row"] + (f" (vs {against})" if against else "")
        print(f"| {row} | {r['arm']} | {grid} | {r['best_before']:.3g}: {r['best_mean']:.4f}{check} | "
              f"{r['probe']:.3g} | {loss} | {gap} | {'**yes**' if r['moves'] else 'no'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifacts", nargs="+", type=Path)
    parser.add_argument("--runs", type=Path, default=Path("probe-audit.jsonl"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--check", action="store_true", help="also retrain each arm's recorded best")
    parser.add_argument("--shape", action="store_true", help="read the grids' shapes only; train nothing")
    parser.add_argument("--table", action="store_true", help="print the runs file as a table; train nothing")
    args = parser.parse_args()
    if args.shape:
        shape_report(args.artifacts)
        return
    if not args.table:
        torch.set_num_threads(args.threads)
        data_dir, cache_dir = data_and_cache_dirs()
        for path in args.artifacts:
            done = {(r["artifact"], r["arm"]) for r in done_records(args.runs)}
            audit(path, data_dir, cache_dir, args.check, done, args.runs)
    table(done_records(args.runs))


if __name__ == "__main__":
    main()
