"""Score a folder of artifacts against the references beyond the development set
(``src/llmevo/eval/references.toml``, ``development = false``), by the shared rule
(``llmevo.eval.concordance.score``): the out-of-sample check of a protocol chosen on the
development rows. The folder holds one artifact per row, named ``<method>.json``; a reference
without one is "not run". ``--published`` reads protocol v3's published rows instead (the
quick row of record: ``tuned-space`` for a space-tuned optimizer, else ``tuned``).

    python scripts/reference_rows.py docs/studies/dials-2026-12-08/v4-rest
    python scripts/reference_rows.py --published
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llmevo.eval.concordance import load_references, score

REPO = Path(__file__).resolve().parents[1]


def published(method: str) -> Path:
    """Protocol v3's published row of ``method`` (a path that may not exist)."""
    for name in ("public-quick-tuned-space-seeds42-46.json", "public-quick-tuned-seeds42-46.json"):
        for path in sorted((REPO / "docs" / "reproductions").glob(f"*-{method}/metrics/{name}")):
            return path
    return REPO / "docs" / "reproductions" / method


def rows(folder: Path | None) -> list[tuple[str, str | None]]:
    """(line, score) per reference beyond the development set; score None where not run."""
    found = []
    for ref in load_references():
        if ref.development:
            continue
        label = f"{ref.method} vs {ref.vs}: reference {ref.reference}" + (
            "" if ref.delta_percent is None else f" ({ref.delta_percent:+.2f}%)")
        path = published(ref.method) if folder is None else folder / f"{ref.method}.json"
        if not path.is_file():
            found.append((f"{label}; not run", None))
            continue
        data = json.loads(path.read_text())
        change = data["statistics"][data["verdict"]["metric"]]["paired_relative_change_percent"]
        verdict = data["verdict"]["classification"]
        scored = score(verdict, ref.reference, change["mean"])
        found.append((f"{label}; {verdict} {change['mean']:+.2f}% [{change['ci_low']:+.2f}, "
                      f"{change['ci_high']:+.2f}] -> {scored}", scored))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, nargs="?")
    parser.add_argument("--published", action="store_true", help="protocol v3's published rows")
    args = parser.parse_args(argv)
    if args.published == (args.folder is not None) or (args.folder is not None and not args.folder.is_dir()):
        print("reference_rows: give a folder of <method>.json artifacts, or --published", file=sys.stderr)
        return 2
    found = rows(None if args.published else args.folder)
    for line, _ in found:
        print(line)
    scores = [s for _, s in found if s is not None]
    print(f"{scores.count('agree')} of {len(scores)} agree, {scores.count('disagree')} disagree, "
          f"{scores.count('inconclusive')} inconclusive ({len(found) - len(scores)} not run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
