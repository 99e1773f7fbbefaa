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

# Which TensorFlow build: cpu (tensorflow-cpu, the default) or gpu (tensorflow[and-cuda], the CUDA
# build of the same version, constraints.txt's tensorflow-cpu pin, with the CUDA libraries pinned as
# the GPU image pins them). `make setup TF_VARIANT=gpu` once: the stamp records the variant, and every
# later make command keeps it until another TF_VARIANT is named (which reinstalls, removing the other build).
INSTALLED_TF_VARIANT := $(filter cpu gpu,$(shell cat $(STAMP) 2>/dev/null))
TF_VARIANT ?= $(or $(INSTALLED_TF_VARIANT),cpu)
TF_VERSION := $(shell sed -n 's/^tensorflow-cpu==//p' constraints.txt)
ifeq ($(TF_VERSION),)
$(error constraints.txt pins no tensorflow-cpu version)
endif
CUDA_PINS := docker/requirements-gpu-worker.txt
ifeq ($(TF_VARIANT),cpu)
TF_REQUIREMENT := tensorflow-cpu==$(TF_VERSION)
TF_OTHER := tensorflow
TF_PINS :=
else ifeq ($(TF_VARIANT),gpu)
TF_REQUIREMENT := tensorflow[and-cuda]==$(TF_VERSION)
TF_OTHER := tensorflow-cpu
TF_PINS := $(VENV)/constraints-cuda.txt
else
$(error TF_VARIANT must be cpu or gpu, not '$(TF_VARIANT)')
endif
# both builds install the package `tensorflow`: remove the other one first, then install this one
# with the project's development extras (`dev-base`, which name no TensorFlow)
TF_INSTALL = if $(PY) -m pip show -q $(TF_OTHER) >/dev/null 2>&1; then $(PY) -m pip uninstall -q -y $(TF_OTHER); fi
PIP_INSTALL = $(PY) -m pip install -q$(if $(TF_PINS), -c $(TF_PINS))
# another variant than the installed one: reinstall, however new the stamp is
ifneq ($(TF_VARIANT),$(INSTALLED_TF_VARIANT))
.PHONY: $(STAMP)
endif

.PHONY: setup test test-integration lint demo ui bench docs clean

setup: $(STAMP) $(JIT_BUILT)

$(STAMP): pyproject.toml constraints.txt $(if $(TF_PINS),$(CUDA_PINS))
	$(PYTHON) -m venv $(VENV)
	$(TF_INSTALL)
	$(if $(TF_PINS),grep '^nvidia-' $(CUDA_PINS) > $(TF_PINS))
	$(PIP_INSTALL) -e '.[dev-base]' '$(TF_REQUIREMENT)'
	echo $(TF_VARIANT) > $(STAMP)

# compile the hot loops once (about 30 s), so no command and no user waits for Numba; again
# whenever the engine's code changes (then only the changed loops compile)
$(JIT_BUILT): $(STAMP) $(wildcard celeritas_core/*.py celeritas_core/*/*.py)
	$(PY) -m celeritas_core.install.precompile

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# the tests and, by pyproject.toml's testpaths and addopts, the docstring examples of celeritas_core
# and the documentation site built with --strict (tests/docs)
test: setup lint
	$(PY) -m pytest -q -n 2

# a real deployment on 127.0.0.1 (PostgreSQL, Redis, MLflow, Airflow with CeleryExecutor and two
# workers), `make ui`, browser tests in Debian's chromium and the docker requirement sets (needs
# root or sudo for apt, and the package registries); screenshots under build/ui-screenshots/
test-integration: setup $(INTEGRATION_STAMP)
	tests/integration/system_packages.sh
	$(PY) -m pytest -q -m integration tests/integration

$(INTEGRATION_STAMP): $(STAMP)
	$(PIP_INSTALL) -e '.[dev-base,integration]' '$(TF_REQUIREMENT)'
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
	$(PY) bench/bench_pipeline.py
	$(PY) bench/bench_topology.py
	$(PY) bench/bench_tf.py
	$(PY) bench/bench_order.py
	$(PY) bench/bench_io.py
	$(PY) bench/bench_scale.py
	$(PY) bench/bench_determinism.py
	$(PY) bench/report.py

# the documentation site (mkdocs.yml: the guides in docs/ and the API from the docstrings) in
# build/site; --strict: a broken link or a docstring the renderer cannot read fails it
docs: setup
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache .import_linter_cache .hypothesis celeritas_core/compiled/_jitcache
