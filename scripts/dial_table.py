"""The regime's dials measured by what they do to transfer (issue 48, item 3): each dial's
artifacts for the development rows of ``../shared/reference-at-scale/dev-set.tsv`` scored
against the realistic-scale references by the shared rule, beside protocol v3's published rows.

    python scripts/dial_table.py                                     # v3 alone
    python scripts/dial_table.py --dial a=docs/studies/dials-2026-12-07/a --markdown
    python scripts/dial_table.py --dial a=DIR --dial c=DIR --json out.json
    python scripts/dial_table.py --dial v3-r3=DIR --dial a-r3=DIR --base v3-r3 --markdown

A dial's folder holds one artifact per development row, named by the row's tag (``TAGS``:
``lion.json``, ``geglu-vs-gelu.json``, ...); a row without one is "not run" and the dial's
figures count the rows it has, beside the base's on the same rows (``--base``: v3's published
rows, or another dial, e.g. v3's protocol rerun at the dial's size). Per dial: the rows that agree
(the strict rate, over every row with an artifact), agree over agree + disagree, the rows
inconclusive where the reference decides, how many of llmevo's *better* and *worse* verdicts
held, the ratio of llmevo's change to the reference's (where the source names one number;
summarised over the rows whose reference is *better* or *worse*, where a ratio means
something: the median of those with the reference's sign, and how many have the other), and the core-hours the artifacts record (``setup.cpu_seconds``; a run loaded
from the arm cache costs nothing in the row that loaded it). Then every row whose class or
score moved.

The scorer is the README's rule as the leaderboard's concordance module scores it
(``llmevo.eval.concordance.score``); a verdict with no class of its own (a no-op) is read here as
*inconclusive*, since a dial's rates count every row it ran. Reads JSON only: a dial still
training can be read.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmevo.eval.concordance import CLASSES, SCORES
from llmevo.eval.concordance import score as concordance_score

REPO = Path(__file__).resolve().parents[1]
DEV_SET = REPO.parent / "shared" / "reference-at-scale" / "dev-set.tsv"

# (method, vs) -> the row's tag (a dial's artifact file name) and protocol v3's published
# artifact (the headline table's row at abc7dea: optimizers space-tuned, the rest on the lr grid)
TAGS: dict[tuple[str, str], tuple[str, str]] = {
    ("muon", "adamw"): ("muon", "2502.16982-muon/metrics/public-quick-tuned-space-seeds42-46.json"),
    ("soap", "adamw"): ("soap", "2409.11321-soap/metrics/public-quick-tuned-space-seeds42-46.json"),
    ("cautious_adamw", "adamw"): (
        "cautious_adamw", "2411.16085-cautious_adamw/metrics/public-quick-tuned-space-seeds42-46.json"),
    ("adam_mini", "adamw"): ("adam_mini", "2406.16793-adam_mini/metrics/public-quick-tuned-space-seeds42-46.json"),
    ("lion", "adamw"): ("lion", "2302.06675-lion/metrics/public-quick-tuned-space-seeds42-46.json"),
    ("rezero", "pre_norm"): ("rezero", "2003.04887-rezero/metrics/public-quick-tuned-seeds42-46.json"),
    ("geglu", "swiglu"): ("geglu-vs-swiglu", "2002.05202-geglu/metrics/public-quick-tuned-vs-swiglu-seeds42-46.json"),
    ("layernorm", "rmsnorm"): ("layernorm", "1607.06450-layernorm/metrics/public-quick-tuned-seeds42-46.json"),
    ("geglu", "gelu"): ("geglu-vs-gelu", "2002.05202-geglu/metrics/public-quick-tuned-seeds42-46.json"),
    ("gelu", "swiglu"): ("gelu", "1606.08415-gelu/metrics/public-quick-tuned-seeds42-46.json"),
    ("moe", "swiglu"): ("moe", "2101.03961-moe/metrics/public-quick-tuned-seeds42-46.json"),
}
V3 = "v3"
AGREE, DISAGREE, INCONCLUSIVE = SCORES
# a signed percentage that is not the end of a range ("-1.6..-4.4%" names no one number)
_PERCENT = re.compile(r"(?<![\d.])([+\-\u2212]\d+(?:\.\d+)?)%")


def score(llmevo_class: str, reference: str, change: float) -> str:
    """The shared rule (``llmevo.eval.concordance.score``), any verdict outside its classes
    (a no-op) read as inconclusive."""
    return concordance_score(llmevo_class if llmevo_class in CLASSES else "inconclusive", reference, change)


def reference_change(source: str) -> float | None:
    """The first signed percentage the source names (its smallest realistic scale first), or
    None where it names a range or none."""
    for match in _PERCENT.finditer(source):
        if source[max(0, match.start() - 2):match.start()] == "..":
            return None
        return float(match.group(1).replace("\u2212", "-"))
    return None


@dataclass(frozen=True)
class DevRow:
    method: str
    vs: str
    reference: str
    source: str

    @property
    def tag(self) -> str:
        return TAGS[(self.method, self.vs)][0]

    @property
    def reference_change(self) -> float | None:
        return reference_change(self.source)


def read_dev_set(path: Path) -> list[DevRow]:
    with path.open(newline="") as handle:
        rows = [DevRow(r["method"], r["vs"], r["reference"], r["source"])
                for r in csv.DictReader(handle, delimiter="\t")]
    unknown = [f"{r.method} vs {r.vs}" for r in rows if (r.method, r.vs) not in TAGS]
    if unknown:
        raise SystemExit(f"dial_table: no tag for {', '.join(unknown)}; add it to TAGS")
    return rows


@dataclass(frozen=True)
class Measured:
    """One dial's artifact for one row."""

    llmevo_class: str
    change: float
    ci: tuple[float, float]
    cpu_seconds: float
    path: str
    seeds: int = 5


def read_artifact(path: Path) -> Measured:
    data = json.loads(path.read_text())
    change = data["statistics"][data["verdict"]["metric"]]["paired_relative_change_percent"]
    return Measured(data["verdict"]["classification"], float(change["mean"]),
                    (float(change["ci_low"]), float(change["ci_high"])),
                    float(data["setup"].get("cpu_seconds") or 0.0), str(path), int(change["n"]))


def adjusted(measured: dict[str, Measured], how: str) -> dict[str, Measured]:
    """Each row's class read from its interval widened for a family (``llmevo.eval.multiplicity``,
    the classes by ``llmevo.eval.stats.classify_change`` at the 1% margin), as the leaderboard's
    *after Holm* column reads the published table: ``holm`` over the dial's own rows, or
    ``bonferroni:N``, each interval at 1 - 0.05/N (for a family of N, at least as wide as
    Holm's at every rank: a bound for the dial's rows inside a whole table of N rows)."""
    from llmevo.eval.multiplicity import DEFAULT_ALPHA, from_interval, holm, t_interval
    from llmevo.eval.stats import DEFAULT_MARGIN_PERCENT, classify_change

    tags = list(measured)
    estimates = [from_interval(measured[t].change, *measured[t].ci, measured[t].seeds) for t in tags]
    if how == "holm":
        intervals = [(h.ci_low, h.ci_high) for h in holm(estimates)]
    else:
        size = int(how.partition(":")[2])
        intervals = [t_interval(e, 1.0 - DEFAULT_ALPHA / size) for e in estimates]
    return {t: dataclasses.replace(measured[t], ci=ci, llmevo_class=classify_change(*ci, DEFAULT_MARGIN_PERCENT))
            for t, ci in zip(tags, intervals, strict=True)}


def practical_class(ci: tuple[float, float], margin: float = 1.0) -> str:
    """A what-if reading of an interval (percent, lower is better), not llmevo's rule: *better*
    and *worse* only past the margin on their side (the interval below -margin, above +margin),
    *non-inferior* below +margin, else inconclusive. llmevo's classes put *better* and *worse*
    at zero (``llmevo.eval.stats.classify_change``), so a real change inside the margin that a
    narrow interval resolves is decided; the shared rule reads such a row's reference as *same*."""
    low, high = ci
    if high < -margin:
        return "better"
    if low > margin:
        return "worse"
    return "non-inferior" if high < margin else "inconclusive"


def dial_artifacts(name: str, folder: Path | None, rows: list[DevRow]) -> dict[str, Measured]:
    """A dial's measured rows by tag (v3: the published artifacts; a dial: ``folder/<tag>.json``)."""
    found = {}
    for row in rows:
        path = (REPO / "docs" / "reproductions" / TAGS[(row.method, row.vs)][1] if folder is None
                else folder / f"{row.tag}.json")
        if path.is_file():
            found[row.tag] = read_artifact(path)
    if folder is None and len(found) != len(rows):
        raise SystemExit(f"dial_table: v3's published artifacts missing for "
                         f"{sorted({r.tag for r in rows} - set(found))}")
    return found


def summary(rows: list[DevRow], measured: dict[str, Measured]) -> dict[str, Any]:
    """A dial's figures over the rows it measured."""
    scored = [(row, measured[row.tag], score(measured[row.tag].llmevo_class, row.reference,
                                             measured[row.tag].change))
              for row in rows if row.tag in measured]
    counts = {k: sum(1 for *_, s in scored if s == k) for k in (AGREE, DISAGREE, INCONCLUSIVE)}

    def held(cls: str) -> list[int]:
        picked = [s for _, m, s in scored if m.llmevo_class == cls]
        return [sum(1 for s in picked if s == AGREE), len(picked)]

    ratios = {row.tag: m.change / row.reference_change for row, m, _ in scored
              if row.reference_change not in (None, 0.0)}
    decisive = [ratios[row.tag] for row, _, _ in scored if row.tag in ratios and row.reference != "same"]
    aligned = [r for r in decisive if r > 0]
    decided = counts[AGREE] + counts[DISAGREE]
    return {
        "rows": len(scored), **counts,
        "strict_rate": counts[AGREE] / len(scored) if scored else math.nan,
        "decided_rate": counts[AGREE] / decided if decided else math.nan,
        "better_held": held("better"), "worse_held": held("worse"),
        "ratios": ratios,
        "median_ratio_decisive": statistics.median(aligned) if aligned else None,
        "opposite_sign_decisive": len(decisive) - len(aligned),
        "core_hours": sum(m.cpu_seconds for _, m, _ in scored) / 3600,
        "scores": {row.tag: s for row, _, s in scored},
    }


def _fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def markdown(rows: list[DevRow], dials: dict[str, dict[str, Measured]], base_name: str = V3) -> str:
    """The dial table (each dial beside ``base_name`` on the rows both have), then each row's
    class and score under every dial."""
    base = dials[base_name]
    lines = [f"| dial | rows | agree ({base_name} on the same rows → dial) | agree / decided | inconclusive "
             "| *better* held | *worse* held | effect ratio, decisive refs: median of same sign; opposite sign "
             f"({base_name} → dial) | core-hours ({base_name} → dial) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, measured in dials.items():
        both = {tag: m for tag, m in measured.items() if tag in base}
        before, after = summary(rows, {tag: base[tag] for tag in both}), summary(rows, both)
        lines.append(
            f"| {name} | {after['rows']} | {before['agree']} → {after['agree']} "
            f"| {after['agree']}/{after['agree'] + after['disagree']} | {after['inconclusive']} "
            f"| {after['better_held'][0]}/{after['better_held'][1]} | {after['worse_held'][0]}/{after['worse_held'][1]} "
            f"| {_fmt_ratio(before['median_ratio_decisive'])}; {before['opposite_sign_decisive']} → "
            f"{_fmt_ratio(after['median_ratio_decisive'])}; {after['opposite_sign_decisive']} "
            f"| {before['core_hours']:.2f} → {after['core_hours']:.2f} |")
    lines += ["", "| row | reference (Δ%) | " + " | ".join(dials) + " |",
              "|---|---|" + "---|" * len(dials)]
    for row in rows:
        ref = row.reference + ("" if row.reference_change is None else f" ({row.reference_change:+.2f})")
        cells = []
        for measured in dials.values():
            m = measured.get(row.tag)
            ratio = (None if m is None or row.reference_change in (None, 0.0)
                     else m.change / row.reference_change)
            cells.append("not run" if m is None else
                         f"{m.llmevo_class} {m.change:+.2f}% → {score(m.llmevo_class, row.reference, m.change)}"
                         + ("" if ratio is None else f" (×{ratio:.2g})"))
        lines.append(f"| {row.method} vs {row.vs} | {ref} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dev-set", type=Path, default=DEV_SET)
    parser.add_argument("--dial", action="append", default=[], metavar="NAME=DIR",
                        help="a dial's folder of <tag>.json artifacts (repeatable)")
    parser.add_argument("--base", default=V3, metavar="NAME",
                        help="the dial the others are read against, on the rows both have (default v3, "
                             "the published rows)")
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--adjust", metavar="holm|bonferroni:N",
                        help="read each dial's classes after a family-wise adjustment: Holm over the dial's "
                             "rows, or each interval at 1 - 0.05/N")
    parser.add_argument("--margin-both-sides", action="store_true",
                        help="what if: read every artifact's class from its interval with the 1%% margin on "
                             "both sides (practical_class), not llmevo's classes")
    args = parser.parse_args(argv)
    if not args.dev_set.is_file():
        print(f"dial_table: no development set at {args.dev_set}", file=sys.stderr)
        return 2
    folders: dict[str, Path | None] = {V3: None}
    for item in args.dial:
        name, sep, folder = item.partition("=")
        if not sep or not name or name == V3 or not Path(folder).is_dir():
            print(f"dial_table: --dial {item!r}: give NAME=DIR with an existing folder (NAME not {V3})",
                  file=sys.stderr)
            return 2
        folders[name] = Path(folder)
    if args.base not in folders:
        print(f"dial_table: --base {args.base!r}: not a dial given ({', '.join(folders)})", file=sys.stderr)
        return 2
    if args.adjust is not None and not (args.adjust == "holm" or re.fullmatch(r"bonferroni:[1-9]\d*", args.adjust)):
        print(f"dial_table: --adjust {args.adjust!r}: give holm or bonferroni:N (N a positive count)",
              file=sys.stderr)
        return 2
    rows = read_dev_set(args.dev_set)
    dials = {name: dial_artifacts(name, folder, rows) for name, folder in folders.items()}
    if args.adjust:
        dials = {name: adjusted(measured, args.adjust) for name, measured in dials.items()}
    if args.margin_both_sides:
        dials = {name: {tag: dataclasses.replace(m, llmevo_class=practical_class(m.ci)) for tag, m in measured.items()}
                 for name, measured in dials.items()}
    base = dials[args.base]
    figures = {name: summary(rows, measured) | {
        "base": args.base,
        "base_same_rows": summary(rows, {t: base[t] for t in measured if t in base}),
        "artifacts": {t: m.path for t, m in measured.items()},
        "classes": {t: [m.llmevo_class, m.change, list(m.ci)] for t, m in measured.items()}}
        for name, measured in dials.items()}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    if args.markdown:
        print(markdown(rows, dials, args.base), end="")
    else:
        for name, f in figures.items():
            print(f"{name}: {f['agree']}/{f['rows']} agree, {f['disagree']} disagree, "
                  f"{f['inconclusive']} inconclusive; core-hours {f['core_hours']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
