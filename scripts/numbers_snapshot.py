"""Every number a refactor must leave as it is, in one JSON file, to compare before and after.

Runs, with the arm cache off and on the CPU with one thread:
- every registered component's smoke reproduction (seed 42; post-training methods too);
- one tuned smoke reproduction (relu2, three seeds, a three-point grid);
- the same on a grid whose best is its top (extended once, then confirmed at the stability
  edge), under ``--tune-fidelity halving`` on a five-point grid, and two space tunings
  (``--tune-space lr`` with its lr-grid floor; ``--tune-space full`` under halving);
- the arm cache's entries written by a tuned reproduction in this process (keys, kinds and
  payloads; the code digest in each key fixed, so that the keys of two trees compare);
- the golden training run (``tests/assets/golden.py``);
- a tiny evolution (five trials, one worker, fair lr-grid trials, then the tuned final
  comparison, its typed artifact included).
Wall-clock fields, paths and provenance are dropped; everything else is kept exactly.

    .venv/bin/python scripts/numbers_snapshot.py OUT.json [--only rope,relu2]
    diff <(jq -S . before.json) <(jq -S . after.json)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__import__("os").environ.get("LLMEVO_DATA", ROOT.parent / "shared" / "data"))
# timings, paths and provenance: everything that differs between two runs of the same code
VOLATILE = {"wall_seconds", "provenance", "post_training_seconds", "created_at", "command",
            "started_at", "finished_at", "datetime_start", "datetime_complete", "duration",
            "cpu_seconds", "reproduction_wall_seconds", "seconds", "duration_seconds",
            "search_wall_seconds_this_invocation", "storage_display", "entropy_model_path",
            "tokens_per_second",  # a cache entry's training speed
            "manifest_ref", "scope"}  # the last two name a temporary folder


def scrub(value):
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def reproducible_names() -> tuple[list[str], set[str]]:
    """The components with a reproduction, and which of them are post-training methods."""
    listing = subprocess.run([sys.executable, "-m", "llmevo", "components", "--json"],
                             capture_output=True, text=True, check=True)
    rows = json.loads(listing.stdout)
    post_training = {row["name"] for row in rows if row.get("slot") == "post_training" and row["name"] != "none"}
    return sorted(row["name"] for row in rows if row.get("ablation") and row["ablation"] != "none"
                  or row["name"] in post_training), post_training


def reproduce(name: str, out: Path, *extra: str, cached: bool = False) -> dict | str:
    """``cached``: a post-training method, whose runs are never cached (it refuses
    ``--no-arm-cache``)."""
    command = [sys.executable, "-m", "llmevo", "reproduce", name, "--preset", "smoke",
               *([] if cached else ["--no-arm-cache"]), "--no-report", "--threads", "1", "--device", "cpu",
               "--data-dir", str(DATA), "--out", str(out), *extra]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
    return scrub(json.loads(out.read_text()))


def cache_entries(folder: Path) -> dict:
    """Every arm-cache entry a tuned reproduction (relu2, halving, lr grid extended) writes: its
    file name (the key) -> kind and payload. The code digest each key holds is fixed here, so the
    keys of two trees are equal exactly when the key computation and its inputs are."""
    from llmevo.experiments import ReproductionRequest, RunSection, reproduce
    from llmevo.runner import cache

    cache.source_sha256 = lambda root=None, modules=None: "fixed"  # type: ignore[assignment]
    run = RunSection(data_dir=DATA, cache_dir=folder / "cache", threads=1, device="cpu")
    reproduce(ReproductionRequest(name="relu2", preset="smoke", seeds=[42], report=False, run=run,
                                  out=folder / "cached.json", tune=True, steps=9,
                                  tune_grid=[1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2], tune_fidelity="halving"))
    entries = {}
    for path in sorted((folder / "cache" / "arms").rglob("*.json")):
        entry = json.loads(path.read_text())
        payload = scrub(entry["payload"])
        entries[path.name] = {"kind": entry["kind"], "payload": payload}
    return entries


def evolution(folder: Path) -> dict:
    import optuna

    from llmevo.evolve import EvolutionSettings, run

    storage = f"sqlite:///{folder / 'study.db'}"
    settings = EvolutionSettings(
        study="snapshot", storage=storage, preset="smoke", trials=5, workers=1,
        population=3, tournament=2, rescore_seeds=1, sampler_seed=0, data_dir=DATA,
        cache_dir=folder / "cache", seeds=[42, 43], tune_grid=[1e-3, 3e-3], threads=1,
        trial_steps=6, eval_windows=4, device="cpu", out=folder / "report")
    summary = run(settings)
    study = optuna.load_study(study_name="snapshot", storage=storage)
    trials = [{"number": t.number, "state": str(t.state), "value": t.value,
               "user_attrs": scrub(t.user_attrs)} for t in study.trials]
    comparison = folder / "report" / "final-comparison.json"  # the final comparison's artifact
    return {"summary": scrub(summary.model_dump(mode="json")) if summary else None, "trials": trials,
            **({"final_comparison": scrub(json.loads(comparison.read_text()))} if comparison.exists() else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", default=None)
    parser.add_argument("--skip-evolve", action="store_true")
    args = parser.parse_args()
    names, post_training = reproducible_names()
    names = args.only.split(",") if args.only else names
    snapshot: dict = {"smoke": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in names:
            print(f"smoke {name}", file=sys.stderr, flush=True)
            snapshot["smoke"][name] = reproduce(name, folder / f"{name}.json", "--seeds", "42",
                                                cached=name in post_training)
        print("tuned relu2", file=sys.stderr, flush=True)
        snapshot["tuned"] = reproduce("relu2", folder / "tuned.json", "--tune", "--seeds", "42,43,44",
                                      "--steps", "3", "--tune-grid", "1e-3,3e-2,1e-2")
        print("tuned relu2 under halving", file=sys.stderr, flush=True)
        snapshot["tuned_halving"] = reproduce("relu2", folder / "halving.json", "--tune", "--seeds", "42,43",
                                              "--steps", "9", "--tune-grid", "1e-3,2e-3,4e-3,8e-3,1.6e-2",
                                              "--tune-fidelity", "halving")
        print("tuned relu2 on a grid's edge", file=sys.stderr, flush=True)  # extended, then confirmed
        snapshot["tuned_edge"] = reproduce("relu2", folder / "edge.json", "--tune", "--seeds", "42",
                                           "--steps", "3", "--tune-grid", "1e-4,2e-4")
        print("space-tuned muon", file=sys.stderr, flush=True)
        snapshot["tuned_space"] = reproduce("muon", folder / "space.json", "--tune", "--seeds", "42",
                                            "--steps", "3", "--tune-space", "lr", "--tune-trials", "4")
        snapshot["tuned_space_halving"] = reproduce(
            "muon", folder / "space-halving.json", "--tune", "--seeds", "42", "--steps", "9",
            "--tune-space", "full", "--tune-trials", "8", "--tune-fidelity", "halving")
        print("arm-cache entries", file=sys.stderr, flush=True)
        snapshot["cache_entries"] = cache_entries(folder / "cache-entries")
        sys.path.insert(0, str(ROOT / "tests" / "assets"))
        from golden import golden_run

        snapshot["golden"] = golden_run()
        if not args.skip_evolve:
            print("evolve", file=sys.stderr, flush=True)
            snapshot["evolve"] = evolution(folder / "evolve")
    args.out.write_text(json.dumps(snapshot, indent=1, sort_keys=True))
    failed = [n for n, v in snapshot["smoke"].items() if isinstance(v, str)]
    print(f"wrote {args.out}: {len(names)} smoke reproductions ({len(failed)} failed: {failed})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
