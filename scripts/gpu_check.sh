#!/usr/bin/env bash
# The GPU check on a lent device machine (issue 21 item 8). Prepare once on the CPU machine,
# in the checkout the device tool sends (scripts/gpu_check_prepare.sh: the data and the wheels
# the device image lacks, in .gpucheck/), then call the device tool's run with
#   command: bash scripts/gpu_check.sh      carry: [".gpucheck"]      timeout_s: 600
# It reuses the image's python3 (PyTorch with CUDA; nothing can be installed from a registry
# there), installs the carried wheels into a folder on PYTHONPATH, and runs
# scripts/gpu_check.py (about 9 minutes at most: its budgets) with the figures in $OUT.
# Options after the script name go to gpu_check.py (e.g. --train-steps 100).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/llmevo-gpu-check}
py=${PYTHON:-python3}
site=/tmp/llmevo-gpu-check-site
mkdir -p "$out"
wheels=${GPU_CHECK_WHEELS:-.gpucheck/wheels}  # the carried wheels (cp312, x86-64)
if compgen -G "$wheels/*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$wheels"/*.whl \
    || { echo "error: the carried wheels in $wheels did not install" >&2; exit 2; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
"$py" -c 'import torch, pydantic, typer, rich, tokenizers, safetensors, matplotlib, optuna, scipy, statsmodels' \
  || { echo "error: $py lacks a package llmevo needs; run scripts/gpu_check_prepare.sh and carry .gpucheck" >&2; exit 2; }
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
commit=$(cat .gpucheck/commit 2>/dev/null || true)
PYTHONUNBUFFERED=1 "$py" scripts/gpu_check.py --out "$out/gpu-check.json" ${commit:+--commit "$commit"} \
  --data-dir "${LLMEVO_DATA:-.gpucheck/data}" "$@" 2>&1 | tee "$out/gpu-check.log"
exit "${PIPESTATUS[0]}"
