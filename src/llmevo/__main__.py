"""``python -m llmevo``: the same entry point as the ``llmevo`` console script."""

from llmevo.cli import main

main()
