#!/usr/bin/env bash
# Run on the CPU machine, in the checkout the device tool sends (the lead's), before the GPU
# check: puts into .gpucheck/ (ignored by git; name it in run's carry) what the device machine
# lacks, since nothing outside it can be reached there and ../shared does not travel:
#   .gpucheck/data    the data the check reads (../shared/data without wikitext-2, the tokens variant)
#   .gpucheck/commit  the commit (the device's copy has no .git), "+uncommitted" if dirty
#   .gpucheck/wheels  pydantic and its four needs, and Optuna and its needs (the first GPU check
#                     found it missing: the train step imports it), for Python 3.12 x86-64, at
#                     this venv's versions; the image had every other package the check imports
# Then it says how big the travelling tree is (the device tool's limit is 64 MiB).
#   scripts/gpu_check_prepare.sh [DATA_DIR]   (default $LLMEVO_DATA, else ../shared/data)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-${LLMEVO_DATA:-../shared/data}}
venv_py=${VENV_PYTHON:-.venv/bin/python}
[ -d "$data/wikitext-2-raw" ] || { echo "error: $data holds no wikitext-2-raw; give the data folder" >&2; exit 2; }
[ -x "$venv_py" ] || { echo "error: $venv_py missing; make venv first (or set VENV_PYTHON)" >&2; exit 2; }
rm -rf .gpucheck && mkdir -p .gpucheck/data .gpucheck/wheels
for folder in wikitext-2-raw tinyshakespeare alpaca gsm8k hh-rlhf self-instruct; do
  cp -r "$data/$folder" .gpucheck/data/
done
pins=$("$venv_py" -c 'from importlib.metadata import version as v
print(" ".join(f"{n}=={v(n)}" for n in ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
                                        "optuna", "alembic", "sqlalchemy", "mako", "markupsafe", "colorlog",
                                        "tqdm", "pyyaml")))')
"$venv_py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpucheck/wheels $pins
commit=$(git rev-parse HEAD)
git diff --quiet HEAD || commit="$commit+uncommitted"
echo "$commit" >.gpucheck/commit
echo "prepared .gpucheck at $commit: $pins"
git ls-files -z | du -cb --files0-from=- | tail -1 | awk '{printf "tracked files: %.1f MiB\n", $1/2^20}'
du -sb .gpucheck | awk '{printf ".gpucheck: %.1f MiB (tree + .gpucheck must stay under 64 MiB)\n", $1/2^20}'
echo 'device tool: run(command="bash scripts/gpu_check.sh", carry=[".gpucheck"], timeout_s=600)'
