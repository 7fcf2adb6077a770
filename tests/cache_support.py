"""An empty arm cache for tests that train through the runner and count what it stores."""

from __future__ import annotations

from pathlib import Path


def fresh_cache(parent: Path, cache_dir: Path) -> Path:
    """An empty arm cache under ``parent`` beside the session's tokenizer and token arrays
    (``cache_dir``'s, linked, so no test re-encodes the data)."""
    folder = parent / "cache"
    folder.mkdir(parents=True)
    for part in ("tokenizers", "tokens"):
        (cache_dir / part).mkdir(exist_ok=True)
        (folder / part).symlink_to(cache_dir / part)
    return folder
