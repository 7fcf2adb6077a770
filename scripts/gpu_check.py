"""The prepared GPU check (issue 21 item 8): one short plan for a lent CUDA device.

Three steps, each a child process with its own hard time budget (killed with its process
group when the budget runs out; the plan goes on to the next step):

1. ``cuda-tests``: the CUDA-only tests (``@pytest.mark.cuda``; every test file that carries
   the marker), counted from pytest's JUnit XML: passed, failed, errors, skipped.
2. ``bench``: ``llmevo bench --replicas 1,8,64 --json`` on the device (aggregate training
   tokens/s and peak memory per R, beside the sequential baseline and one model).
3. ``train``: one rung of the size dial (default rung 7, 15.5M parameters) as the Python API's
   ``reproduce(ReproductionRequest(name="rope", preset="quick", rung=7, tune=False, ...))``
   with a shorter ``steps`` (default 200 per arm), no report, no arm cache: per-arm training
   tokens/s from the trainer, the end-to-end wall time, torch.cuda.max_memory_allocated.

It prints one block of figures for docs/LOG.md and writes the same as JSON to ``--out``.
Exit status: 0 when every step passed, 1 when one failed or ran out of its budget, 2 for bad
input (one line on stderr, nothing written), including the full mode on a machine without
CUDA. ``--dry-run`` runs the same plan on the CPU at tiny sizes (rung -2 for a few steps,
replicas 1,2, a small bench batch) in well under a minute, so that the suite can test the
script; its JSON says ``"gpu_figures": false`` and none of its numbers is a GPU figure.

    python scripts/gpu_check.py --out $OUT/gpu-check.json --data-dir .gpucheck/data
    python scripts/gpu_check.py --dry-run --out /tmp/gpu-check.json --threads 1
    scripts/gpu_check.sh  # on the device machine: installs the carried wheels, runs the above
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "llmevo.gpu-check/1"
TAIL_CHARS = 2000  # of each step's output, kept in the JSON


@dataclass(frozen=True)
class Plan:
    """What one check runs: the full CUDA plan or the CPU dry run (``plan_for``)."""

    device: str
    dry_run: bool
    replicas: str
    bench_steps: int
    bench_batch_size: int
    bench_seq_len: int
    rung: int
    train_steps: int
    suite: str | None  # None: quick's own evaluation suite
    threads: int | None
    budgets: dict[str, float]  # step name -> seconds


@dataclass
class StepResult:
    name: str
    command: list[str]
    budget_seconds: float
    status: str = "not run"  # ok, failed, timeout
    returncode: int | None = None
    wall_seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    output_tail: str = ""


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run the prepared GPU check (CUDA tests, bench --replicas, one >= 10M rung) "
                    "within hard per-step budgets; print the figures and write them as JSON.")
    parser.add_argument("--out", type=Path,
                        help="JSON file for the figures (its folder must exist).")
    parser.add_argument("--dry-run", action="store_true",
                        help="Run the same plan on the CPU at tiny sizes (no GPU figure).")
    parser.add_argument("--data-dir", type=Path,
                        default=Path(os.environ.get("LLMEVO_DATA", ROOT.parent / "shared" / "data")),
                        help="Data directory (default $LLMEVO_DATA, else ../shared/data).")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="Tokenizer and token cache (default: a fresh temporary folder).")
    parser.add_argument("--rung", type=int, default=None,
                        help="Size-dial rung of the train step (default 7: 15.5M parameters; dry run -2).")
    parser.add_argument("--train-steps", type=int, default=None,
                        help="Training steps per arm of the train step (default 200; dry run 4).")
    parser.add_argument("--replicas", default=None,
                        help="Replica counts for the bench step (default 1,8,64; dry run 1,2).")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads of every step.")
    for name, full, dry in (("tests", 90, 60), ("bench", 150, 90), ("train", 270, 120)):
        parser.add_argument(f"--budget-{name}", type=float, default=None,
                            help=f"Seconds the {name} step may run (default {full}; dry run {dry}).")
    parser.add_argument("--total-budget", type=float, default=None,
                        help="Seconds the whole plan may run; the step budgets must fit in it "
                             "(default 540; dry run 300).")
    parser.add_argument("--commit", default=None,
                        help="The tree's commit, where the copy has no .git (default: git rev-parse HEAD).")
    parser.add_argument("--train-child", type=Path, help=argparse.SUPPRESS)  # the train step itself
    return parser.parse_args(argv)


def plan_for(args: argparse.Namespace) -> Plan:
    """The checked plan; every refusal is one line and exit 2, before anything runs."""
    dry = args.dry_run
    if args.out is None:
        fail("--out FILE is required: the JSON file for the figures")
    budgets = {"cuda-tests": args.budget_tests or (60.0 if dry else 90.0),
               "bench": args.budget_bench or (90.0 if dry else 150.0),
               "train": args.budget_train or (120.0 if dry else 270.0)}
    total = args.total_budget or (300.0 if dry else 540.0)
    for name, seconds in [*budgets.items(), ("total", total)]:
        if not seconds > 0 or seconds != seconds:
            fail(f"the {name} budget must be a positive number of seconds, got {seconds}")
    if sum(budgets.values()) > total:
        fail(f"the step budgets ({' + '.join(f'{s:g}' for s in budgets.values())} s) exceed "
             f"--total-budget {total:g} s")
    replicas = args.replicas or ("1,2" if dry else "1,8,64")
    try:
        counts = [int(part) for part in replicas.split(",")]
    except ValueError:
        fail(f"--replicas {replicas!r}: expected comma-separated whole numbers such as 1,8,64")
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        fail(f"--replicas {replicas!r}: each count must be at least 1 and given once")
    steps = args.train_steps if args.train_steps is not None else (4 if dry else 200)
    if steps < 1:
        fail(f"--train-steps {steps}: need at least 1")
    if args.threads is not None and args.threads < 1:
        fail(f"--threads {args.threads}: need at least 1")
    out = args.out
    if out.exists() and not out.is_file():
        fail(f"--out {out}: exists and is not a file")
    if not out.parent.is_dir():
        fail(f"--out {out}: folder {out.parent} does not exist")
    if not os.access(out.parent, os.W_OK):
        fail(f"--out {out}: folder {out.parent} is not writable")
    if not args.data_dir.is_dir():
        fail(f"--data-dir {args.data_dir}: not a folder (copy the data set there, or set LLMEVO_DATA)")
    if args.cache_dir is not None and args.cache_dir.exists() and not args.cache_dir.is_dir():
        fail(f"--cache-dir {args.cache_dir}: exists and is not a folder")
    import torch  # after the cheap checks

    if not dry and not torch.cuda.is_available():
        fail(f"no CUDA device: torch {torch.__version__} sees none (torch.cuda.is_available() is "
             "False); this check needs one, or run it with --dry-run on the CPU")
    from llmevo.errors import ConfigError
    from llmevo.runner.size import RUNGS, size_at

    rung = args.rung if args.rung is not None else (-2 if dry else 7)
    if rung not in RUNGS:
        fail(f"--rung {rung}: unknown rung; known: {min(RUNGS)}..{max(RUNGS)}")
    try:
        size_at(rung)
    except ConfigError as error:
        fail(str(error))
    return Plan(device="cpu" if dry else "cuda", dry_run=dry, replicas=",".join(map(str, counts)),
                bench_steps=3 if dry else 60, bench_batch_size=8 if dry else 48,
                bench_seq_len=16 if dry else 64, rung=rung, train_steps=steps,
                suite="core" if dry else None, threads=args.threads, budgets=budgets | {"total": total})


def device_facts(device: str, commit: str | None) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"type": device, "torch": torch.__version__, "cuda": torch.version.cuda,
                             "python": platform.python_version(), "machine": platform.machine(),
                             "cpu_count": os.cpu_count()}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        facts |= {"name": torch.cuda.get_device_name(0), "capability": f"{props.major}.{props.minor}",
                  "total_memory_mib": round(props.total_memory / 2**20),
                  "multiprocessors": props.multi_processor_count,
                  "cudnn": torch.backends.cudnn.version()}
    else:
        facts["name"] = platform.processor() or platform.machine()
    if commit:
        facts["commit"] = commit
        return facts
    try:
        facts["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                         text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        facts["commit"] = None  # the device machine's copy of the tree may carry no .git
    return facts


def run_step(step: StepResult, budget: float, log: Path, env: dict[str, str]) -> None:
    """Run ``step.command`` in its own process group; kill the group when ``budget`` runs out."""
    started = time.perf_counter()
    with log.open("w") as output:
        child = subprocess.Popen(step.command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
                                 env=env, start_new_session=True)
        try:
            step.returncode = child.wait(timeout=budget)
            step.status = "ok" if step.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            step.status = "timeout"
            step.message = f"stopped at its budget of {budget:g} s"
            _stop(child)
        except BaseException:  # Ctrl-C or SIGTERM: no child left behind
            _stop(child)
            raise
    step.wall_seconds = round(time.perf_counter() - started, 2)
    step.output_tail = log.read_text(errors="replace")[-TAIL_CHARS:]


def _stop(child: subprocess.Popen) -> None:
    for number, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(child.pid, number)
        except ProcessLookupError:
            break
        try:
            child.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


def cuda_test_files() -> list[str]:
    """Every test file that marks a test ``@pytest.mark.cuda``."""
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                  if "pytest.mark.cuda" in path.read_text())


def junit_counts(report: Path) -> dict[str, int]:
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def check_tests(step: StepResult, report: Path, plan: Plan) -> None:
    if not report.is_file():
        step.status, step.message = "failed", step.message or "pytest wrote no report"
        return
    counts = junit_counts(report)
    step.figures = counts
    if counts["failures"] or counts["errors"]:
        step.status = "failed"
    elif counts["tests"] == 0:
        step.status, step.message = "failed", "no CUDA test was collected"
    elif plan.dry_run:
        step.message = "dry run: every CUDA test skips on the CPU" if counts["skipped"] == counts["tests"] else ""
    elif counts["skipped"]:  # on a CUDA machine nothing may skip for want of one
        step.status, step.message = "failed", f"{counts['skipped']} CUDA test(s) skipped on a CUDA device"


def bench_figures(output: str) -> dict[str, Any]:
    """The rows ``llmevo bench --replicas ... --json`` printed (a JSON list)."""
    rows = json.loads(output[output.index("["):output.rindex("]") + 1])
    keep = ("replicas", "path", "requested_path", "train_tokens_per_second", "steady_tokens_per_second",
            "setup_seconds", "wall_seconds", "peak_memory_mib", "vs_sequential", "speedup")
    single = rows[0]["single_model_tokens_per_second"] if rows else None
    return {"single_model_tokens_per_second": single,
            "single_model_peak_memory_mib": rows[0]["single_model_peak_memory_mib"] if rows else None,
            "rows": [{key: row.get(key) for key in keep} for row in rows]}


def train_child(spec_path: Path) -> int:
    """The train step, run in its own process: one reproduction at the plan's rung."""
    import torch

    from llmevo.experiments import ReproductionRequest, reproduce

    spec = json.loads(spec_path.read_text())
    device = torch.device(spec["device"])

    class Recorder:
        """Each run's steps and the trainer's tokens/s at its last step."""

        def __init__(self) -> None:
            self.runs: list[dict[str, Any]] = []

        def start(self, total: int, description: str) -> None:
            self.runs.append({"run": description, "steps": 0, "planned_steps": total,
                              "tokens_per_second": None})

        def update(self, step: int, loss: float, tokens_per_second: float) -> None:
            self.runs[-1] |= {"steps": step, "loss": loss, "tokens_per_second": tokens_per_second}
            if step % 25 == 0:  # what a step stopped at its budget still reports
                partial = {"partial": True, "rung": spec["rung"], "steps_per_arm": spec["steps"],
                           "runs": self.runs, "seconds": round(time.perf_counter() - started, 2)}
                Path(spec["figures"]).write_text(json.dumps(partial, indent=2))

        def stop(self) -> None:
            pass

    recorder = Recorder()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    artifact = reproduce(ReproductionRequest(
        name="rope", preset="quick", rung=spec["rung"], steps=spec["steps"], seeds=[42], tune=False,
        device=spec["device"], threads=spec["threads"], suite=spec["suite"], report=False,
        arm_cache=False, data_dir=Path(spec["data_dir"]), cache_dir=Path(spec["cache_dir"]),
        out=Path(spec["artifact"])), progress=recorder)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - started
    setup = artifact.setup
    trained = [run for run in recorder.runs if run["steps"]]
    figures = {
        "name": "rope", "rung": setup.rung, "parameters": setup.parameters,
        "steps_per_arm": spec["steps"], "training_tokens_per_arm": setup.training_tokens,
        "end_to_end_seconds": round(wall, 2),
        "runs": trained,
        "train_tokens_per_second": [run["tokens_per_second"] for run in trained],
        "peak_memory_mib": (torch.cuda.max_memory_allocated(device) / 2**20
                            if device.type == "cuda" else None),
        "lm_loss": {"baseline": artifact.baseline.lm_loss, "method": artifact.method.lm_loss},
    }
    Path(spec["figures"]).write_text(json.dumps(figures, indent=2))
    return 0


def step_commands(plan: Plan, args: argparse.Namespace, work: Path) -> list[StepResult]:
    threads = ["--threads", str(plan.threads)] if plan.threads else []
    files = cuda_test_files()
    tests = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda",
             f"--junitxml={work / 'cuda-tests.xml'}", *files]
    bench = [sys.executable, "-m", "llmevo", "bench", "--device", plan.device, "--json",
             "--replicas", plan.replicas, "--steps", str(plan.bench_steps),
             "--batch-size", str(plan.bench_batch_size), "--seq-len", str(plan.bench_seq_len), "--path", "batched",
             *(["--warmup", "1"] if plan.dry_run else []), *threads]
    spec = {"device": plan.device, "rung": plan.rung, "steps": plan.train_steps, "suite": plan.suite,
            "threads": plan.threads, "data_dir": str(args.data_dir.resolve()),
            "cache_dir": str((args.cache_dir or work / "cache").resolve()),
            "artifact": str(work / "rope-rung.json"), "figures": str(work / "train.json")}
    (work / "train-spec.json").write_text(json.dumps(spec, indent=2))
    train = [sys.executable, str(Path(__file__).resolve()), "--train-child", str(work / "train-spec.json")]
    steps = [StepResult("cuda-tests", tests, plan.budgets["cuda-tests"]),
             StepResult("bench", bench, plan.budgets["bench"]),
             StepResult("train", train, plan.budgets["train"])]
    if not files:
        steps[0].message = "no test file marks a test @pytest.mark.cuda"
    return steps


def run_plan(plan: Plan, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env["LLMEVO_DATA"] = str(args.data_dir.resolve())
    env["PYTHONUNBUFFERED"] = "1"
    started = time.perf_counter()
    steps = step_commands(plan, args, work)
    for step in steps:
        left = plan.budgets["total"] - (time.perf_counter() - started)
        if left <= 1:
            step.status, step.message = "timeout", "not started: the total budget was spent"
            continue
        if step.name == "cuda-tests" and step.message:
            step.status = "failed"
            continue
        budget = min(step.budget_seconds, left)
        print(f"[gpu-check] {step.name}: up to {budget:.0f} s ...", flush=True)
        run_step(step, budget, work / f"{step.name}.log", env)
        if step.name == "cuda-tests":
            check_tests(step, work / "cuda-tests.xml", plan)
        elif step.name == "bench" and step.status == "ok":
            try:
                step.figures = bench_figures((work / "bench.log").read_text())
            except (ValueError, KeyError, IndexError) as error:
                step.status, step.message = "failed", f"bench printed no JSON rows ({error})"
        elif step.name == "train" and (work / "train.json").is_file():  # partial if stopped
            step.figures = json.loads((work / "train.json").read_text())
        print(f"[gpu-check] {step.name}: {step.status} in {step.wall_seconds:.1f} s", flush=True)
    ok = sum(step.status == "ok" for step in steps)
    return {"schema": SCHEMA, "mode": "dry-run" if plan.dry_run else "cuda",
            "gpu_figures": not plan.dry_run,
            "note": ("dry run on the CPU at tiny sizes: it proves the plan runs; none of its "
                     "numbers is a GPU figure") if plan.dry_run else "measured on the CUDA device",
            "device": device_facts(plan.device, args.commit), "plan": asdict(plan),
            "steps": [asdict(step) for step in steps],
            "steps_ok": ok, "steps_failed": len(steps) - ok,
            "wall_seconds": round(time.perf_counter() - started, 2),
            "budget_seconds": plan.budgets["total"]}


def _number(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def figure_lines(report: dict[str, Any]) -> list[str]:
    """The block for docs/LOG.md."""
    device = report["device"]
    lines = [f"GPU check ({report['schema']}, {report['mode']}"
             + (": CPU dry run, NOT GPU figures)" if not report["gpu_figures"] else ")"),
             f"device: {device['name']}"
             + (f" (capability {device['capability']}, {device['total_memory_mib']:,} MiB)"
                if device["type"] == "cuda" else " (CPU)")
             + f"; torch {device['torch']}, CUDA {device['cuda']}, Python {device['python']}, "
               f"commit {(device['commit'] or 'unknown')[:10]}"]
    for step in report["steps"]:
        figures = step["figures"]
        message = step["message"]
        if step["status"] == "failed" and not message and step["output_tail"].strip():
            message = step["output_tail"].strip().splitlines()[-1][:300]  # the error's own line
        head = (f"- {step['name']}: {step['status']}, {step['wall_seconds']:.1f} s of "
                f"{step['budget_seconds']:g} s" + (f" ({message})" if message else ""))
        if step["name"] == "cuda-tests" and figures:
            head += (f"; passed {figures['passed']}, failed {figures['failures']}, "
                     f"errors {figures['errors']}, skipped {figures['skipped']}")
        elif step["name"] == "bench" and figures:
            head += (f"; one model {_number(figures['single_model_tokens_per_second'])} tok/s, peak "
                     f"{_number(figures['single_model_peak_memory_mib'])} MiB")
            for row in figures["rows"]:
                head += (f"; R={row['replicas']} {row['path']} {_number(row['train_tokens_per_second'])} "
                         f"tok/s (steady {_number(row['steady_tokens_per_second'])}, "
                         f"{_number(row['vs_sequential'], 2)}x seq, peak {_number(row['peak_memory_mib'])} MiB)")
        elif step["name"] == "train" and figures.get("partial"):
            head += "; stopped during training: " + ", ".join(
                f"{run['run']} {run['steps']} of {run['planned_steps']} steps at "
                f"{_number(run['tokens_per_second'])} tok/s" for run in figures["runs"])
        elif step["name"] == "train" and figures:
            rates = ", ".join(_number(rate) for rate in figures["train_tokens_per_second"])
            head += (f"; rope rung {figures['rung']}, {figures['parameters']:,} parameters, "
                     f"{figures['steps_per_arm']} steps per arm, training tok/s per arm {rates}, "
                     f"end to end {figures['end_to_end_seconds']:.1f} s, peak "
                     f"{_number(figures['peak_memory_mib'])} MiB, lm_loss baseline "
                     f"{figures['lm_loss']['baseline']:.4f} / rope {figures['lm_loss']['method']:.4f}")
        lines.append(head)
    lines.append(f"total: {report['steps_ok']} of {len(report['steps'])} steps ok, "
                 f"{report['wall_seconds']:.1f} s of {report['budget_seconds']:g} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "src"))  # this tree's llmevo (the device machine installs none)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.train_child is not None:
        return train_child(args.train_child)
    plan = plan_for(args)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwind: no child left behind
    try:
        with tempfile.TemporaryDirectory(prefix="llmevo-gpu-check-") as folder:
            report = run_plan(plan, args, Path(folder))
    except KeyboardInterrupt:
        print("interrupted: nothing written", file=sys.stderr)
        return 130
    print("\n".join(figure_lines(report)))
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(args.out)
    print(f"wrote {args.out}")
    return 0 if report["steps_failed"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
