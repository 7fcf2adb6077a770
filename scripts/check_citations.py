"""Name every figure on the results pages that no published artifact holds.

    python scripts/check_citations.py [PAGE.md ...]

Reads the README and the documentation site's home and results pages by default, and every
JSON under docs/ (llmevo.reports.citations says what counts as held). Exit status 1 when a
figure is stale, 0 when every figure is held.
"""

from __future__ import annotations

import sys
from pathlib import Path

from llmevo.reports.citations import artifact_numbers, cited_figures, stale_citations

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    pages = [Path(arg) for arg in argv] or [ROOT / "README.md", ROOT / "docs" / "index.md",
                                            *sorted((ROOT / "docs" / "results").glob("*.md"))]
    missing = [page for page in pages if not page.is_file()]
    if missing:
        print(f"error: {missing[0]}: not a file (give Markdown pages)", file=sys.stderr)
        return 2
    stale = stale_citations(pages, artifact_numbers([ROOT / "docs"]))
    cited = sum(len(cited_figures(page)) for page in pages)
    for citation in stale:
        print(citation)
    print(f"{cited} figures on {len(pages)} pages; {len(stale)} held by no artifact")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
