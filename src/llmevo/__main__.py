"""``python -m llmevo``: the same entry point as the ``llmevo`` console script."""

import os

try:
    from llmevo.cli import main
except KeyboardInterrupt:  # SIGINT after Python's own handler, before llmevo's (its first ms)
    os.write(2, b"interrupted\n")
    os._exit(130)

main()
