"""docker/compose.yaml: the services, their wiring and their secrets (parsed with PyYAML; the
stack itself is not run on the build machines, which have no Docker engine)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

import pytest

from tests.deploy.deployfiles import (
    COMPOSE,
    DOCKER,
    ENV_EXAMPLE,
    ROOT,
    VARIABLE,
    compose,
    dockerfile_stages,
    env_example,
)

AIRFLOW = {"airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
           "airflow-triggerer", "airflow-worker-cpu", "airflow-worker-gpu"}
REQUIRED = AIRFLOW | {"postgres", "redis", "mlflow", "minio", "minio-setup"}
ONE_SHOT = {"airflow-init", "minio-setup"}
#: values that must come from docker/.env only (empty in .env.example, ${NAME:?...} in compose)
SECRETS = {"POSTGRES_PASSWORD", "MLFLOW_DB_PASSWORD", "REDIS_PASSWORD", "AIRFLOW_FERNET_KEY",
           "AIRFLOW_JWT_SECRET", "AIRFLOW_API_SECRET_KEY", "MINIO_ROOT_PASSWORD", "CELERITAS_S3_SECRET_KEY"}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|FERNET|TOKEN|_KEY$|REQUIREPASS", re.IGNORECASE)
VERSION_TAG = re.compile(r"^(v?\d+(\.\d+)+([.-][\w.-]+)?|RELEASE\.\d{4}-\d{2}-\d{2}T[\w-]+)$")


@pytest.fixture(scope="module")
def services() -> dict:
    return compose()["services"]


def _command(service: dict) -> str:
    command = service.get("command", "")
    return " ".join(command) if isinstance(command, list) else str(command)


def _strings(node: object) -> list[str]:
    """Every string in a YAML tree (keys too)."""
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return [node] if isinstance(node, str) else []


def test_every_service_of_the_stack_is_there(services: dict) -> None:
    assert set(services) >= REQUIRED, f"missing: {sorted(REQUIRED - set(services))}"


def test_gpu_worker_reserves_the_nvidia_gpus_and_serves_queue_gpu(services: dict) -> None:
    worker = services["airflow-worker-gpu"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", [])
               and (d.get("count") == "all" or isinstance(d.get("count"), int) or "device_ids" in d)
               for d in devices), devices
    command = worker["command"]
    assert command[:3] == ["airflow", "celery", "worker"]
    assert command[command.index("--queues") + 1] == "gpu"
    assert command[command.index("--concurrency") + 1] == "1"
    assert worker["build"]["dockerfile"] == "docker/gpu-worker.Dockerfile"


def test_cpu_worker_serves_the_default_queue_without_gpus(services: dict) -> None:
    worker = services["airflow-worker-cpu"]
    command = worker["command"]
    assert command[:3] == ["airflow", "celery", "worker"]
    assert command[command.index("--queues") + 1] == "default"
    assert "deploy" not in worker


def test_airflow_services_share_the_celery_postgres_redis_settings(services: dict) -> None:
    for name in AIRFLOW:
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://airflow:"), name
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://"), name
        # SQLAlchemy 2 reads plain postgresql:// as psycopg 3, which the images do not have
        assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql+psycopg2://"), name
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000", name
        assert env["AWS_ENDPOINT_URL"] == "http://minio:9000", name
        # one JWT secret for every component: workers' tokens are checked by the api-server
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == services["airflow-apiserver"]["environment"][
            "AIRFLOW__API_AUTH__JWT_SECRET"], name
    commands = {name: services[name]["command"] for name in AIRFLOW - ONE_SHOT}
    assert commands["airflow-apiserver"][:2] == ["airflow", "api-server"]
    assert commands["airflow-scheduler"] == ["airflow", "scheduler"]
    assert commands["airflow-dag-processor"] == ["airflow", "dag-processor"]
    assert commands["airflow-triggerer"] == ["airflow", "triggerer"]


def test_airflow_settings_are_options_airflow_knows(services: dict) -> None:
    """A misspelt AIRFLOW__SECTION__KEY is silently ignored by Airflow: check each against the
    installed Airflow's configuration ([celery] belongs to the Celery provider, not installed here)."""
    configuration = pytest.importorskip("airflow.configuration")
    known = configuration.retrieve_configuration_description(include_providers=False)
    names = {key for name in AIRFLOW for key in services[name]["environment"] if key.startswith("AIRFLOW__")}
    assert names
    unknown = []
    for name in sorted(names):
        section, key = name.removeprefix("AIRFLOW__").lower().split("__", 1)
        if section != "celery" and key not in known.get(section, {}).get("options", {}):
            unknown.append(name)
    assert not unknown, f"not Airflow options: {unknown}"


def test_init_job_migrates_and_creates_the_gpu_pool_from_env(services: dict) -> None:
    init = services["airflow-init"]
    script = _command(init)
    assert "airflow db migrate" in script
    assert re.search(r'airflow pools set gpu "?\$\{CELERITAS_GPU_POOL_SLOTS:\?', script), script
    assert init["restart"] == "no"
    for name in AIRFLOW - ONE_SHOT:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_mlflow_server_on_postgres_with_s3_artifacts(services: dict) -> None:
    mlflow = services["mlflow"]
    command = mlflow["command"]
    assert command[:2] == ["mlflow", "server"]
    options = dict(arg.split("=", 1) for arg in command[2:])
    assert options["--backend-store-uri"].startswith("postgresql+psycopg2://mlflow:")
    assert options["--backend-store-uri"].endswith("@postgres:5432/mlflow")
    assert options["--artifacts-destination"].startswith("s3://")
    assert options["--host"] == "0.0.0.0"
    assert mlflow["environment"]["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert mlflow["depends_on"]["postgres"]["condition"] == "service_healthy"
    # its database is created by the postgres init script, beside Airflow's
    init = DOCKER / "postgres-init" / "10-mlflow-database.sh"
    assert "CREATE DATABASE mlflow OWNER mlflow" in init.read_text()
    assert any(v.endswith("/docker-entrypoint-initdb.d:ro") for v in services["postgres"]["volumes"])


def test_s3_store_gets_its_bucket_and_pipeline_key(services: dict) -> None:
    setup = services["minio-setup"]
    script = _command(setup)
    assert 'mc mb --ignore-existing "local/$$CELERITAS_BUCKET"' in script
    assert "mc admin user add local" in script
    assert setup["depends_on"]["minio"]["condition"] == "service_healthy"
    assert services["mlflow"]["depends_on"]["minio-setup"]["condition"] == "service_completed_successfully"


def test_images_are_pinned_to_versions(services: dict) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name, service in services.items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: image without a tag: {image}"
        assert tag != "latest" and VERSION_TAG.match(tag), f"{name}: tag is not a version: {image}"
        if "build" in service:  # built here: tagged with the package's version
            assert repository.startswith("celeritas/") and tag == version, f"{name}: {image}"


def test_builds_name_existing_dockerfiles_and_targets(services: dict) -> None:
    built = {name: s["build"] for name, s in services.items() if "build" in s}
    assert {"airflow-worker-gpu", "airflow-worker-cpu", "airflow-apiserver", "mlflow"} <= set(built)
    images: dict[str, tuple] = {}
    for name, build in built.items():
        assert (COMPOSE.parent / build["context"]).resolve() == ROOT, name
        dockerfile = ROOT / build["dockerfile"]
        assert dockerfile.is_file(), f"{name}: {dockerfile}"
        aliases = [stage.alias for stage in dockerfile_stages(dockerfile)]
        if "target" in build:
            assert build["target"] in aliases, f"{name}: no stage {build['target']} in {dockerfile.name}"
        key = (build["dockerfile"], build.get("target", aliases[-1]))
        # one image name is one build
        assert images.setdefault(services[name]["image"], key) == key, name


def test_depends_on_names_services_with_valid_conditions(services: dict) -> None:
    conditions = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, service in services.items():
        for target, spec in service.get("depends_on", {}).items():
            assert target in services and target != name, f"{name} depends on {target}"
            assert spec["condition"] in conditions, f"{name} -> {target}: {spec}"
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target}'s health: it has none"
            if spec["condition"] == "service_completed_successfully":
                assert target in ONE_SHOT, f"{name} waits for {target} to exit"


def test_long_running_services_have_healthchecks_and_restart(services: dict) -> None:
    for name, service in services.items():
        if name in ONE_SHOT:
            assert service.get("restart") == "no", name
            continue
        assert service["healthcheck"]["test"][0] in {"CMD", "CMD-SHELL"}, name
        assert service["restart"] == "unless-stopped", name


def test_ports_listen_on_the_bind_address_defaulting_to_localhost(services: dict) -> None:
    published = [(name, port) for name, s in services.items() for port in s.get("ports", [])]
    assert {name for name, _ in published} >= {"airflow-apiserver", "mlflow"}
    for name, port in published:
        assert isinstance(port, str), (name, port)
        assert port.startswith("${CELERITAS_BIND_ADDRESS:-127.0.0.1}:"), (name, port)
    assert env_example()["CELERITAS_BIND_ADDRESS"] == "127.0.0.1"


def test_every_variable_is_in_env_example() -> None:
    used = set(VARIABLE.findall(COMPOSE.read_text()))
    defined = env_example()
    assert used, "no ${VAR} found: the pattern is wrong"
    assert not used - set(defined), f"not in docker/.env.example: {sorted(used - set(defined))}"
    assert not set(defined) - used, f"in docker/.env.example, unused: {sorted(set(defined) - used)}"


def test_secrets_come_only_from_env_and_fail_loudly() -> None:
    text = COMPOSE.read_text()
    defined = env_example()
    for name in SECRETS:
        assert defined[name] == "", f"docker/.env.example ships a value for the secret {name}"
        uses = re.findall(r"(?<!\$)\$\{" + name + r"(\W.{0,2})", text)
        assert uses, f"{name} is not used"
        assert all(u.startswith(":?") for u in uses), f"{name}: every use must be ${{{name}:?...}}"


def test_no_literal_secrets_in_compose(services: dict) -> None:
    found = []
    for name, service in services.items():
        env = service.get("environment", {})
        for key, value in env.items():
            if SECRET_NAME.search(key) and "${" not in str(value):
                found.append(f"{name}: {key}")
        for text in _strings(service):
            for match in re.finditer(r"://[^/\s:@]*:([^@/\s]+)@", text):  # user:password@ in a URL
                if not match[1].startswith("${"):
                    found.append(f"{name}: URL password {match[1][:3]}...")
    assert not found, found


def test_env_example_is_committed_and_env_is_ignored() -> None:
    assert ENV_EXAMPLE.is_file()
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: .gitignore cannot be asked")
    ignored = subprocess.run(["git", "check-ignore", "docker/.env", ".env"], cwd=ROOT,
                             capture_output=True, text=True)
    assert ignored.stdout.split() == ["docker/.env", ".env"], ignored
    example = subprocess.run(["git", "check-ignore", "docker/.env.example"], cwd=ROOT, capture_output=True)
    assert example.returncode == 1, "docker/.env.example must not be ignored"


def _compose_plugin() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
    return probe.returncode == 0


def _filled_env(tmp_path) -> str:
    lines = [f"{k}={v or 'x' + k.lower().replace('_', '')}" for k, v in env_example().items()]
    path = tmp_path / "filled.env"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.skipif(not _compose_plugin(), reason="the docker compose plugin is not installed here "
                    "(`docker compose version` fails): compose.yaml is checked by the YAML tests only")
def test_docker_compose_config_accepts_the_file(tmp_path) -> None:
    base = ["docker", "compose", "-f", str(COMPOSE)]
    ok = subprocess.run([*base, "--env-file", _filled_env(tmp_path), "config", "--quiet"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    empty = tmp_path / "empty.env"
    empty.write_text("")
    refused = subprocess.run([*base, "--env-file", str(empty), "config", "--quiet"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "in docker/.env" in refused.stderr, refused.stderr
