# syntax=docker/dockerfile:1
# The GPU worker image: the CUDA build of TensorFlow, this package and Airflow's Celery worker,
# serving the queue `gpu` (the DAG's GPU tasks carry queue="gpu", pool="gpu"). Build from the
# repository root (docker/compose.yaml does):
#   docker build -f docker/gpu-worker.Dockerfile -t celeritas/gpu-worker:0.16.0 .
# CUDA and cuDNN come as NVIDIA's wheels through `tensorflow[and-cuda]`, so the base is the same
# Python image as the control plane's; the host needs the NVIDIA driver and the NVIDIA container
# toolkit, which mounts the driver into the container (docs/deploy.md).

FROM python:3.11.14-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH NUMBA_CPU_NAME=generic
RUN python -m venv /opt/venv
WORKDIR /src
COPY constraints.txt ./
COPY docker/constraints-gpu.sh docker/requirements-control-plane.txt docker/requirements-gpu-worker.txt ./docker/
# constraints.txt pins tensorflow-cpu; this image installs the CUDA build of the same version
RUN sh docker/constraints-gpu.sh constraints.txt constraints-gpu.txt \
    && pip install -c constraints-gpu.txt -r docker/requirements-gpu-worker.txt
COPY pyproject.toml README.md ./
COPY celeritas_cli ./celeritas_cli
COPY celeritas_plugins ./celeritas_plugins
COPY celeritas_core ./celeritas_core
COPY celeritas_tf ./celeritas_tf
COPY tasks ./tasks
RUN pip install --no-deps --no-build-isolation . && pip check
# the compiled loops into the package's prebuilt cache (celeritas_core/compiled/_jitcache), read-only at run
# time: no user waits ~30 s for Numba. NUMBA_CPU_NAME=generic (here and at run time) makes code any
# x86-64 CPU loads, so an image built on one machine runs precompiled on another.
RUN python -m celeritas_core.install.precompile

FROM python:3.11.14-slim-bookworm AS gpu-worker
# NVIDIA container toolkit: expose the GPUs compose reserves and the compute libraries
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH \
    NUMBA_CPU_NAME=generic TF_CPP_MIN_LOG_LEVEL=1 \
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
COPY dags /opt/celeritas/dags
COPY --from=build /opt/venv /opt/venv
WORKDIR /opt/airflow
USER 50000:50000
# one task at a time: a validation run wants the whole node's GPUs (docs/deploy.md, the gpu pool)
CMD ["airflow", "celery", "worker", "--queues", "gpu", "--concurrency", "1"]
