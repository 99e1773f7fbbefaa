# syntax=docker/dockerfile:1
# The control-plane image (Airflow with the Celery executor, MLflow, this package; no TensorFlow)
# and, as a second target, the CPU worker (the same plus tensorflow-cpu). Build from the
# repository root (docker/compose.yaml does):
#   docker build -f docker/control-plane.Dockerfile --target control-plane -t celeritas/control-plane:0.16.0 .
#   docker build -f docker/control-plane.Dockerfile --target cpu-worker -t celeritas/cpu-worker:0.16.0 .
# Pins: the base by full version tag (pin its digest in production: docker/README.md), every
# Python package by docker/requirements-*.txt and constraints.txt.

# ---- build: a virtual environment in /opt/venv, copied whole into the runtime stages ----------
FROM python:3.11.14-slim-bookworm AS build-control-plane
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH NUMBA_CPU_NAME=generic
RUN python -m venv /opt/venv
WORKDIR /src
COPY constraints.txt ./
COPY docker/requirements-control-plane.txt docker/requirements-cpu-worker.txt ./docker/
RUN pip install -c constraints.txt -r docker/requirements-control-plane.txt
COPY pyproject.toml README.md ./
COPY celeritas_cli ./celeritas_cli
COPY celeritas_plugins ./celeritas_plugins
COPY celeritas_core ./celeritas_core
COPY celeritas_tf ./celeritas_tf
COPY tasks ./tasks
# the package alone: its dependencies are the pinned set above (pip check proves it is complete)
RUN pip install --no-deps --no-build-isolation . && pip check
# the compiled loops into the package's prebuilt cache (celeritas_core/compiled/_jitcache), read-only at run
# time: no user waits ~30 s for Numba. NUMBA_CPU_NAME=generic (here and at run time) makes code any
# x86-64 CPU loads, so an image built on one machine runs precompiled on another.
RUN python -m celeritas_core.install.precompile

FROM build-control-plane AS build-cpu-worker
RUN pip install -c constraints.txt -r docker/requirements-cpu-worker.txt && pip check

# ---- runtime: a dedicated non-root user (uid 50000, as Airflow's own image) owns its folders ----
FROM python:3.11.14-slim-bookworm AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH \
    NUMBA_CPU_NAME=generic \
    AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/celeritas/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    CELERITAS_HOME=/opt/celeritas \
    CELERITAS_RUNS_ROOT=/opt/celeritas/runs \
    CELERITAS_MODELS_ROOT=/opt/celeritas/models
RUN groupadd --system --gid 50000 airflow \
    && useradd --system --uid 50000 --gid airflow --home-dir /opt/airflow --no-create-home \
       --shell /usr/sbin/nologin airflow \
    && mkdir -p /opt/airflow/logs /opt/celeritas/runs /opt/celeritas/models /opt/celeritas/build \
    && chown -R 50000:50000 /opt/airflow /opt/celeritas/runs /opt/celeritas/models /opt/celeritas/build
# the DAGs are code: readable by the user, owned by root
COPY dags /opt/celeritas/dags
WORKDIR /opt/airflow

FROM runtime AS cpu-worker
COPY --from=build-cpu-worker /opt/venv /opt/venv
USER 50000:50000
CMD ["airflow", "celery", "worker", "--queues", "default"]

# the last stage is the default target
FROM runtime AS control-plane
COPY --from=build-control-plane /opt/venv /opt/venv
USER 50000:50000
CMD ["airflow", "version"]
