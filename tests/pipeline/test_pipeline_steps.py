"""Pipeline steps without Airflow: the typed contracts between the steps (XCom round trips, one-line
errors naming a missing or bad field), retries leave no corrupt or duplicate artifacts or MLflow
runs, parameters are validated with one-line errors, publishing never replaces a faster placement,
and ``celeritas run`` / ``celeritas runs compare`` work end to end."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from tasks import contracts, storage, tracking
from tasks.calibrate_comm import calibrate_comm
from tasks.contracts import (
    Contract,
    Job,
    PlacementValidation,
    PlaceResult,
    PublishResult,
    ValidationPlan,
)
from tasks.fit_regression import fit_regression
from tasks.fuse import fuse
from tasks.params import MAX_BATCH_SIZE, PLACERS, PipelineParams, resolve_params
from tasks.pipeline import STEP_NAMES
from tasks.place import place
from tasks.prepare import close_run, prepare
from tasks.profile_small_batches import profile_small_batches
from tasks.publish import publish
from tasks.remeasure_large_batch import remeasure_large_batch
from tasks.steps import STEPS, PipelineResult

#: Every contract, the pipeline's whole result (derived from the steps' declaration) included.
CONTRACTS = {**contracts.CONTRACTS, "PipelineResult": PipelineResult}

TINY = {
    "model": "mlp", "model_knobs": {"features": 16, "hidden": 32, "layers": 2, "classes": 10},
    "batch_size": 16, "profile_batch_sizes": [2, 4], "num_devices": 2, "device_memory": "60KB",
    "calibrate_comm": False, "placers": ["celeritas", "m-topo"], "validation_steps": 5, "warmup_steps": 1,
}
# the steps themselves run TensorFlow and log to MLflow; the contracts need neither
needs_stack = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("tensorflow", "mlflow")),
    reason="needs tensorflow and mlflow")


# ------------------------------------------------------------------------------------------ contracts
def _json_value() -> st.SearchStrategy[Any]:
    leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


def _strategy(hint: Any) -> st.SearchStrategy[Any]:
    """Values of the annotation ``hint``, as a step (or XCom) would give them."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return _json_value()
    if origin in (typing.Union, types.UnionType):
        (inner,) = (a for a in args if a is not type(None))
        return st.none() | _strategy(inner)
    if origin is Literal:
        return st.sampled_from(args)
    if isinstance(hint, type) and issubclass(hint, Contract):
        return _contract_strategy(hint)
    if hint is PipelineParams:
        return _params_strategy()
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), _strategy(args[1]), max_size=4)
    if origin is tuple:
        return st.lists(_strategy(args[0]), max_size=4).map(tuple)
    simple = {bool: st.booleans(), int: st.integers(), str: st.text(min_size=1),
              float: st.floats(allow_nan=False)}  # inf is fine (== inf); NaN has its own test
    return simple[hint]


def _params_strategy() -> st.SearchStrategy[PipelineParams]:
    """Valid pipeline parameters (a job's: every one is checked against the form's schema)."""
    return st.builds(
        PipelineParams, batch_size=st.integers(1, MAX_BATCH_SIZE), R=st.integers(1, 2**31 - 1),
        memory_fraction=st.floats(0, 1, exclude_min=True), paper_config=st.booleans(),
        model_knobs=st.dictionaries(st.sampled_from(["layers", "filters"]), st.integers(1, 1000)),
        placers=st.lists(st.sampled_from(PLACERS), min_size=1, unique=True).map(tuple),
        profile_batch_sizes=st.lists(st.integers(1, 64), min_size=2, max_size=4, unique=True).map(tuple),
        device_memory=st.sampled_from(["30MiB", "1e9", "60KB", " 2 GiB "]),
        run_dir=st.none() | st.text(min_size=1, max_size=12))


def _contract_strategy(cls: type[Contract]) -> st.SearchStrategy[Contract]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: _strategy(hints[f.name]) for f in dataclasses.fields(cls)})


def _example(hint: Any) -> Any:
    """One valid value of ``hint`` in XCom form."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return {}
    if origin in (typing.Union, types.UnionType):
        return _example(next(a for a in args if a is not type(None)))
    if origin is Literal:
        return args[0]
    if isinstance(hint, type) and issubclass(hint, Contract):
        return _xcom_example(hint)
    if hint is PipelineParams:
        return PipelineParams().to_json()
    if origin is dict:
        return {"celeritas": _example(args[1])}
    if origin is tuple:
        return [_example(args[0])]
    return {bool: True, int: 3, float: 1.5, str: "s3://bucket/x.json"}[hint]


def _xcom_example(cls: type[Contract]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: _example(hints[f.name]) for f in dataclasses.fields(cls)}


def _wrong(hint: Any) -> Any:
    """A value that ``hint`` rejects."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _wrong(next(a for a in args if a is not type(None)))
    if origin is Literal:
        return "maybe"
    if hint is str:
        return 5
    if hint in (int, float, bool):
        return "fast"
    return "not an object"  # dict, tuple, a nested contract, the params (dict[str, Any])


FIELDS_OF = [(name, f.name) for name, cls in CONTRACTS.items() for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("name", sorted(CONTRACTS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_contract_round_trips_through_xcom_json(name, data):
    cls = CONTRACTS[name]
    value = data.draw(_contract_strategy(cls))
    xcom = value.to_xcom()
    wire = json.loads(json.dumps(xcom))  # what Airflow stores: plain JSON (no tuples, no objects)
    assert wire == xcom
    assert cls.from_xcom(wire) == value
    assert cls.from_xcom(value) is value


@pytest.mark.parametrize(("name", "field"), FIELDS_OF)
def test_from_xcom_names_a_missing_field(name, field):
    cls = CONTRACTS[name]
    xcom = _xcom_example(cls)
    assert cls.from_xcom(xcom).to_xcom() == xcom
    del xcom[field]
    declared = next(f for f in dataclasses.fields(cls) if f.name == field)
    default = declared.default
    if declared.default_factory is not dataclasses.MISSING:
        default = declared.default_factory()
    if default is not dataclasses.MISSING:  # added later: an older producer's XCom lacks it
        assert getattr(cls.from_xcom(xcom), field) == default
        return
    with pytest.raises(CeleritasInputError, match=f"^{name}: field '{field}' missing$"):
        cls.from_xcom(xcom)


@pytest.mark.parametrize(("name", "field"), FIELDS_OF)
def test_from_xcom_names_a_bad_field(name, field):
    cls = CONTRACTS[name]
    bad = _wrong(typing.get_type_hints(cls)[field])
    with pytest.raises(CeleritasInputError, match=f"^{name}: field '{field}' must be .*, got ") as err:
        cls.from_xcom({**_xcom_example(cls), field: bad})
    assert "\n" not in str(err.value)


def test_contract_checks_nested_values_and_normalises_numbers():
    numpy = pytest.importorskip("numpy")
    good = _xcom_example(PlaceResult)
    with pytest.raises(CeleritasInputError, match=r"^PlaceResult: field 'oom\.celeritas' must be a boolean, "
                                                  r"got 'yes'$"):
        PlaceResult.from_xcom({**good, "oom": {"celeritas": "yes"}})
    with pytest.raises(CeleritasInputError, match=r"field 'placements\.m-topo' must be a non-empty string"):
        PlaceResult.from_xcom({**good, "placements": {"celeritas": "a.json", "m-topo": ""}})
    with pytest.raises(CeleritasInputError, match=r"^PublishResult: field 'decision' must be one of "
                                                  r"'promoted', 'kept', got 'maybe'$"):
        PublishResult.from_xcom({**_xcom_example(PublishResult), "decision": "maybe"})
    with pytest.raises(CeleritasInputError, match=r"^PlacementValidation: expected a JSON object, got None$"):
        PlacementValidation.from_xcom(None)
    with pytest.raises(CeleritasInputError, match="field 'ops' must be an integer, got True"):
        contracts.ProfileResult(profile_uri="p.json", ops=True, batch_sizes=(2, 4))
    # numpy scalars (what the steps compute with) become plain Python numbers; NaN survives XCom
    fit = contracts.FitResult(fits_uri="f.json", ops=numpy.int64(7),
                              predicted_total_time_us=numpy.float32(2.5), predicted_total_memory_bytes=4,
                              fit_median_memory_r2=float("nan"),
                              fit_median_time_r2=numpy.float64(0.5))
    xcom = fit.to_xcom()
    assert type(xcom["ops"]) is int and type(xcom["predicted_total_time_us"]) is float
    assert xcom["predicted_total_memory_bytes"] == 4.0 and type(xcom["predicted_total_memory_bytes"]) is float
    back = contracts.FitResult.from_xcom(json.loads(json.dumps(xcom)))
    assert math.isnan(back.fit_median_memory_r2) and back.fit_median_time_r2 == 0.5
    # extra keys (a newer producer) are ignored; the contract is frozen
    job = Job.from_xcom({**_xcom_example(Job), "params_uri": "p.json"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.run_dir = "elsewhere"  # type: ignore[misc]


def test_pipeline_result_lists_the_steps_in_order_with_a_json_view():
    assert STEP_NAMES == ("prepare", "calibrate_comm", "profile_small_batches", "fit_regression",
                          "remeasure_large_batch", "fuse", "place", "plan_validation", "validate", "publish")
    result = PipelineResult.from_xcom(_xcom_example(PipelineResult))
    assert isinstance(result.validate[0], PlacementValidation) and list(result.to_dict()) == list(STEP_NAMES)
    assert result.publish.to_xcom() == result.to_dict()["publish"]


def test_no_step_reads_a_parameter_by_name_or_resolves_the_model_or_the_cluster_again():
    """Each step takes the typed job and its inputs: no step module indexes the parameters by name
    or calls what resolves them, the model or the cluster (``prepare`` did, once)."""
    import ast
    import inspect

    resolvers = {"resolve_params", "resolve_model", "check_model", "parse_size", "cluster_from_json",
                 "load_cluster"}
    for module in sorted({step.function.partition(":")[0] for step in STEPS}):
        tree = ast.parse(inspect.getsource(importlib.import_module(module)))
        called = {node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                  for node in ast.walk(tree) if isinstance(node, ast.Call)}
        assert not called & resolvers, (module, called & resolvers)
        by_name = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Subscript)
                   and isinstance(node.value, ast.Attribute) and node.value.attr == "params"]
        assert not by_name, (module, by_name)


# ---------------------------------------------------------------------------------------------- steps
def _children(parent: str) -> list[str]:
    import mlflow

    client = mlflow.MlflowClient(tracking.tracking_uri())
    exp = client.get_experiment_by_name("celeritas-placement")
    runs = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
    return sorted(r.data.tags["celeritas.placer"] for r in runs)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    return tmp_path


def test_params_are_validated_with_one_line_errors():
    assert resolve_params({}).validation_steps == 50
    for bad, field in (({"batch_size": 0}, "batch_size"), ({"placers": ["nope"]}, "placers.0"),
                       ({"device_memory": "12 parsecs"}, "device_memory"), ({"colour": 1}, "params"),
                       ({"profile_batch_sizes": [4, 4]}, "profile_batch_sizes")):
        with pytest.raises(CeleritasInputError, match=f"parameter '{field}'") as err:
            resolve_params(bad)
        assert "\n" not in str(err.value)


@needs_stack
def test_the_first_step_in_a_fresh_process_keeps_the_knobs_of_a_paper_model():
    """``load_model`` builds the model a worker runs first (the profile) in a process where nothing
    has called get_model yet: it must have the job's knobs, or the profile is of the small default
    configuration while the later steps place the configured one."""
    knobs = {"layers": 6, "filters": 8, "image_size": 24}
    model = {"kind": "zoo", "name": "tensor_holography", "location": None, "content_sha256": None,
             "knobs": knobs, "paper_config": False}
    code = ("import json; from tasks.common import load_model; from tasks.contracts import ResolvedModel; "
            f"print(json.dumps(load_model(ResolvedModel.from_xcom({model!r})).config))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == knobs


@needs_stack
def test_a_retried_step_overwrites_its_outputs_and_reuses_its_runs(store, monkeypatch):
    prepared = prepare(TINY, job_id="job-1")
    again = prepare(TINY, job_id="job-1")  # a retried prepare: same run directory and parent run
    assert again.job == prepared.job
    job = prepared.job
    assert storage.read_json(prepared.params_uri) == job.params.to_json()
    cluster = calibrate_comm(job)
    assert cluster.r2 is None  # calibration off: the default transfer model
    assert cluster.transfer_model == "default"
    assert cluster.transfer_reason == "calibration is off (calibrate_comm)"
    profile = profile_small_batches(job)
    assert profile.batch_sizes == (2, 4)
    fits = fit_regression(job, profile)
    measured = remeasure_large_batch(job, fits, cluster)
    fusion = fuse(job, measured, cluster)
    assert fusion.nodes == measured.ops and fusion.coarse_nodes <= fusion.nodes

    # the place step fails half-way (the tracking server drops out after the first child run)
    real_child_run = tracking.child_run
    calls = []

    def flaky(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise tracking.TransientTrackingError("http://127.0.0.1:1", "connection refused")
        return real_child_run(*args, **kwargs)

    monkeypatch.setattr(tracking, "child_run", flaky)
    with pytest.raises(tracking.TransientTrackingError):
        place(job, measured, cluster)
    monkeypatch.setattr(tracking, "child_run", real_child_run)
    before = storage.list_uris(job.run_dir)
    assert not any(u.endswith(".tmp") or "celeritas-tmp" in u for u in before)

    # the retry completes; running it once more changes nothing
    first = place(job, measured, cluster)
    after_first = storage.list_uris(job.run_dir)
    second = place(job, measured, cluster)
    assert storage.list_uris(job.run_dir) == after_first
    assert first.placements == second.placements and first.child_runs == second.child_runs
    assert _children(job.parent_run_id) == ["celeritas", "m-topo"]  # one child per placer, not per attempt
    for uri in first.placements.values():
        assert storage.read_json(uri)["format"] == "celeritas-placement/1"  # complete, parseable JSON
    # each result crosses XCom and comes back equal (NaN aside, none here)
    for result in (prepared, cluster, profile, fits, measured, fusion, first):
        assert type(result).from_xcom(json.loads(json.dumps(result.to_xcom()))) == result


def _calibration(slope: float, intercept: float, r2: float) -> Any:
    from celeritas_tf.calibrate import CommCalibration

    samples = [(size, intercept) for size in (4096, 1 << 20, 1 << 26)]
    return CommCalibration(slope, intercept, samples, r2)


@needs_stack
@pytest.mark.parametrize(("fit", "used"), [((0.0, 101.4, 0.0), "default"),
                                           ((1e-4, 12.0, 0.999), "calibrated")],
                         ids=["nothing-useful", "a-transfer"])
def test_calibrate_comm_uses_a_fit_only_when_it_measured_a_transfer(store, monkeypatch, caplog, fit, used):
    from celeritas_tf import calibrate

    monkeypatch.setattr(calibrate, "calibrate_comm", lambda *args, **kwargs: _calibration(*fit))
    job = prepare({**TINY, "calibrate_comm": True}, job_id=f"calibrate-{used}").job
    caplog.set_level("INFO")
    result = calibrate_comm(job)
    comm = storage.read_json(result.cluster_uri)["comm"]
    run = tracking.get_run(job.parent_run_id)
    assert result.transfer_model == comm["source"] == run["tags"]["celeritas.transfer_model"] == used
    assert result.r2 == fit[2] and run["metrics"]["comm_fit_r2"] == fit[2]
    assert run["metrics"]["comm_fit_intercept_us"] == fit[1] == comm["calibration"]["intercept_us"]
    if used == "default":  # the case: t = 0 µs/B · bytes + 101.4 µs, R² 0.000
        assert (result.comm_slope_us_per_byte, result.comm_intercept_us) == (1e-4, 25.0)
        assert run["metrics"]["comm_intercept_us"] == 25.0 and comm["intercept_us"] == 25.0
        reason = result.transfer_reason
        assert reason.startswith("the calibration measured nothing useful") and "slope 0" in reason
        assert run["tags"]["celeritas.transfer_model_reason"] == reason == comm["calibration"]["rejected"]
        assert "(the default model: the calibration measured nothing useful" in result.summary()
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any("101.4 µs (R² 0.000)" in w and "using the default transfer model" in w for w in warnings)
    else:
        assert (result.comm_slope_us_per_byte, result.comm_intercept_us, result.transfer_reason) == \
            (1e-4, 12.0, None)
        assert "R² 0.999 >= 0.98" in run["tags"]["celeritas.transfer_model_reason"]
        assert result.summary().endswith("(calibrated, R² 0.999)")
        assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert type(result).from_xcom(json.loads(json.dumps(result.to_xcom()))) == result


@needs_stack
def test_calibrate_comm_with_a_topology_measures_each_class_and_writes_it(store, monkeypatch, caplog):
    from celeritas_core.graphs.topology import Link
    from celeritas_core.readwrite.formats import cluster_from_json
    from celeritas_tf import calibrate

    pairs = []

    def fake(num_devices, *args, pair=(0, 1), **kwargs):
        pairs.append(pair)
        return _calibration(0.0, 101.4, 0.0)  # what logical CPU devices measure: nothing useful

    monkeypatch.setattr(calibrate, "calibrate_comm", fake)
    job = prepare({**TINY, "calibrate_comm": True, "topology": "2x1:nvlink,ib"},
                  job_id="calibrate-topology").job
    caplog.set_level("INFO")
    result = calibrate_comm(job)
    doc = storage.read_json(result.cluster_uri)
    cluster = cluster_from_json(doc)
    assert pairs == [(0, 1)]  # two nodes of one device: only the network has a pair
    assert doc["format"] == "celeritas-cluster/2" and cluster.links[1] == Link.preset("ib-ndr")
    unused = doc["topology"]["links"]["nvlink4"]["calibration"]
    assert unused["rejected"] == "no pair of devices uses this link"
    assert result.transfer_model == "default"
    assert result.transfer_reason.startswith("link ib-ndr: the calibration")
    assert (result.comm_slope_us_per_byte, result.comm_intercept_us) == (cluster.slope_us_per_byte,
                                                                         cluster.intercept_us)
    run = tracking.get_run(job.parent_run_id)
    assert run["metrics"]["comm_link_ib-ndr_intercept_us"] == Link.preset("ib-ndr").intercept_us
    assert any("link ib-ndr" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    off = prepare({**TINY, "topology": "2x1:nvlink,ib"}, job_id="calibrate-topology-off").job
    assert cluster_from_json(storage.read_json(calibrate_comm(off).cluster_uri)).pair_link.tolist() == \
        cluster.pair_link.tolist()


def _measured(job: Job, placer: str, steps_ms: list[float], champion_ms: list[float],
              champion_version: str | None) -> PlacementValidation:
    """A validation of ``placer`` with these step times (ms), its placement and validation files
    written in the job's run directory, as ``validate`` would leave them."""
    placement = storage.join(job.run_dir, "placements", f"{placer}.json")
    storage.write_json(placement, {"format": "celeritas-placement/1", "assignment": {"op": 0}, "by": placer})
    validation = storage.join(job.run_dir, "validation", f"{placer}.json")
    storage.write_json(validation, {"step_seconds": [t / 1e3 for t in steps_ms]})
    ordered = sorted(steps_ms)
    return PlacementValidation(
        placer=placer, placement_uri=placement, validation_uri=validation,
        step_seconds=tuple(t / 1e3 for t in steps_ms), champion_version=champion_version,
        champion_step_seconds=tuple(t / 1e3 for t in champion_ms), champion_error=None,
        mean_s=sum(steps_ms) / len(steps_ms) / 1e3, median_s=ordered[len(ordered) // 2] / 1e3,
        p90_s=ordered[int(0.9 * (len(ordered) - 1))] / 1e3, blocks=5)


def _plan(job: Job, validations: list[PlacementValidation]) -> ValidationPlan:
    """The plan ``plan_validation`` would have made for ``validations`` (reading the champion)."""
    name = str(job.configuration["registered_model"])
    current = tracking.champion(name)
    items = tuple(contracts.ValidationItem(placer=v.placer, placement_uri=v.placement_uri,
                                           champion_version=current.version if current else None,
                                           champion_placement_uri=current.placement_uri if current else None)
                  for v in validations)
    return ValidationPlan(items=items, registered_model=name,
                          champion_version=current.version if current else None,
                          champion_placer=current.placer if current else None,
                          champion_run_id=current.run_id if current else None)


def _published_bytes(champion: tracking.Champion, folder) -> dict[str, bytes]:
    """Every file of a champion's published version, downloaded."""
    import mlflow.artifacts

    source = champion.placement_uri.rsplit("/", 1)[0]
    local = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(folder))
    return {p.name: p.read_bytes() for p in sorted(Path(local).iterdir())}


def _noisy(center_ms: float, n: int, seed: int) -> list[float]:
    """``n`` step times around ``center_ms`` with 2 % noise (deterministic per seed)."""
    import random

    rng = random.Random(seed)
    return [center_ms * (1 + rng.gauss(0, 0.02)) for _ in range(n)]


@needs_stack
def test_publish_promotes_only_a_confident_gain_and_never_touches_published_artifacts(store, tmp_path):
    job = prepare(TINY, job_id="champion").job
    first = [_measured(job, "celeritas", _noisy(10.0, 30, 1), [], None)]
    decided = publish(job, _plan(job, first), first)
    assert decided.decision == "promoted" and decided.champion_version == "1"
    assert "no champion" in decided.reason
    champion = tracking.champion(str(job.configuration["registered_model"]))
    assert champion.run_id == job.parent_run_id and champion.placer == "celeritas"
    before = _published_bytes(champion, tmp_path / "before")
    assert set(before) == {"placement.json", "validation.json", "configuration.json"}

    # noise: 1 % faster in the medians, but not surely by the 2 % threshold -> kept; the losing run
    # reuses nothing of the champion's and leaves its published files byte-identical
    noise = prepare(TINY, job_id="noise").job
    tried = [_measured(noise, "m-topo", _noisy(9.9, 30, 2), _noisy(10.0, 30, 3), "1")]
    kept = publish(noise, _plan(noise, tried), tried)
    assert kept.decision == "kept" and not kept.promoted and "not sure" in kept.reason
    note = tracking.get_run(noise.parent_run_id)["tags"]["mlflow.note.content"]  # the run's description
    assert note == f"Kept the champion (version 1): {kept.reason}" and " ms vs champion " in note
    assert (kept.champion_version, kept.production_run_id) == ("1", job.parent_run_id)
    assert kept.comparison["p_value"] > 0 and kept.comparison["threshold"] == 0.02
    assert _published_bytes(tracking.champion(champion.registered_model), tmp_path / "after") == before
    document = json.loads(storage.read_text(storage.join(noise.run_dir, "publish.json")))
    assert document == kept.document() and document["format"] == "celeritas-publish/1"
    assert "publish_uri" not in document

    # a clear loss is kept too; a clear 20 % win over the champion measured alongside is promoted
    loss = prepare(TINY, job_id="loss").job
    slower = [_measured(loss, "m-topo", _noisy(12.0, 30, 4), _noisy(10.0, 30, 5), "1")]
    assert publish(loss, _plan(loss, slower), slower).decision == "kept"
    faster = prepare(TINY, job_id="faster").job
    plan = _plan(faster, [])
    won = [_measured(faster, "celeritas", _noisy(8.0, 30, 6), _noisy(10.0, 30, 7), "1"),
           _measured(faster, "m-topo", _noisy(9.0, 30, 8), _noisy(10.0, 30, 9), "1")]
    better = publish(faster, plan, won)
    assert better.decision == "promoted" and better.placer == "celeritas" and better.champion_version == "2"
    assert "level 0.025" in better.reason  # Bonferroni: two challengers compared at alpha 0.05
    assert tracking.get_run(faster.parent_run_id)["tags"]["mlflow.note.content"] == \
        f"Promoted to production as version 2: {better.reason}"
    assert _published_bytes(champion, tmp_path / "v1") == before  # version 1 is still what it was
    history = tracking.decision_history("mlp")
    assert [d.decision for d in history] == ["promoted", "kept", "kept", "promoted"]


def _parent_metrics_and_artifacts(run_id: str) -> tuple[dict[str, float], set[str]]:
    """A run's metrics and the files at the top of its artifacts."""
    import mlflow

    client = mlflow.MlflowClient(tracking.tracking_uri())
    top = {a.path for a in client.list_artifacts(run_id) if not a.is_dir}
    return client.get_run(run_id).data.metrics, top


def _ordered_placements(job: Job, placers: tuple[str, ...], without_order: str) -> dict[str, str]:
    """Real placements of the job's model by ``placers`` in its run directory, each recording a
    ``device_order`` (its ops per device in a topological order of the step) and ``order_mode``
    ``enforced``, except ``without_order``'s (written before orders were recorded)."""
    from celeritas_core.graphs.cluster import Cluster
    from celeritas_core.placers import place as run_placer
    from celeritas_core.readwrite.formats import placement_to_json
    from celeritas_tf.extract import graph_from_step
    from celeritas_tf.step import build_training_step
    from tasks.common import load_model, placement_uri

    step = build_training_step(load_model(job.model), job.params.batch_size)
    graph = graph_from_step(step)
    cluster = Cluster.homogeneous(job.cluster.num_devices, graph.total_memory_bytes * 0.6)
    uris = {}
    for placer in placers:
        doc = placement_to_json(run_placer(graph, cluster, placer))
        doc.pop("device_order", None)
        doc.pop("order_mode", None)
        if placer != without_order:
            doc["device_order"] = [[n for n in step.step_op_names() if doc["assignment"][n] == d]
                                   for d in range(cluster.num_devices)]
            doc["order_mode"] = "enforced"
        uris[placer] = storage.write_json(placement_uri(job.run_dir, placer), doc)
    return uris


@needs_stack
def test_validate_times_both_orders_and_publish_ranks_predicted_against_measured(store, caplog, monkeypatch):
    from scipy.stats import spearmanr

    from celeritas_core import plots
    from tasks.validate import plan_validation, validate

    job = prepare(TINY, job_id="orders").job
    placers = ("celeritas", "heft", "m-topo", "metis")
    uris = _ordered_placements(job, placers, without_order="metis")
    placed = PlaceResult(placements=uris, child_runs={}, compare_uri="unused", best_simulated="celeritas",
                         simulated_step_time_us={p: 1.0 for p in placers}, oom={p: False for p in placers})
    plan = plan_validation(job, placed)
    caplog.set_level("INFO")
    validations = [validate(job, item) for item in plan.items]
    import mlflow

    client = mlflow.MlflowClient(tracking.tracking_uri())
    logged: dict[str, dict[str, float]] = {}
    for v in validations:
        doc = storage.read_json(uris[v.placer])
        metrics = client.get_run(v.child_run_id).data.metrics
        logged[v.placer] = metrics
        modes = {"free"} if v.placer == "metis" else {"enforced", "free"}
        # every mode timed, in the same blocks; the competing figures are the placement's own mode's
        assert set(v.mode_step_seconds) == modes
        assert v.order_mode == ("free" if v.placer == "metis" else "enforced")
        assert all(len(steps) == job.params.validation_steps for steps in v.mode_step_seconds.values())
        assert v.step_seconds == v.mode_step_seconds[v.order_mode]
        assert metrics["predicted_step_time_ms"] == pytest.approx(doc["predicted_step_time_us"] / 1e3)
        assert v.predicted_step_time_s == pytest.approx(doc["predicted_step_time_us"] / 1e6)
        for mode in ("enforced", "free"):
            if mode not in modes:
                assert f"measured_median_step_time_{mode}_ms" not in metrics
                assert f"measured_over_predicted_{mode}" not in metrics
                assert f"order_agreement_{mode}" not in metrics
                continue
            median_ms = v.mode_median_s(mode) * 1e3
            assert metrics[f"measured_median_step_time_{mode}_ms"] == pytest.approx(median_ms)
            assert metrics[f"measured_over_predicted_{mode}"] == pytest.approx(
                median_ms / metrics["predicted_step_time_ms"])
            if "enforced" in modes:  # a placement that records its order: read back from a traced step
                assert 0.0 <= metrics[f"order_agreement_{mode}"] <= 1.0
            else:
                assert f"order_agreement_{mode}" not in metrics
        if "enforced" in modes:
            assert metrics["order_agreement_enforced"] == 1.0  # every device ran the recorded order
        assert metrics["measured_median_step_time_ms"] == pytest.approx(v.median_s * 1e3)
        competing = metrics[f"measured_median_step_time_{v.order_mode}_ms"]
        assert metrics["measured_median_step_time_ms"] == competing
        body = storage.read_json(v.validation_uri)
        assert set(body["modes"]) == modes and body["order_mode"] == v.order_mode
        assert client.get_run(v.child_run_id).data.tags["celeritas.order_mode"] == v.order_mode
        assert type(v).from_xcom(json.loads(json.dumps(v.to_xcom()))) == v

    titles = []
    real_chart = plots.predicted_vs_measured_chart

    def spy(points, path, *, title=""):
        titles.append(title)
        return real_chart(points, path, title=title)

    monkeypatch.setattr(plots, "predicted_vs_measured_chart", spy)
    decided = publish(job, plan, validations)
    assert decided.decision == "promoted"
    metrics, top = _parent_metrics_and_artifacts(job.parent_run_id)
    # Spearman from the figures logged on the child runs, per mode, over the placers timed in it
    for mode, ranked in (("enforced", ("celeritas", "heft", "m-topo")), ("free", placers)):
        predicted = [logged[p]["predicted_step_time_ms"] for p in ranked]
        measured = [logged[p][f"measured_median_step_time_{mode}_ms"] for p in ranked]
        expected = spearmanr(predicted, measured).statistic
        assert len(set(predicted)) == len(predicted)  # the placers' predictions differ: a ranking
        if math.isfinite(expected):
            assert metrics[f"spearman_predicted_measured_{mode}"] == pytest.approx(expected)
        else:  # a side all equal: no ranking, not logged
            assert f"spearman_predicted_measured_{mode}" not in metrics
    # the chart at the top of the parent run's artifacts and in the run directory
    assert "predicted_vs_measured.png" in top
    assert storage.read_bytes(storage.join(job.run_dir, "predicted_vs_measured.png"))[:4] == b"\x89PNG"
    summary = storage.read_json(decided.validation_summary_uri)
    assert summary["prediction"]["cpu_only"] is True
    assert {p["placer"] for p in summary["prediction"]["points"]} == set(placers)
    # logical CPU devices: the log and the chart's title say the figures are noise-bound
    [title] = titles
    assert "noise-bound" in title
    assert any("noise-bound" in r.getMessage() for r in caplog.records if r.name == "tasks.publish")
    assert any("Spearman of predicted vs measured step time (enforced order)" in r.getMessage()
               for r in caplog.records)


def _with_prediction(v: PlacementValidation, predicted_ms: float, modes_ms: dict[str, list[float]],
                     cpu: bool = True) -> PlacementValidation:
    """``v`` with a predicted step and each mode's step times (ms), on CPU (or GPU) devices."""
    device = "/job:localhost/replica:0/task:0/device:" + ("CPU:0" if cpu else "GPU:0")
    return dataclasses.replace(v, predicted_step_time_s=predicted_ms / 1e3, order_mode="enforced",
                               mode_step_seconds={m: tuple(t / 1e3 for t in ts)
                                                  for m, ts in modes_ms.items()},
                               devices_used=(device,))


@needs_stack
def test_publish_ranks_prediction_only_with_three_placers_and_flags_cpu_figures(store, caplog):
    from scipy.stats import spearmanr

    caplog.set_level("INFO")
    job = prepare(TINY, job_id="ranked").job
    figures = {"celeritas": (3.0, 12.0, 10.0), "m-topo": (4.0, 11.0, 13.0), "metis": (5.0, 15.0, 14.0),
               "heft": (6.0, 14.0, 16.0)}  # predicted, free and enforced medians (ms)
    validations = [_with_prediction(_measured(job, p, _noisy(free, 9, i), [], None), predicted,
                                    {"free": _noisy(free, 9, i), "enforced": _noisy(enforced, 9, 10 + i)},
                                    cpu=False)
                   for i, (p, (predicted, free, enforced)) in enumerate(figures.items())]
    publish(job, _plan(job, validations), validations)
    metrics, top = _parent_metrics_and_artifacts(job.parent_run_id)
    for mode in ("free", "enforced"):
        expected = spearmanr([v.predicted_step_time_s for v in validations],
                             [v.mode_median_s(mode) for v in validations]).statistic
        assert metrics[f"spearman_predicted_measured_{mode}"] == pytest.approx(expected)
    assert "predicted_vs_measured.png" in top
    assert not any("noise-bound" in r.getMessage() for r in caplog.records)  # ran on a GPU
    # two placers: no rank correlation is logged, and the log says why; the chart is still drawn
    caplog.clear()
    few = prepare(TINY, job_id="two-placers").job
    two = [_with_prediction(_measured(few, p, _noisy(10.0, 9, i), [], None), 3.0 + i,
                            {"free": _noisy(10.0 + i, 9, i), "enforced": _noisy(11.0 + i, 9, i)})
           for i, p in enumerate(("celeritas", "m-topo"))]
    publish(few, _plan(few, two), two)
    metrics, top = _parent_metrics_and_artifacts(few.parent_run_id)
    assert not any(name.startswith("spearman_") for name in metrics)
    said = [r.getMessage() for r in caplog.records]
    assert any("(free order) not logged: fewer than 3 placers (2)" in m for m in said)
    assert any("noise-bound" in m for m in said) and "predicted_vs_measured.png" in top


@needs_stack
def test_close_run_ends_the_parent_run_and_a_reopening_prepare_reuses_it(store):
    job = prepare(TINY, job_id="cleared").job
    assert close_run(job, None) == "FAILED"  # a step failed for good: publish decided nothing
    run = tracking.get_run(job.parent_run_id)
    assert run["status"] == "FAILED" and run["tags"]["celeritas.publish_decision"] == "failed"
    assert run["tags"]["mlflow.note.content"].startswith("Failed: a step failed before publish decided")
    assert run["run_name"] == f"mlp b16 2dev {job.parent_run_id[:6]}"
    # a cleared Airflow task re-runs its setup: prepare reopens the same parent run
    again = prepare(TINY, job_id="cleared", reopen=True).job
    assert again.parent_run_id == job.parent_run_id
    assert tracking.get_run(job.parent_run_id)["status"] == "RUNNING"
    decision = PublishResult.from_xcom({**_xcom_example(PublishResult), "decision": "kept"})
    assert close_run(again, decision) == "FINISHED"
    assert tracking.get_run(job.parent_run_id)["status"] == "FINISHED"
    # without reopen (celeritas run), a finished job is not run again
    with pytest.raises(CeleritasInputError, match=r"^job 'cleared' already finished"):
        prepare(TINY, job_id="cleared")


@needs_stack
def test_celeritas_run_and_runs_compare(store, capsys):
    code = main(["run", "--model", "mlp", "--model-knobs", json.dumps(TINY["model_knobs"]),
                 "--batch-size", "16",
                 "--profile-batch-sizes", "2,4", "--num-devices", "2", "--device-memory", "60KB",
                 "--calibrate-comm", "false", "--placers", "celeritas,m-topo", "--validation-steps", "3",
                 "--warmup-steps", "1", "--job-id", "cli-job"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "; promoted: " in out and "champion: version 1 of celeritas-mlp-b16-" in out
    assert "artifacts:" in out
    code = main(["runs", "compare", "--model", "mlp", "--last", "5"])
    out, _ = capsys.readouterr()
    assert code == 0 and "FINISHED" in out and "promoted" in out
    assert main(["production", "show", "--model", "mlp", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert len(shown) == 1 and shown[0]["version"] == "1" and shown[0]["job_id"] == "cli-job"
    assert shown[0]["configuration"]["batch_size"] == 16
    assert shown[0]["placement_uri"].endswith("placement.json")
    assert main(["production", "show", "--model", "mlp"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["configuration", "version", "placer"] and shown[0]["run_id"] in table[1]
    assert main(["production", "history", "--model", "mlp"]) == 0
    history = capsys.readouterr().out.splitlines()
    assert len(history) == 2 and "promoted" in history[1] and shown[0]["config_key"] in history[1]
    # the same job id again: it finished, so it is refused in one line
    code = main(["run", "--model", "mlp", "--job-id", "cli-job"])
    _, err = capsys.readouterr()
    assert code == 2 and err.splitlines()[-1].startswith("celeritas: error: job 'cli-job' already finished")
    assert "Traceback" not in err


@needs_stack
def test_celeritas_run_bad_flags_are_one_line(store, capsys):
    for argv, message in ((["--batch-size", "x"], "--batch-size: expected integer"),
                          (["--placers", "celeritas,bogus"], "parameter 'placers.1'"),
                          (["--calibrate-comm", "maybe"], "--calibrate-comm: expected boolean")):
        code = main(["run", *argv])
        _, err = capsys.readouterr()
        assert code == 2 and message in err and err.count("\n") == 1, err


@needs_stack
def test_the_time_model_and_the_span_batch_reach_the_profile_and_the_fits(store):
    """``profile_span`` adds the batch towards ``batch_size`` that fits one device (2, 4 → 8 for
    batch 16), and ``time_model=choose`` writes each op's chosen model (``celeritas-fits/2``)."""
    params = {**TINY, "device_memory": "64MiB", "profile_span": True, "time_model": "choose"}
    job = prepare(params, job_id="job-span").job
    profile = profile_small_batches(job)
    assert profile.batch_sizes == (2, 4, 8)
    fits = storage.read_json(fit_regression(job, profile).fits_uri)
    assert fits["format"] == "celeritas-fits/2"
    plain = prepare({**TINY, "device_memory": "64MiB"}, job_id="job-plain").job
    plain_profile = profile_small_batches(plain)
    assert plain_profile.batch_sizes == (2, 4)
    assert storage.read_json(fit_regression(plain, plain_profile).fits_uri)["format"] == "celeritas-fits/1"


def test_place_metrics_count_the_transfers_per_kind_of_link_on_a_topology():
    import numpy as np

    from celeritas_core.graphs.cluster import Cluster
    from celeritas_core.graphs.graph import Graph
    from celeritas_core.graphs.topology import parse_preset
    from tasks.place import _traffic_metrics

    graph = Graph.from_arrays(name="chain", node_names=["a", "b", "c"], time_us=[1.0] * 3,
                              memory_bytes=[1] * 3, edge_src=[0, 1], edge_dst=[1, 2], edge_bytes=[1000, 500])
    flat = Cluster.homogeneous(4, 1e9)
    topo = flat.with_topology(parse_preset("2x2:nvlink,ib").topology(flat.device_names))
    spread = np.array([0, 1, 2])
    assert _traffic_metrics(graph, flat, spread) == {"transfers": 2.0, "transfer_bytes": 1500.0}
    assert _traffic_metrics(graph, topo, spread) == {
        "transfers": 2.0, "transfer_bytes": 1500.0, "transfers_ib-ndr": 1.0, "transfer_bytes_ib-ndr": 500.0,
        "transfers_nvlink4": 1.0, "transfer_bytes_nvlink4": 1000.0}
    one_device = np.zeros(3, dtype=np.int64)
    assert _traffic_metrics(graph, topo, one_device) == {"transfers": 0.0, "transfer_bytes": 0.0}
