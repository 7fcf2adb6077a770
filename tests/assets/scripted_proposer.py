"""A scripted proposer for ``llmevo evolve --proposer`` tests (it does not import llmevo).

    python scripted_proposer.py SCRIPT LOG [REQUEST_FILE]

SCRIPT is a JSON list of steps; call ``i`` (the number of lines already in LOG) plays step
``i`` and appends the request it received to LOG (one JSON line, with its own process id
as ``_pid``). The request is read from
REQUEST_FILE when given (``{request}`` in the command), else from stdin. A step is printed as
the answer, one JSON line after a line of chatter, except these directives:

- ``{"garbage": TEXT}``: print TEXT as the last line;
- ``{"exit": N}``: print a line to stderr and exit with status N;
- ``{"sleep": S}``: sleep S seconds, then answer nothing.

Past the end of SCRIPT it exits with status 9 ("script exhausted").
"""

import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    script = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    log = Path(sys.argv[2])
    request = (Path(sys.argv[3]).read_text(encoding="utf-8") if len(sys.argv) > 3
               else sys.stdin.read())
    parsed = json.loads(request)
    done = len(log.read_text(encoding="utf-8").splitlines()) if log.exists() else 0
    with log.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({**parsed, "_pid": os.getpid()}) + "\n")
    if done >= len(script):
        print("script exhausted", file=sys.stderr)
        return 9
    step = script[done]
    if "garbage" in step:
        print(step["garbage"])
        return 0
    if "exit" in step:
        print(f"scripted failure {step['exit']}", file=sys.stderr)
        return int(step["exit"])
    if "sleep" in step:
        time.sleep(float(step["sleep"]))
        return 0
    print(f"proposer: call {done}, {parsed['budget']['remaining']} trial(s) left")  # chatter
    print(json.dumps(step))
    return 0


if __name__ == "__main__":
    sys.exit(main())
