"""Safe parameters: what a run may load and where it may write (tasks/policy.py), NaN and infinity
refused by the schema the form uses, refusals recorded in MLflow before any GPU task, a teardown
that survives anything, and credentials redacted from every message."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.redact import RedactingFilter, redact
from tasks import storage
from tasks.params import resolve_params, schema
from tasks.policy import check_model, check_run_dir, resolve_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project home with a models root and a runs root, and no allowed modules or S3 prefixes."""
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    for name in ("CELERITAS_MODELS_ROOT", "CELERITAS_RUNS_ROOT", "CELERITAS_MODEL_MODULES",
                 "CELERITAS_MODELS_S3_PREFIX", "CELERITAS_RUNS_S3_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "models").mkdir()
    (tmp_path / "build" / "runs").mkdir(parents=True)
    return tmp_path


def _keras_archive(path: Path) -> Path:
    """A file shaped like a Keras archive (a zip holding config.json)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", "{}")
    return path


# ------------------------------------------------------------------------------------ NaN, inf, keys
@pytest.mark.parametrize(("given", "field"), [
    ({"improvement_threshold": float("nan")}, "improvement_threshold"),
    ({"improvement_threshold": float("inf")}, "improvement_threshold"),
    ({"memory_fraction": float("nan")}, "memory_fraction"),
    ({"model_knobs": {"layers": float("nan")}}, "model_knobs.layers"),
    ({"colour": "red"}, "params"),
])
def test_nan_infinity_and_unknown_keys_are_refused(given: dict, field: str) -> None:
    with pytest.raises(CeleritasInputError, match=f"^parameter '{field}': ") as err:
        resolve_params(given)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("field", ["improvement_threshold", "memory_fraction"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_the_forms_schema_itself_refuses_nan_and_infinity(field: str, value: float) -> None:
    """The Airflow form (and the REST API) validate with this schema, not with resolve_params."""
    import jsonschema

    validator = jsonschema.Draft7Validator(schema())
    params = {**resolve_params({}).to_json(), field: value}
    assert list(validator.iter_errors(params)), (field, value)
    assert not list(validator.iter_errors({**params, field: 0.5}))


def _number_schemas(node: object, where: str = "") -> list[tuple[str, dict]]:
    """Every (sub)schema of type number or integer in ``node``, with where it is."""
    found: list[tuple[str, dict]] = []
    if isinstance(node, dict):
        if node.get("type") in ("number", "integer"):
            found.append((where, node))
        for key, value in node.items():
            found += _number_schemas(value, f"{where}.{key}" if where else str(key))
    return found


def test_every_number_field_has_finite_bounds() -> None:
    import math

    numbers = _number_schemas(schema())
    assert {w.split(".")[1] for w, _ in numbers} >= {"batch_size", "R", "memory_fraction", "model_knobs",
                                                    "profile_batch_sizes", "improvement_threshold"}
    for where, node in numbers:
        bounds = {**node, **{k: v for sub in node.get("allOf", []) for k, v in sub.items()}}
        low = bounds.get("minimum", bounds.get("exclusiveMinimum"))
        assert low is not None and math.isfinite(low), where
        assert "maximum" in bounds and math.isfinite(bounds["maximum"]), where


def test_the_schemas_batch_limit_is_the_cores() -> None:
    """params.py keeps its own copy (importing celeritas_core would import numpy at DAG parse time)."""
    from celeritas_core.limits import MAX_BATCH_SIZE
    from tasks import params

    assert params.MAX_BATCH_SIZE == MAX_BATCH_SIZE


@pytest.mark.parametrize(("given", "field"), [
    ({"batch_size": 10**12}, "batch_size"),
    ({"R": 2**40}, "R"),
    ({"profile_batch_sizes": [2, 10**9]}, "profile_batch_sizes.1"),
    ({"model_knobs": {"layers": -1}}, "model_knobs.layers"),
    ({"model_knobs": {"layers": "8"}}, "model_knobs.layers"),
    ({"model_knobs": {"layers": True}}, "model_knobs.layers"),
    ({"model_knobs": {"layers": 10**100}}, "model_knobs.layers"),
])
def test_huge_or_ill_typed_numbers_are_refused_by_the_form_and_resolve_params(given: dict,
                                                                              field: str) -> None:
    import jsonschema

    assert list(jsonschema.Draft7Validator(schema()).iter_errors({**resolve_params({}).to_json(), **given}))
    with pytest.raises(CeleritasInputError, match=f"^parameter '{field}': "):
        resolve_params(given)


def test_params_that_are_not_an_object_are_one_line_errors() -> None:
    for given in ("garbage", ["model", "mlp"], 3):
        with pytest.raises(CeleritasInputError, match=r"^parameter 'params': expected an object, got \w+$"):
            resolve_params(given)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- models
def test_zoo_models_and_their_knobs(roots: Path) -> None:
    assert resolve_model("mlp", {"layers": 3}).kind == "zoo"
    with pytest.raises(CeleritasInputError, match=r"^parameter 'model_knobs': mlp has no knob 'depth'"):
        resolve_model("mlp", {"depth": 3})
    with pytest.raises(CeleritasInputError, match=r"^parameter 'model': unknown model 'resnet9000'"):
        resolve_model("resnet9000")


def test_zoo_knob_values_are_checked_before_any_gpu_task(roots: Path) -> None:
    """The zoo's factories only build a recipe (no TensorFlow), so prepare runs them on the knobs."""
    for model, knobs, message in (
            ("mlp", {"layers": -1}, "model 'mlp': layers must be a positive integer"),
            ("mlp", {"layers": 2.0}, "layers must be a positive integer, got 2.0"),
            ("inception_v3", {"image_size": 20}, "image_size must be at least 75"),
            ("transformer", {"heads": 32}, r"hidden \(16\) must be a multiple of heads")):
        with pytest.raises(CeleritasInputError, match=f"^parameter 'model_knobs': .*{message}"):
            resolve_model(model, knobs)
    # the paper's configuration is the base the knobs override: 2048 hidden units take 32 heads
    assert resolve_model("transformer", {"heads": 32}, paper=True).kind == "zoo"


def test_zoo_names_are_checked_without_tensorflow() -> None:
    """prepare runs on a light worker: checking a zoo model (knobs included) imports no TensorFlow."""
    code = ("import sys; from tasks.policy import resolve_model; "
            "resolve_model('nmt', {'layers': 2}, paper=True); "
            "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_functions_only_under_allowed_module_prefixes(roots: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CeleritasInputError, match=r"module 'os' is not under an allowed prefix: none "
                                                  r"\(set CELERITAS_MODEL_MODULES"):
        resolve_model("os:abort")
    monkeypatch.setenv("CELERITAS_MODEL_MODULES", "json, email.mime")
    allowed = resolve_model("json.decoder:JSONDecoder")
    assert allowed.kind == "function" and allowed.location.endswith("decoder.py")
    assert len(allowed.content_sha256) == 64
    for refused in ("os:abort", "jsonx:loads", "email:message_from_string"):
        with pytest.raises(CeleritasInputError, match=r"is not under an allowed prefix: json, email\.mime"):
            resolve_model(refused)
    with pytest.raises(CeleritasInputError, match=r"cannot find module 'json\.nope'"):
        resolve_model("json.nope:x")
    with pytest.raises(CeleritasInputError, match="is not MODULE:FUNCTION"):
        resolve_model("json:x;import os")


def test_keras_files_only_under_the_models_root(roots: Path, tmp_path: Path) -> None:
    inside = _keras_archive(roots / "models" / "net.keras")
    reference = resolve_model("net.keras")  # relative to the models root
    assert (reference.kind, reference.location) == ("keras", str(inside.resolve()))
    assert resolve_model(str(inside)).content_sha256 == reference.content_sha256
    outside = _keras_archive(tmp_path / "elsewhere.keras")
    (roots / "models" / "link.keras").symlink_to(outside)
    for model, message in ((str(outside), "is outside the models root"),
                           ("../elsewhere.keras", "is outside the models root"),
                           ("link.keras", "is outside the models root"),  # a symlink out of the root
                           ("missing.keras", "no such .keras file"),
                           ("file:///etc/passwd.keras", "give a path, not a file: URI"),
                           ("s3://bucket/m.keras", "outside the allowed S3 prefix: nowhere")):
        with pytest.raises(CeleritasInputError, match=f"^parameter 'model': .*{message}"):
            resolve_model(model)
    (roots / "models" / "text.keras").write_text("not a zip")
    with pytest.raises(CeleritasInputError, match="is not a Keras archive"):
        resolve_model("text.keras")


def test_keras_files_on_s3_only_under_the_allowed_prefix_and_only_archives(
        roots: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The S3 reads are stubbed: what is checked is the policy, not boto3 (the DAG tests cover S3)."""
    import hashlib

    from tasks import storage

    archive = _keras_archive(tmp_path / "net.keras").read_bytes()
    objects = {"s3://models/ok/net.keras": archive, "s3://models/ok/text.keras": b"not a zip"}

    def read_bytes(uri: str) -> bytes:
        if uri not in objects:
            raise storage.ArtifactNotFound(uri)
        return objects[uri]

    monkeypatch.setattr(storage, "read_bytes", read_bytes)
    monkeypatch.setenv("CELERITAS_MODELS_S3_PREFIX", "s3://models/ok")
    reference = resolve_model("s3://models/ok/net.keras")
    assert (reference.kind, reference.location) == ("keras", "s3://models/ok/net.keras")
    assert reference.content_sha256 == hashlib.sha256(archive).hexdigest()
    for model, message in (("s3://models/okx/net.keras", "outside the allowed S3 prefix: s3://models/ok/"),
                           ("s3://models/ok/../net.keras", "outside the allowed S3 prefix"),
                           ("s3://models/ok/gone.keras", "no such .keras file: s3://models/ok/gone.keras"),
                           ("s3://models/ok/text.keras", "is not a Keras archive \\(not a zip file\\)")):
        with pytest.raises(CeleritasInputError, match=f"^parameter 'model': .*{message}"):
            resolve_model(model)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_worker_loads_only_the_keras_bytes_prepare_hashed(roots: Path, tmp_path: Path, where: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A step builds the model from the job (``load_model``), not by resolving it again: a
    ``.keras`` file whose bytes are still those ``prepare`` hashed is loaded (from a local copy when
    on S3); one changed or gone since is refused in one line, before anything loads it."""
    import tasks.common
    from tasks import storage
    from tasks.common import load_model
    from tasks.contracts import ResolvedModel
    from tasks.params import PipelineParams
    from tasks.prepare import _resolved_model

    objects: dict[str, bytes] = {}

    def read_bytes(uri: str) -> bytes:
        if uri not in objects:
            raise storage.ArtifactNotFound(uri)
        return objects[uri]

    monkeypatch.setattr(storage, "read_bytes", read_bytes)
    monkeypatch.setenv("CELERITAS_MODELS_S3_PREFIX", "s3://models/ok")
    path = _keras_archive(roots / "models" / "net.keras")
    model = "net.keras" if where == "local" else "s3://models/ok/net.keras"
    objects["s3://models/ok/net.keras"] = path.read_bytes()
    params = PipelineParams(model=model)
    prepared = _resolved_model(params, resolve_model(model))
    assert isinstance(prepared, ResolvedModel) and prepared.kind == "keras" and prepared.knobs == {}
    loaded: list[str] = []
    monkeypatch.setattr(tasks.common, "get_model", lambda name, **kw: loaded.append(name) or name)
    load_model(prepared)
    assert Path(loaded[0]).read_bytes() == path.read_bytes()  # the very bytes prepare hashed
    with zipfile.ZipFile(path, "a") as archive:  # changed after prepare
        archive.writestr("extra.txt", "x")
    objects["s3://models/ok/net.keras"] = path.read_bytes()
    with pytest.raises(CeleritasInputError, match=r"^parameter 'model': .*net\.keras changed since prepare "
                                                  r"checked it \(SHA-256 [0-9a-f]{12}…, now [0-9a-f]{12}…\)"):
        load_model(prepared)
    path.unlink()
    objects.clear()
    with pytest.raises(CeleritasInputError, match=r"^parameter 'model': cannot read .*net\.keras"):
        load_model(prepared)
    assert len(loaded) == 1


def test_the_trigger_time_check_refuses_what_resolve_model_refuses_without_reading_the_model(
        roots: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server checks a trigger with check_model: the same refusals, but it never downloads
    an S3 model or looks for a module (only the workers have them)."""
    from tasks import storage

    def no_download(uri: str) -> bytes:
        raise AssertionError(f"the trigger check downloaded {uri}")

    monkeypatch.setattr(storage, "read_bytes", no_download)
    monkeypatch.setenv("CELERITAS_MODELS_S3_PREFIX", "s3://models/ok")
    monkeypatch.setenv("CELERITAS_MODEL_MODULES", "acme.models")
    _keras_archive(roots / "models" / "net.keras")
    (roots / "models" / "text.keras").write_text("not a zip")
    assert [check_model(m) for m in ("nmt", "net.keras", "s3://models/ok/any.keras",
                                     "acme.models.vision:build")] == ["zoo", "keras", "keras", "function"]
    for model, knobs, message in (
        ("no_such_model", None, r"^parameter 'model': unknown model 'no_such_model' \(zoo: inception_v3, "),
        ("nmt", {"filters": 8}, r"^parameter 'model_knobs': nmt has no knob 'filters' \(its knobs: layers, "
                                r"units, seq_len, vocab\); leave the knobs empty for its own sizes$"),
        ("mlp", {"layers": -1}, "^parameter 'model_knobs': model 'mlp': layers must be a positive integer"),
        ("missing.keras", None, "^parameter 'model': no such .keras file: "),
        ("text.keras", None, "^parameter 'model': .* is not a Keras archive"),
        ("../x.keras", None, "^parameter 'model': ../x.keras is outside the models root"),
        ("s3://models/other/net.keras", None, "outside the allowed S3 prefix: s3://models/ok/"),
        ("os:abort", None, "^parameter 'model': module 'os' is not under an allowed prefix: acme.models$"),
        ("acme.models:x;y", None, "is not MODULE:FUNCTION")):
        with pytest.raises(CeleritasInputError, match=message):
            check_model(model, knobs)


def test_a_trigger_is_checked_without_tensorflow(roots: Path) -> None:
    """The API server has no TensorFlow: the whole trigger check (a zoo model's knobs too) needs none."""
    _keras_archive(roots / "models" / "net.keras")
    code = ("import sys; from tasks.params import check_trigger; "
            "check_trigger({'model': 'transformer', 'model_knobs': {'heads': 4}}); "
            "check_trigger({'model': 'net.keras', 'model_knobs': None}); "
            "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs tensorflow")
def test_keras_files_load_in_safe_mode(tmp_path: Path) -> None:
    """A .keras file with a Lambda layer (serialized Python code) is refused, never executed."""
    from celeritas_tf.models import load_keras_file
    from celeritas_tf.tf import tensorflow

    tensorflow()
    import keras

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2.0)(inputs))
    path = tmp_path / "lambda.keras"
    model.save(path)
    with pytest.raises(CeleritasInputError, match=r"cannot load Keras model .*safe"):
        load_keras_file(str(path))


# ---------------------------------------------------------------------------------------- run_dir
def test_run_dirs_stay_inside_the_runs_root(roots: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    runs = roots / "build" / "runs"
    assert check_run_dir("mine") == str((runs / "mine").resolve())
    assert check_run_dir(str(runs / "a" / "b")) == str((runs / "a" / "b").resolve())
    (runs / "out").symlink_to(tmp_path)
    for run_dir, message in (("../../x", "is outside the runs root"), ("/etc", "is outside the runs root"),
                             ("out/x", "is outside the runs root"),
                             ("file:///tmp/x", "is not a folder or s3:// URI: file: URIs are refused"),
                             ("FILE:/tmp/x", "file: URIs are refused"),
                             ("s3://bucket/x", "outside the allowed S3 prefix: nowhere "
                                               r"\(set CELERITAS_RUNS_S3_PREFIX")):
        with pytest.raises(CeleritasInputError, match=f"^parameter 'run_dir': .*{message}"):
            check_run_dir(run_dir)
    monkeypatch.setenv("CELERITAS_RUNS_S3_PREFIX", "s3://bucket/runs")
    assert check_run_dir("s3://bucket/runs/job-1") == "s3://bucket/runs/job-1"
    for run_dir in ("s3://bucket/runsx/j", "s3://bucket/runs/../secrets", "s3://other/runs/j"):
        with pytest.raises(CeleritasInputError, match=r"outside the allowed S3 prefix: s3://bucket/runs/"):
            check_run_dir(run_dir)


# ----------------------------------------------------------------------- prepare and close_run
@pytest.fixture
def store(roots: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{roots / 'mlflow.db'}")
    return roots


@pytest.mark.parametrize(("params", "message"), [
    ({"model": "os:abort"}, "module 'os' is not under an allowed prefix"),
    ({"model": "mlp", "run_dir": "../../x"}, "is outside the runs root"),
    ({"improvement_threshold": float("nan")}, "expected a finite number"),
    ({"model": "nope"}, "unknown model 'nope'"),
])
def test_prepare_refuses_and_records_the_refusal_in_mlflow(store: Path, params: dict, message: str) -> None:
    from mlflow import MlflowClient

    from tasks import tracking
    from tasks.prepare import prepare

    with pytest.raises(CeleritasInputError, match=message):
        prepare(params, job_id="refused")
    client = MlflowClient(tracking.tracking_uri())
    (run,) = client.search_runs([tracking.experiment_id()], "tags.`celeritas.job_id` = 'refused'")
    assert run.info.status == "FAILED" and message.split("'")[0] in run.data.tags["celeritas.error"]
    assert run.data.tags["celeritas.publish_decision"] == "failed"
    # the run list says it was refused, and its description says why
    model = params.get("model", "invalid")  # none given: the record says so
    assert run.info.run_name == f"{model} (rejected) {run.info.run_id[:6]}"
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith("Rejected: ") and message.split("'")[0] in note and "\n" not in note
    assert not list((store / "build" / "runs").iterdir())  # nothing written for a refused job


@pytest.mark.parametrize("job", [None, {}, {"params": {}}, "garbage", 3])
def test_close_run_survives_whatever_failed(store: Path, job: object) -> None:
    from tasks.prepare import close_run

    assert close_run(job, None) == "FAILED"  # type: ignore[arg-type]


def test_close_run_says_in_one_line_when_tracking_fails(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.contracts import Job
    from tasks.prepare import close_run
    from tasks.tracking import TransientTrackingError

    job = Job.from_xcom({"params": {}, "run_dir": str(store), "parent_run_id": "0" * 32,
                         "configuration": {"key": "0" * 16}, "model": {
                             "kind": "zoo", "name": "mlp", "location": None, "content_sha256": None,
                             "knobs": {}, "paper_config": False},
                         "cluster": {"num_devices": 1, "device_memory_bytes": 1 << 30,
                                     "slope_us_per_byte": 1e-4, "intercept_us": 25.0, "topology": None}})
    refused = r"^close_run: cannot end MLflow parent run 0{32} as FAILED: MLflow: .*not found$"
    with pytest.raises(CeleritasInputError, match=refused):
        close_run(job, None)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://u:s3cret@127.0.0.1:9/")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    with pytest.raises(TransientTrackingError) as err:  # retried by the DAG, and no password in it
        close_run(job, None)
    assert "\n" not in str(err.value) and "s3cret" not in str(err.value) and "u:***@" in str(err.value)


# ----------------------------------------------------------------------------------- redaction
@pytest.mark.parametrize(("text", "expected"), [
    ("http://alice:s3cret@mlflow:5000/api", "http://alice:***@mlflow:5000/api"),
    ("postgresql+psycopg2://airflow:pw0rd@db/airflow", "postgresql+psycopg2://airflow:***@db/airflow"),
    ("AWS_SECRET_ACCESS_KEY=abc/def+1 next", "AWS_SECRET_ACCESS_KEY=*** next"),
    ("password: hunter2", "password: ***"),
    ("MLFLOW_TRACKING_TOKEN='tok123'", "MLFLOW_TRACKING_TOKEN='***'"),
    ("GET /k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=ff00&x=1",
     "GET /k?X-Amz-Credential=***&X-Amz-Signature=***&x=1"),
    ("Authorization: Bearer abcdefgh12345", "Authorization: ***"),
    ("configuration 0123456789abcdef, config_key=0123456789abcdef, run 8de4e4a790ed46b9",
     "configuration 0123456789abcdef, config_key=0123456789abcdef, run 8de4e4a790ed46b9"),
    ("http://mlflow:5000 s3://bucket/key.json", "http://mlflow:5000 s3://bucket/key.json"),
    # names that end in KEY hold keys; the configuration key, a bare key and KeyError do not
    ("PRIVATE_KEY=abc SSH_KEY=xyz api_key=1 AccountKey=ab+/==;x=1", "PRIVATE_KEY=*** SSH_KEY=*** api_key=*** "
                                                                   "AccountKey=***;x=1"),
    ("celeritas.config_key=0123456789abcdef CONFIG_KEY=0123456789abcdef key=abc KeyError: 'model'",
     "celeritas.config_key=0123456789abcdef CONFIG_KEY=0123456789abcdef key=abc KeyError: 'model'"),
    # words that only contain a secret word are not secrets
    ("author: ann, max_tokens: 512, PWD=/home/ann", "author: ann, max_tokens: 512, PWD=/home/ann"),
    # quoted names and values (a dict's repr), a setting inside another's value
    ("{'aws_secret_access_key': 'a b', \"password\": \"p w\"}",
     "{'aws_secret_access_key': '***', \"password\": \"***\"}"),
    ("DSN=host=db password=x user=u", "DSN=host=db password=*** user=u"),
    ("x-amz-security-token: FQoG", "x-amz-security-token: ***"),
])
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_log_records_are_redacted() -> None:
    import logging

    record = logging.LogRecord("x", logging.INFO, __file__, 1, "server %s down", ("http://u:pw@h/",), None)
    assert RedactingFilter().filter(record) and record.getMessage() == "server http://u:***@h/ down"


def test_credentials_never_reach_the_output_of_celeritas_run(tmp_path: Path) -> None:
    from tests.mlflow_server import free_port

    uri = f"http://mlflow-user:s3cretPassw0rd@127.0.0.1:{free_port()}/"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
           "MLFLOW_HTTP_REQUEST_TIMEOUT": "5", "CELERITAS_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    celeritas = [sys.executable, "-m", "celeritas_cli"]
    for args, code in ((["run", "--model", "mlp"], 1),  # the tracking server is unreachable
                       (["run", "--model", "os:abort"], 2),  # refused, and its record cannot be written
                       (["runs", "compare", "--model", "mlp"], 1),
                       (["production", "show", "--model", "mlp"], 1)):
        out = subprocess.run([*celeritas, *args], capture_output=True, text=True, env=env, timeout=300)
        both = out.stdout + out.stderr
        assert out.returncode == code, both
        assert "s3cretPassw0rd" not in both and "Traceback" not in both, both
        assert "mlflow-user:***@127.0.0.1" in both, both


def test_dag_task_errors_lose_their_secrets() -> None:
    pytest.importorskip("airflow")
    sys.path.insert(0, str(ROOT / "dags"))
    try:
        from celeritas_steps import _call
    finally:
        sys.path.remove(str(ROOT / "dags"))

    def failing() -> None:
        try:
            raise ConnectionError("http://u:topsecret@host/ refused")
        except ConnectionError as exc:
            raise RuntimeError("tracking failed") from exc

    with pytest.raises(RuntimeError) as err:
        _call(failing)
    assert "topsecret" not in str(err.value) and err.value.__cause__ is None
    assert err.value.__suppress_context__
    with pytest.raises(Exception, match="parameter 'x': http://u:\\*\\*\\*@h"):
        _call(lambda: (_ for _ in ()).throw(CeleritasInputError("parameter 'x': http://u:pw@h")))

    def store_down() -> None:
        try:
            raise ConnectionResetError("reset by http://u:topsecret@s3")
        except ConnectionResetError as exc:
            raise storage.TransientStorageError("s3://b/run/x.json", f"ConnectionResetError: {exc}") from exc

    # a transient failure stays its type (retried), as its one line without the chain of causes
    with pytest.raises(storage.TransientStorageError) as transient:
        _call(store_down)
    message = str(transient.value)
    assert message.startswith("s3://b/run/x.json: transient storage error: ConnectionResetError")
    assert "topsecret" not in message and "\n" not in message and transient.value.__cause__ is None


def test_a_run_directory_belongs_to_one_job(store: Path) -> None:
    """A second job pointed at a run directory that holds another job's artifacts is refused, so no
    run ever rewrites files that another run wrote or that production was read from."""
    from tasks.prepare import prepare

    first = prepare({"model": "mlp", "run_dir": "shared"}, job_id="first")
    assert prepare({"model": "mlp", "run_dir": "shared"}, job_id="first").run_dir == first.run_dir  # a retry
    before = {p: p.read_bytes() for p in Path(first.run_dir).rglob("*") if p.is_file()}
    with pytest.raises(CeleritasInputError, match="already holds the artifacts of job 'first'"):
        prepare({"model": "mlp", "run_dir": "shared"}, job_id="second")
    assert {p: p.read_bytes() for p in Path(first.run_dir).rglob("*") if p.is_file()} == before
    (store / "build" / "runs" / "used").mkdir()
    (store / "build" / "runs" / "used" / "notes.txt").write_text("someone's files")
    with pytest.raises(CeleritasInputError, match="is not empty and belongs to no job"):
        prepare({"model": "mlp", "run_dir": "used"}, job_id="third")
