"""Every per-seed run the published artifacts record, keyed; the keys whose numbers disagree.

A run is keyed by what should decide its number: the machine where the artifact records it
(``provenance.numerics``: CPU, threads; with the run's execution path), the arm (its model genome with every
component's typed config resolved and spelled one way, ``runner.cache.canonical_model``;
its optimizer with its resolved config; its post-training gene and data recipe), the
learning rate, the seed, whether it is a tuning or a report run, the training settings the
artifact records (steps, batch, sequence length, schedule, warmup, weight decay, clipping;
each arm's whole ``train`` block where the artifact has one), the preset and the data
(fingerprint and variant), and the metric. Runs under one key that read different numbers
are listed with the two artifacts, their commits, and everything their records say
differently about those runs: the commit and the training-relevant source files whose
sha256 differ (``provenance.implementation_files``), the intra-op threads (``--threads``
in the command, else torch's default), how the run executed (``setup.training_path`` for a
report seed; for a tuning run, the size of the ``train_many`` call it was part of: a lone
run trains in the command's process at its threads, a call of several on the parallel path
in single-thread workers), whether it came from the arm cache, its token-stream sha256, and
the library versions.

Which files are artifacts: every ``*.json`` reproduction artifact under ``docs/`` (the
papers' ``metrics/`` folders and the ladders' ``rung*.json``) and every evolution summary
(its final comparison's per-seed runs); a ladder's ``ladder.json`` and the leaderboard are
derived from those and are not read again.

    PYTHONPATH=src python scripts/cross_artifact_keys.py [--docs docs] [--threshold 0.01]
        [--json OUT.json] [--all]

Prints the number of runs, of keys, of keys in two or more artifacts, how closely they
agree (and at lr 3e-3 on quick-sized models), then each key that differs by more than the
threshold (relative), its values per artifact and what differs between the two farthest.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETUP_TRAIN = {  # setup field -> TrainConfig field (what every schema-v2 artifact records)
    "steps_per_variant": "steps", "batch_size": "batch_size", "sequence_length": "seq_len",
    "schedule": "schedule", "warmup_steps": "warmup_steps", "weight_decay": "weight_decay",
    "grad_clip": "grad_clip",
}
# source files whose change can move a trained number (model, trainer, optimizers, data, evaluation)
NUMERIC_PREFIXES = ("src/llmevo/train/", "src/llmevo/model/", "src/llmevo/components/",
                    "src/llmevo/data/", "src/llmevo/eval/lm.py", "src/llmevo/eval/suites.py",
                    "src/llmevo/runner/run.py", "src/llmevo/runner/views.py",
                    "src/llmevo/runner/presets.py", "src/llmevo/runner/tuning.py",
                    "src/llmevo/runner/scale.py", "src/llmevo/runner/size.py")
THREADS = re.compile(r"--threads[ =](\d+)")


@dataclass
class Run:
    """One per-seed number in one artifact, with what the artifact records about its run."""

    artifact: str
    key: str  # canonical JSON of the key parts
    parts: dict[str, Any]
    value: float | None  # None: diverged
    commit: str
    record: dict[str, Any] = field(default_factory=dict)  # everything else the artifact says


def lr_key(lr: float) -> float:
    """A learning rate to 12 significant digits: 0.009 and 0.009000000000000001 are one."""
    return float(f"{float(lr):.12g}")


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def model_identity(genome: dict[str, Any]) -> dict[str, Any]:
    """The genome's model, every component resolved to its full typed config and spelled one
    way (``runner.cache.canonical_model``); as written where it no longer validates."""
    from llmevo.model.config import ModelConfig
    from llmevo.runner.cache import canonical_model

    try:
        return canonical_model(ModelConfig.model_validate(genome["model"]))
    except Exception:  # noqa: BLE001  (a genome of an older schema: compared as written)
        return {"as_written": genome["model"]}


def optimizer_identity(choice: dict[str, Any]) -> dict[str, Any]:
    from llmevo.registry import ComponentChoice
    from llmevo.runner.cache import resolved_choice

    try:
        return resolved_choice("optimizer", ComponentChoice.model_validate(choice))
    except Exception:  # noqa: BLE001
        return {"as_written": choice}


def threads_of(command: str) -> str:
    found = THREADS.search(command or "")
    return found.group(1) if found else "default"


def numeric_files(files: dict[str, str]) -> dict[str, str]:
    return {path: sha for path, sha in files.items() if path.startswith(NUMERIC_PREFIXES)}


def machine_part(artifact: dict[str, Any], path: str | None) -> dict[str, Any] | str:
    """The machine's side of a run where the artifact records it (``provenance.numerics``, from
    2026-12-05 on: the CPU, the threads) with the run's execution path: a run on another CPU,
    thread count or path trains to other last bits, so it is another key. Earlier artifacts
    recorded none of it: their runs share keys across machines, as the issue's 12 did."""
    numerics = (artifact.get("provenance") or {}).get("numerics")
    if not numerics:
        return "not recorded"
    return {"cpu": numerics.get("cpu"), "threads": numerics.get("threads"),
            "float32_matmul_precision": numerics.get("float32_matmul_precision"), "path": path}


def train_settings(artifact: dict[str, Any], arm: str) -> dict[str, Any]:
    """The arm's recorded training settings: its ``train`` block where the artifact has one
    (2026-12-05 on), else the setup's fields; the lr is keyed separately."""
    block = artifact[arm].get("train")
    if isinstance(block, dict) and "steps" in block:
        return {k: v for k, v in block.items() if k not in ("lr", "optimizer")}
    setup = artifact["setup"]
    return {name: setup[key] for key, name in SETUP_TRAIN.items() if key in setup}


def common_record(artifact: dict[str, Any], path: str) -> dict[str, Any]:
    provenance = artifact.get("provenance", {})
    return {
        "commit": provenance.get("code_commit", "?"),
        "dirty": provenance.get("code_dirty"),
        "created_at": provenance.get("created_at"),
        "command": provenance.get("command", ""),
        "threads": (provenance.get("numerics") or {}).get("threads") or threads_of(provenance.get("command", "")),
        # the machine: recorded from 2026-12-05 on (provenance.numerics); before, only the day
        "cpu": ((provenance.get("numerics") or {}).get("cpu") or {}).get("model", "not recorded"),
        "day": (provenance.get("created_at") or "")[:10],
        "library_versions": provenance.get("library_versions", {}),
        "files": numeric_files(provenance.get("implementation_files", {})),
        "objective": artifact.get("setup", {}).get("objective"),
        "artifact": path,
    }


def reproduction_runs(artifact: dict[str, Any], path: str) -> Iterator[Run]:
    """The report runs (``per_seed``) and tuning runs (``tuning``) of a reproduction artifact."""
    setup, dataset = artifact["setup"], artifact.get("dataset", {})
    base = common_record(artifact, path)
    cache = artifact.get("cache") or {}
    tuning = artifact.get("tuning") or {}
    paths = setup.get("training_path") or {}
    for arm in ("baseline", "method"):
        block = artifact[arm]
        genome = block.get("genome") or {}
        if "model" not in genome:
            continue
        recipes = dataset.get("data_recipes") or {}
        identity = {
            "model": model_identity(genome),
            "post_training": genome.get("post_training"),
            "data": {"fingerprint": (recipes.get(arm) or {}).get("fingerprint") or dataset.get("fingerprint"),
                     "variant": dataset.get("variant"),
                     "recipe": {k: v for k, v in (recipes.get(arm) or {}).items() if k in ("name", "config")}},
            "preset": setup.get("preset"),
            "train": train_settings(artifact, arm),
        }
        init_from = setup.get("init_from")
        if init_from:
            identity["init_weights_sha256"] = init_from.get("weights_sha256")
        arm_cache = cache.get(arm) or {}
        cached_tuning = {(lr_key(t["lr"]), int(t["seed"])) for t in arm_cache.get("tuning", [])}
        # report runs: the arm's chosen lr (tuned) or the setup's
        lr = block.get("learning_rate") or setup.get("learning_rate")
        metric = setup.get("verdict_metric", "lm_loss")
        tokens = (setup.get("token_stream_sha256_by_arm") or {}).get(arm, {})
        for row in artifact.get("per_seed", []):
            values = row.get(arm) or {}
            if metric not in values or lr is None:
                continue
            seed = int(row["seed"])
            parts = {**identity, "optimizer": optimizer_identity(genome["optimizer"]),
                     "lr": lr_key(lr), "seed": seed, "role": "report", "metric": metric,
                     "machine": machine_part(artifact, (paths.get(arm) or {}).get(str(seed)))}
            record = {**base, "arm": f"{arm} {block.get('name')}", "path": (paths.get(arm) or {}).get(str(seed)),
                      "cached": seed in (arm_cache.get("report_seeds") or []) if cache else None,
                      "token_stream_sha256": tokens.get(str(seed)), "call": f"report seeds {setup.get('seeds')}"}
            yield Run(path, canonical(parts), parts, float(values[metric]), base["commit"], record)
        arm_tuning = (tuning.get("arms") or {}).get(arm)
        if not arm_tuning:
            continue
        space = arm_tuning.get("space") or {}
        calls = tuning_calls(tuning, arm_tuning)
        for setting in arm_tuning.get("settings", []):
            optimizer = dict(genome["optimizer"])
            train = dict(identity["train"])
            lr = setting["lr"]
            if tuning.get("protocol") == "space":  # each trial's own settings, axis by axis
                config = dict(optimizer.get("config") or {})
                # the chosen trial's settings are the genome's; start from the declared defaults
                for spec in space.values():
                    config.pop(spec.get("setting", "").split(".", 1)[-1], None)
                for axis, value in (setting.get("values") or {}).items():
                    where, _, name = space.get(axis, {}).get("setting", f"train.{axis}").partition(".")
                    if where == "optimizer":
                        config[name] = value
                    elif name != "lr":
                        train[name] = value
                optimizer = {"name": optimizer["name"], "config": config}
            for seed_text, value in (setting.get("validation") or {}).items():
                seed = int(seed_text)
                run_path = (setting.get("paths") or {}).get(seed_text)
                parts = {**identity, "train": train, "optimizer": optimizer_identity(optimizer),
                         "lr": lr_key(lr), "seed": seed, "role": "tuning", "metric": tuning.get("metric"),
                         "machine": machine_part(artifact, run_path)}
                cached = ((lr_key(lr), seed) in cached_tuning or seed in (setting.get("cached_seeds") or [])
                          ) if cache else None
                record = {**base, "arm": f"{arm} {block.get('name')}", "cached": cached,
                          "call": calls.get((lr_key(lr), seed), "?"), "path": run_path, "token_stream_sha256": None}
                yield Run(path, canonical(parts), parts, None if value is None else float(value),
                          base["commit"], record)


def tuning_calls(tuning: dict[str, Any], arm: dict[str, Any]) -> dict[tuple[float, int], str]:
    """Which ``train_many`` call each tuning run of a grid block was part of, and its size:
    the grid (every grid lr x tuning seed), the edge extension (one lr x the tuning seeds),
    the confirmation (two lrs x the confirmation seeds). A call of one run trains in the
    command's own process at its threads, whatever the path."""
    seeds = [int(s) for s in tuning.get("seeds", [])]
    confirm = [int(s) for s in tuning.get("confirm_seeds", [])]
    calls: dict[tuple[float, int], str] = {}
    if tuning.get("protocol") == "space":
        for setting in arm.get("settings", []):
            for seed in setting.get("validation", {}):
                calls[(lr_key(setting["lr"]), int(seed))] = f"space trial {setting.get('trial')} ({setting.get('phase')})"
        return calls
    grid = {lr_key(lr) for lr in tuning.get("grid", [])}
    confirmed = {lr_key(lr) for lr in arm.get("confirmed") or []}
    for setting in arm.get("settings", []):
        lr = lr_key(setting["lr"])
        for seed_text in setting.get("validation", {}):
            seed = int(seed_text)
            if seed in confirm and lr in confirmed:
                calls[(lr, seed)] = f"confirmation: {len(confirmed) * len(confirm)} runs"
            elif lr in grid:
                calls[(lr, seed)] = f"grid: {len(grid) * len(seeds)} runs"
            else:
                calls[(lr, seed)] = f"edge extension: {len(seeds)} run(s)"
    return calls


def evolution_runs(summary: dict[str, Any], path: str) -> Iterator[Run]:
    """An evolution summary's final comparison: the baseline and the champion under the
    report seeds at their tuned learning rates (the final preset's other settings)."""
    final = summary.get("final_evaluation") or {}
    tuning = summary.get("final_tuning") or {}
    preset = (summary.get("settings") or {}).get("final_preset") or {}
    base = common_record(summary, path)
    train = {name: (preset.get("train") or {}).get(name) for name in SETUP_TRAIN.values()}
    dataset = summary.get("dataset") or {}
    for arm in ("baseline", "champion"):
        genome = (summary.get(arm) or {}).get("genome") or (summary.get("champion") or {}).get("genome")
        if arm == "baseline":
            genome = None  # the summary's baseline is llama_modern with the preset's AdamW
        chosen = ((tuning.get("arms") or {}).get(arm) or {}).get("chosen", {}).get("lr")
        if chosen is None:
            continue
        if genome is None:
            from llmevo.model.config import ModelConfig

            genome = {"model": ModelConfig().model_dump(mode="json"), "optimizer": preset["train"]["optimizer"]}
        arm_train = dict(train)
        for name, value in (genome.get("train") or {}).items():
            if name != "lr":
                arm_train[name] = value
        identity = {"model": model_identity(genome), "post_training": (genome.get("post_training") or {"name": "none", "config": {}}),
                    "data": {"fingerprint": dataset.get("fingerprint"), "variant": dataset.get("variant"), "recipe": {}},
                    "preset": preset.get("name"), "train": arm_train}
        for row in final.get("per_seed", []):
            values = ((row.get(arm) or {}).get("validation") or {})
            if "lm_loss" not in values:
                continue
            seed = int(row["seed"])
            run_path = ((final.get("training_path") or {}).get(arm) or {}).get(str(seed))
            parts = {**identity, "optimizer": optimizer_identity(genome["optimizer"]), "lr": lr_key(chosen),
                     "seed": seed, "role": "report", "metric": "lm_loss", "machine": machine_part(summary, run_path)}
            record = {**base, "arm": f"{arm} (evolution final comparison)",
                      "path": ((final.get("training_path") or {}).get(arm) or {}).get(str(seed)), "cached": None,
                      "token_stream_sha256": ((final.get("token_stream_sha256") or {}).get(arm) or {}).get(str(seed)),
                      "call": "final comparison"}
            yield Run(path, canonical(parts), parts, float(values["lm_loss"]), base["commit"], record)


def collect(docs: Path) -> list[Run]:
    runs: list[Run] = []
    for file in sorted(docs.rglob("*.json")):
        if file.name in ("ladder.json", "LEADERBOARD.json", "papers.json", "knockouts.json"):
            continue
        try:
            artifact = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        path = file.relative_to(docs.parent).as_posix()
        if not isinstance(artifact, dict):
            continue
        if artifact.get("kind") == "evolution":
            runs.extend(evolution_runs(artifact, path))
        elif "per_seed" in artifact and "setup" in artifact and "baseline" in artifact:
            runs.extend(reproduction_runs(artifact, path))
    return runs


def relative_spread(values: list[float | None]) -> float:
    finite = [v for v in values if v is not None]
    if len(finite) < len(values):
        return math.inf  # diverged under one record, trained under another
    return (max(finite) - min(finite)) / min(abs(v) for v in finite)


def record_differences(a: Run, b: Run) -> dict[str, Any]:
    """What the two records say differently about their runs (key parts are equal)."""
    out: dict[str, Any] = {}
    for name in ("commit", "dirty", "day", "cpu", "threads", "path", "cached", "call", "token_stream_sha256",
                 "objective"):
        if a.record.get(name) != b.record.get(name):
            out[name] = [a.record.get(name), b.record.get(name)]
    versions = {k: [a.record["library_versions"].get(k), b.record["library_versions"].get(k)]
                for k in sorted(set(a.record["library_versions"]) | set(b.record["library_versions"]))
                if a.record["library_versions"].get(k) != b.record["library_versions"].get(k)}
    if versions:
        out["library_versions"] = versions
    files_a, files_b = a.record["files"], b.record["files"]
    both = set(files_a) & set(files_b)
    changed = sorted(p for p in both if files_a[p] != files_b[p])
    if changed:
        out["numeric_source_changed"] = changed
    if not files_a or not files_b:
        out["numeric_source_changed"] = "not recorded in one of them"
    return out


def numeric_classes(groups: dict[str, list[Run]]) -> tuple[list[list[str]], list[tuple[str, str, str]]]:
    """Artifacts joined where one trained key reads the same to the last bit in both (runs
    loaded from the arm cache are copies and join nothing); and the contradictions: two
    artifacts of one class that read one trained key differently. No contradiction means:
    within a class every shared key agrees to the bit, across classes (nearly) none does, as
    when one commit runs on different machines."""
    parent: dict[str, str] = {}

    def find(item: str) -> str:
        parent.setdefault(item, item)
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    fresh_groups = [[r for r in group if r.record.get("cached") is not True and r.value is not None]
                    for group in groups.values()]
    for group in fresh_groups:
        for a in group:
            find(a.artifact)
            for b in group:
                if a.artifact != b.artifact and a.value == b.value:
                    parent[find(a.artifact)] = find(b.artifact)
    contradictions = [(a.artifact, b.artifact, a.key) for group in fresh_groups for a in group for b in group
                      if a.artifact < b.artifact and a.value != b.value and find(a.artifact) == find(b.artifact)]
    classes: dict[str, list[str]] = defaultdict(list)
    for item in parent:
        classes[find(item)].append(item)
    return sorted((sorted(c) for c in classes.values()), key=len, reverse=True), contradictions


def keyed(runs: list[Run]) -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        groups[run.key].append(run)
    return groups


def describe(parts: dict[str, Any]) -> str:
    model = parts["model"]
    slots = " / ".join(f"{model[s]['name']}" + (f"{model[s]['config']}" if model[s].get("config") else "")
                       for s in ("position", "attention", "feedforward", "norm", "block") if s in model)
    size = f"d{model.get('d_model')} l{model.get('n_layers')} h{model.get('n_heads')}"
    train = parts["train"]
    return (f"{slots} [{size}] {parts['optimizer']['name']} lr {parts['lr']:g} seed {parts['seed']} "
            f"{parts['role']} | steps {train.get('steps')} batch {train.get('batch_size')} "
            f"warmup {train.get('warmup_steps')} | {parts['preset']} {parts['data']['variant']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="the folder of published artifacts")
    parser.add_argument("--threshold", type=float, default=0.01,
                        help="relative difference above which a key is listed (default 0.01)")
    parser.add_argument("--json", type=Path, help="write every shared key and its runs here")
    parser.add_argument("--all", action="store_true", help="list every key that differs at all")
    parser.add_argument("--classes", action="store_true",
                        help="also group the artifacts into classes that agree to the last bit on every "
                             "shared key they trained (one class per machine, where the code did not "
                             "change the numbers), with their dates")
    args = parser.parse_args(argv)

    runs = collect(args.docs)
    groups = keyed(runs)
    shared = {key: group for key, group in groups.items() if len({r.artifact for r in group}) > 1}
    spreads = {key: relative_spread([r.value for r in group]) for key, group in shared.items()}
    at_3e3 = [s for key, s in spreads.items() if shared[key][0].parts["lr"] == 3e-3
              and shared[key][0].parts["model"].get("d_model") == 64
              and shared[key][0].parts["train"].get("steps") == 330]
    absolute_3e3 = [max(v for v in (r.value for r in shared[k]) if v is not None)
                    - min(v for v in (r.value for r in shared[k]) if v is not None)
                    for k in shared if shared[k][0].parts["lr"] == 3e-3
                    and shared[k][0].parts["model"].get("d_model") == 64
                    and shared[k][0].parts["train"].get("steps") == 330
                    and all(r.value is not None for r in shared[k])]
    listed = {k: s for k, s in spreads.items() if s > (0 if args.all else args.threshold)}
    print(f"{len(runs)} per-seed runs in {len({r.artifact for r in runs})} artifacts; {len(groups)} keys; "
          f"{len(shared)} keys in two or more artifacts")
    print(f"  identical to the bit: {sum(1 for s in spreads.values() if s == 0)}; "
          f"within 1e-6: {sum(1 for s in spreads.values() if s <= 1e-6)}; "
          f"within 1e-4: {sum(1 for s in spreads.values() if s <= 1e-4)}; "
          f"above {args.threshold:g}: {sum(1 for s in spreads.values() if s > args.threshold)}")
    if at_3e3:
        print(f"  lr 3e-3 on the quick-sized model (330 steps): {len(at_3e3)} shared keys, largest "
              f"relative spread {max(at_3e3):.2e}, largest absolute {max(absolute_3e3):.2e}")
    for key in sorted(listed, key=lambda k: -listed[k]):
        group = shared[key]
        ordered = sorted(group, key=lambda r: (r.value is None, r.value or 0.0))
        low, high = ordered[0], ordered[-1]
        print(f"\n{describe(group[0].parts)}  (spread {listed[key]:.2%})")
        for run in sorted(group, key=lambda r: r.record.get("created_at") or ""):
            value = "diverged" if run.value is None else f"{run.value:.6f}"
            print(f"  {value}  {run.artifact}  {run.record['arm']}  commit {run.commit[:7]} "
                  f"{(run.record.get('created_at') or '')[:16]}  threads {run.record['threads']}  "
                  f"call {run.record['call']}  path {run.record['path']}  cached {run.record['cached']}")
        print(f"  differs ({low.artifact} vs {high.artifact}): "
              f"{json.dumps(record_differences(low, high), default=str)}")
    if args.classes:
        classes, contradictions = numeric_classes(shared)
        print(f"\n{len(classes)} classes of artifacts that agree to the last bit on the keys they share "
              f"({len(contradictions)} contradictions: one class, one key, two numbers)")
        dates = {r.artifact: (r.record.get("created_at") or "")[:16] for r in runs}
        for number, members in enumerate(classes, 1):
            when = sorted(dates[m] for m in members)
            print(f"  class {number}: {len(members)} artifacts, {when[0]} .. {when[-1]}")
            for member in sorted(members, key=lambda m: dates[m]):
                print(f"    {dates[member]}  {member}")
        for a, b, _ in contradictions[:20]:
            print(f"  contradiction: {a} vs {b}")
        pairs: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])  # (day, day) -> [same, other]
        for group in shared.values():
            fresh = [r for r in group if r.record.get("cached") is not True and r.value is not None]
            for i, a in enumerate(fresh):
                for b in fresh[i + 1:]:
                    if a.artifact != b.artifact:
                        days = tuple(sorted((a.record["day"], b.record["day"])))
                        pairs[days][0 if a.value == b.value else 1] += 1
        print("\npairs of trained (not cached) runs of one key, by the days their artifacts were made: "
              "bit-identical / different")
        for days, (same, other) in sorted(pairs.items()):
            print(f"  {days[0]} x {days[1]}: {same} / {other}")
    if args.json:
        args.json.write_text(json.dumps([
            {"key": group[0].parts, "spread": spreads[key],
             "runs": [{"artifact": r.artifact, "value": r.value, **{k: v for k, v in r.record.items() if k != "files"}}
                      for r in group]}
            for key, group in sorted(shared.items(), key=lambda kv: -spreads[kv[0]])], indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
