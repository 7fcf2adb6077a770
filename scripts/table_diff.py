"""A rebuilt evidence table beside the published one: for each artifact a rebuild wrote (in
another checkout, e.g. the clean worktree ``reproduce --all --publish`` ran in), its verdict
class, change and interval, each arm's chosen lr, what the probe and the re-scoring did and
which report seeds stalled, against the same file at a git ref of this repository; then the
classes that moved and the rebuild's core-hours (the artifacts' ``setup.cpu_seconds``).

    python scripts/table_diff.py /work/cold/wt            # every artifact that checkout changed
    python scripts/table_diff.py /work/cold/wt --ref HEAD --markdown

Reads JSON only (no torch, nothing trained): a table rebuilt in the background can be read
while it runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def changed_artifacts(checkout: Path) -> list[str]:
    """The metrics files under ``docs/reproductions`` that ``checkout`` changed or added."""
    lines = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=all",
                            "--", "docs/reproductions"], capture_output=True, text=True, check=True).stdout
    return sorted(line[3:] for line in lines.splitlines() if line.endswith(".json") and "/metrics/" in line)


def published(path: str, ref: str) -> dict[str, Any] | None:
    shown = subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:{path}"], capture_output=True, text=True)
    return json.loads(shown.stdout) if shown.returncode == 0 else None


def summary(artifact: dict[str, Any]) -> dict[str, Any]:
    """The parts of one artifact the comparison reads."""
    verdict = artifact["verdict"]
    change = artifact["statistics"][verdict["metric"]]["paired_relative_change_percent"]
    arms = (artifact.get("tuning") or {}).get("arms", {})

    def lr(arm: str) -> float | None:
        chosen = arms.get(arm, {}).get("chosen")
        return chosen.get("lr") if isinstance(chosen, dict) else chosen

    return {
        "class": verdict["classification"], "mean": change["mean"], "low": change["ci_low"],
        "high": change["ci_high"], "lr": {arm: lr(arm) for arm in ("baseline", "method")},
        "probe_moved": [arm for arm, record in arms.items() if (record.get("probe") or {}).get("moved")],
        "rescored": [arm for arm, record in arms.items() if (record.get("rescoring") or {}).get("seeds")],
        "stalled": {arm: seeds for arm, seeds in (verdict.get("stalled_seeds") or {}).items() if seeds},
        "cpu_seconds": artifact["setup"].get("cpu_seconds") or 0.0,
        "commit": (artifact.get("provenance") or {}).get("code_commit", "")[:8],
    }


def _lr(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _row(found: dict[str, Any] | None) -> str:
    if found is None:
        return "(new)"
    return f"{found['class']} {found['mean']:+.2f} [{found['low']:+.2f}, {found['high']:+.2f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="the checkout holding the rebuilt artifacts")
    parser.add_argument("--ref", default="HEAD", help="the published table's git ref here (default HEAD)")
    parser.add_argument("--markdown", action="store_true", help="a markdown table")
    args = parser.parse_args(argv)
    if not (args.checkout / ".git").exists():
        print(f"error: {args.checkout} is not a git checkout", file=sys.stderr)
        return 2
    rows, moved, cpu = [], [], 0.0
    for path in changed_artifacts(args.checkout):
        new = summary(json.loads((args.checkout / path).read_text(encoding="utf-8")))
        old_artifact = published(path, args.ref)
        old = None if old_artifact is None else summary(old_artifact)
        cpu += new["cpu_seconds"]
        name = f"{path.split('/')[2]} {Path(path).stem.removeprefix('public-quick-')}"
        lrs = " ".join(f"{arm[0]} {_lr(old['lr'][arm]) if old else '-'}->{_lr(new['lr'][arm])}"
                       for arm in ("baseline", "method"))
        notes = ", ".join(filter(None, [
            f"probe moved {'+'.join(new['probe_moved'])}" if new["probe_moved"] else "",
            f"re-scored {'+'.join(new['rescored'])}" if new["rescored"] else "",
            "stalled " + "; ".join(f"{arm} {seeds}" for arm, seeds in new["stalled"].items()) if new["stalled"] else ""]))
        if old is not None and old["class"] != new["class"]:
            moved.append(f"{name}: {old['class']} -> {new['class']}")
        rows.append((name, _row(old), _row(new), lrs, notes, f"{new['cpu_seconds']:.0f}",
                     old["commit"] if old else "-"))
    header = ("artifact", f"published ({args.ref})", "rebuilt", "lr (old->new)", "what the protocol did",
              "CPU s", "old commit")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        for row in rows:
            print("  ".join(row))
    print(f"\n{len(rows)} artifacts rebuilt, {cpu / 3600:.2f} core-hours; {len(moved)} classes moved"
          + "".join(f"\n- {line}" for line in moved))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
