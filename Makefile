# Two entry points for a fresh machine. Both create .venv on first use.
#   make reproduce   — the main job: RoPE vs its non-rotary ablation on the smoke preset
#   make test        — the lint (ruff), then the test suite
# Data: $LLMEVO_DATA when set, else llmevo's default data folder (the user's cache folder): the
# main job's data is unpacked there from the package, any other set is fetched on first use
# (llmevo.data.store). No folder beside the checkout is assumed; the tests alone also read
# ../shared/data when it exists (tests/conftest.py).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?= rope --preset smoke --seed 42
# This checkout's code first, also when VENV is an environment built for another checkout.
export PYTHONPATH := $(CURDIR)/src$(if $(PYTHONPATH),:$(PYTHONPATH))

ifeq ($(VENV),.venv)
$(BIN)/llmevo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch first, so that nothing later pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0 || $(BIN)/pip install -q torch --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/pip install -q -e '.[dev]'
	touch $@
else
# VENV=DIR: an environment already built (by `make venv` elsewhere), used as it is: nothing is
# installed into it (.ci/run's fresh clone reuses the checkout's).
$(BIN)/llmevo:
	@test -x $@ || { echo "error: VENV=$(VENV) has no bin/llmevo; leave VENV unset to build .venv" >&2; exit 2; }
endif

venv: $(BIN)/llmevo

reproduce: $(BIN)/llmevo
	$(BIN)/llmevo reproduce $(ARGS)

# CI (.ci/run) calls `make test`: the lint runs first and a lint error fails the build.
# Every test runs torch on one intra-op thread (tests/conftest.py), so one pytest process
# leaves a core idle: two pytest-xdist processes run a file per worker at a time (10.8 min under
# load against 22.6). TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: $(BIN)/llmevo
	$(BIN)/ruff check src tests scripts

# The documentation site from docs/ (mkdocs.yml); --strict: a broken link or anchor fails it.
# NO_MKDOCS_2_WARNING silences Material's notice about a future MkDocs release (we pin mkdocs<2).
docs: $(BIN)/llmevo
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

.PHONY: venv reproduce test lint docs gpu-check gpu-check-prepare gpu-check-dry

# The GPU check (scripts/gpu_check.py; issue 21 item 8). gpu-check-prepare here, in the
# checkout the device tool sends; gpu-check on the device machine (what scripts/gpu_check.sh
# does: the image's python3, no venv build); gpu-check-dry: the same plan on this CPU, tiny.
gpu-check-prepare: $(BIN)/llmevo
	scripts/gpu_check_prepare.sh

gpu-check:
	bash scripts/gpu_check.sh $(GPU_CHECK_ARGS)

gpu-check-dry: $(BIN)/llmevo
	mkdir -p runs
	$(BIN)/python scripts/gpu_check.py --dry-run --out runs/gpu-check-dry.json $(GPU_CHECK_ARGS)
