# The two commands: `make demo` and `make test`. Everything runs offline.
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 90
export PREFECT_LOGGING_LEVEL ?= WARNING
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SF := $(VENV)/bin/skillflow
DB ?= sqlite:///.skillflow/demo.db
CORPUS ?=
PORT ?= 4200

.PHONY: demo test test-fast lint install install-dev ui serve ui-check bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -qq --upgrade pip
	$(PY) -m pip install -qq -e '.[pipeline,postgres,oracle]'   # an agent alone needs only the base (README)
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install -qq -e '.[dev]'
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

demo: install
	$(SF) demo --db $(DB) $(if $(CORPUS),--corpus $(CORPUS),)

# The whole suite on every core; modules sharing a module-scoped fixture stay on one worker (tests/conftest.py).
# One BLAS thread per xdist worker: the workers already fill the cores, and OpenBLAS's own threads on top of
# them made a rule fit several times slower (docs/BENCHMARKS.md, "The test suite").
BLAS1 := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
test: install-dev
	$(BLAS1) HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest -n auto --dist loadgroup

# Unit, storage and CLI tests without real flow runs or slow fault tests (CI runs the full `make test`).
test-fast: install-dev
	$(BLAS1) HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-dev} $(PY) -m pytest -n auto --dist loadgroup -m "not prefect and not slow and not postgres"

lint: install-dev
	$(VENV)/bin/ruff check skillflow flows tasks tests
	$(VENV)/bin/ruff format --check skillflow flows tasks tests
	$(VENV)/bin/mypy

# Concurrency leases on file under PREFECT_HOME, as every server the project starts (skillflow.lab.fleet.SERVER_ENV):
# a restarted server still knows the slots running chunks hold (docs/guide/ops.md, "What to watch").
ui: export PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE ?= prefect.server.concurrency.lease_storage.filesystem
ui: install
	$(VENV)/bin/prefect server start --host 127.0.0.1 --port $(PORT)

# Flow runs log their stages at INFO (their Logs tab), whatever the quiet default above says. The server is
# `make ui`'s (PORT) unless PREFECT_API_URL names another.
serve: install
	PREFECT_LOGGING_LEVEL=INFO PREFECT_API_URL=$${PREFECT_API_URL:-http://127.0.0.1:$(PORT)/api} $(SF) serve --db $(DB)

# Headless-Chromium tour of the Prefect UI into screenshots/ui-check/ (needs: apt-get install -y chromium).
ui-check: install-dev
	@command -v chromium >/dev/null || { echo "ui-check needs Chromium: apt-get update && apt-get install -y chromium"; exit 1; }
	$(PY) -m skillflow.cli.uicheck

bench: install
	$(SF) bench capture
	$(SF) bench agent
	$(SF) bench retrieval
	$(SF) bench lifecycle
	$(SF) bench cycle

clean:
	rm -rf .skillflow .prefect
