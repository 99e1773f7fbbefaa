# Celeritas: two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# the compiled loops' prebuilt cache, which every user of this install reads (celeritas_core/compiled/jit.py)
JIT_BUILT := celeritas_core/compiled/_jitcache/precompiled.json
INTEGRATION_STAMP := $(VENV)/.integration-stamp
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup test test-integration lint demo ui bench clean

setup: $(STAMP) $(JIT_BUILT)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# compile the hot loops once (about 30 s), so no command and no user waits for Numba; again
# whenever the engine's code changes (then only the changed loops compile)
$(JIT_BUILT): $(STAMP) $(wildcard celeritas_core/*.py celeritas_core/*/*.py)
	$(PY) -m celeritas_core.compiled.precompile

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# the tests and, by pyproject.toml's testpaths and addopts, the docstring examples of celeritas_core
test: setup lint
	$(PY) -m pytest -q -n 2

# a real deployment on 127.0.0.1 (PostgreSQL, Redis, MLflow, Airflow with CeleryExecutor and two
# workers), `make ui`, browser tests in Debian's chromium and the docker requirement sets (needs
# root or sudo for apt, and the package registries); screenshots under build/ui-screenshots/
test-integration: setup $(INTEGRATION_STAMP)
	tests/integration/system_packages.sh
	$(PY) -m pytest -q -m integration tests/integration

$(INTEGRATION_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,integration]'
	touch $(INTEGRATION_STAMP)

demo: setup
	$(VENV)/bin/celeritas compare examples/graphs/training_step_small.json \
		--devices 4 --device-memory 600MiB --out-dir build/demo/compare
	$(PY) examples/run_pipeline_demo.py

# the Airflow UI (project-local AIRFLOW_HOME, dags/, gpu pool) and the MLflow UI on 127.0.0.1; Ctrl-C stops both
ui: setup
	$(PY) examples/run_ui.py

bench: setup
	$(PY) bench/bench_startup.py
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_placers.py
	$(PY) bench/bench_quality.py
	$(PY) bench/bench_real.py
	$(PY) bench/bench_topology.py
	$(PY) bench/bench_tf.py
	$(PY) bench/bench_order.py
	$(PY) bench/bench_io.py
	$(PY) bench/bench_scale.py
	$(PY) bench/bench_determinism.py

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache .import_linter_cache .hypothesis celeritas_core/compiled/_jitcache
