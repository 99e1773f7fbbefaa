"""The placement DAG's trigger form: it submits with its defaults, optional fields are optional,
placers are a multi-select, models are proposed, and a bad value is answered with one sentence (by
resolve_params, and by the API server's trigger check before Airflow's own jsonschema report)."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path

import pytest

from celeritas_core.errors import CeleritasInputError
from tasks import params
from tasks.params import FIELDS, OPTIONAL, PipelineParams, check_trigger, resolve_params, trigger_problem
from tests.demo import demo_params

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def form_params():
    """The placement DAG's params as the API server holds them (serialized, then deserialized)."""
    from airflow.dag_processing.dagbag import BundleDagBag
    from airflow.serialization.serialized_objects import DagSerialization

    bag = BundleDagBag(dag_folder=ROOT / "dags", bundle_path=ROOT / "dags")
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags[params.PLACEMENT_DAG_ID]  # straight from the file: no metadata database needed
    return DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag)).params


def _required_in_form(schema: dict) -> bool:
    """The trigger form's rule for the `*` and the "required" error: a type that does not admit null."""
    kind = schema.get("type")
    return bool(kind) and not (isinstance(kind, list) and "null" in kind)


def _outside(bound: str, limit: float, kind: type) -> tuple[float, float]:
    """A value just beyond ``bound`` (at ``limit``) and one just within it, for a field of ``kind``."""
    step = 1 if kind is int else 0.5
    if bound == "minimum":
        return limit - step, limit
    if bound == "maximum":
        return limit + step, limit
    if bound == "exclusiveMinimum":
        return limit, limit + (step if kind is int else 1e-9)
    return limit, limit - (step if kind is int else 1e-9)  # exclusiveMaximum


def test_the_typed_parameters_and_the_forms_params_are_in_step(form_params) -> None:
    """PipelineParams (what every step reads) and the trigger form's Airflow Params (what a user
    fills in, as the API server holds them) have the same fields in the same order, the same types,
    the same defaults (but for the form's documented FORM_DEFAULTS) and the same bounds: a value
    one beyond a bound is refused by both, the bound itself taken by both."""
    from airflow.sdk.exceptions import ParamValidationError

    declared = dataclasses.fields(PipelineParams)
    hints = typing.get_type_hints(PipelineParams)
    assert [f.name for f in declared] == list(form_params)
    json_types = {str: "string", int: "integer", float: "number", bool: "boolean", tuple: "array",
                  dict: "object"}
    for f in declared:
        schema = form_params.get_param(f.name).schema
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        hint = hints[f.name]
        inner = typing.get_args(hint)[0] if isinstance(hint, types.UnionType) else hint  # X | None: X
        assert kinds[0] == json_types[typing.get_origin(inner) or inner], f.name
        assert ("null" in kinds) == (f.name in OPTIONAL), f.name
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        expected = params.FORM_DEFAULTS.get(f.name, default)
        assert form_params[f.name] == (list(expected) if isinstance(expected, tuple) else expected), f.name
        bounds = schema.get("allOf", [{}])[0]
        assert bounds == {k: v for k, v in f.metadata["schema"].items() if k in params.BOUNDS}, f.name
        for bound, limit in bounds.items():
            outside, inside = _outside(bound, limit, inner)
            with pytest.raises(ParamValidationError):
                form_params.deep_merge({f.name: outside}).validate()
            with pytest.raises(CeleritasInputError, match=f"^parameter '{f.name}': "):
                PipelineParams(**{f.name: outside})
            form_params.deep_merge({f.name: inside}).validate()
            assert getattr(PipelineParams(**{f.name: inside}), f.name) == inside
    # what the untouched form submits is the dataclass's defaults (and the form's own)
    assert resolve_params(form_params.validate()) == PipelineParams(**params.FORM_DEFAULTS)


def test_the_form_submits_with_its_defaults_and_with_the_optional_fields_emptied(form_params) -> None:
    assert form_params.validate()["run_dir"] is None
    emptied = form_params.deep_merge({name: None for name in OPTIONAL})
    assert emptied.validate()["model_knobs"] is None  # what the form sends for a cleared field


def test_optional_fields_are_the_ones_that_may_be_empty(form_params) -> None:
    assert set(OPTIONAL) == {"run_dir", "model_knobs", "paper_config", "calibrate_comm", "topology",
                             "profile_span"}
    for name in FIELDS:
        param = form_params.get_param(name)
        assert _required_in_form(param.schema) == (name not in OPTIONAL), name
        assert param.schema.get("title") and param.schema.get("section") and param.description, name
    resolved = resolve_params({"run_dir": None, "model_knobs": None})
    assert resolved.model_knobs == {} and resolved.run_dir is None


def test_the_switches_carry_no_asterisk_and_null_means_their_default(form_params) -> None:
    """A switch always holds true or false; its type admits null only so that the form does not mark
    it required (its `*`, and its "required" error when switched off)."""
    for name in ("paper_config", "calibrate_comm", "profile_span"):
        assert not _required_in_form(form_params.get_param(name).schema), name
        assert form_params.get_param(name).schema["type"][0] == "boolean"  # still rendered as a switch
    resolved = resolve_params({"paper_config": None, "calibrate_comm": None})
    assert (resolved.paper_config, resolved.calibrate_comm) == (False, True)
    with pytest.raises(CeleritasInputError, match=r"^parameter 'calibrate_comm': Calibrate transfers must be "
                                                  r"true or false or empty, not \"yes\"$"):
        resolve_params({"calibrate_comm": "yes"})


def test_number_boxes_get_no_bounds_to_clamp_to_and_airflow_still_refuses_out_of_range(form_params) -> None:
    """The form clamps a number box to the schema's top-level minimum and maximum (-5 would become 1
    unseen); the bounds sit under allOf, which Airflow's own validation still applies."""
    from airflow.sdk.exceptions import ParamValidationError

    numbers = [n for n in FIELDS if params.value_type(n) in ("integer", "number")]
    assert set(numbers) >= {"batch_size", "num_devices", "R", "memory_fraction", "validation_steps"}
    for name in numbers:
        schema = form_params.get_param(name).schema
        assert not set(schema) & set(params.BOUNDS), (name, schema)
        assert schema["allOf"] and set(schema["allOf"][0]) <= set(params.BOUNDS), name
    for name, value in (("batch_size", -5), ("num_devices", 65), ("memory_fraction", 1.5), ("R", 0)):
        with pytest.raises(ParamValidationError):
            form_params.deep_merge({name: value}).validate()


def test_the_forms_first_run_has_the_demos_configuration(form_params) -> None:
    """Submitted untouched, the form runs the demo's configuration, so it meets the demo's champion."""
    from tasks.prepare import configuration_for

    form, demo = configuration_for(form_params.validate()), configuration_for(demo_params())
    assert form["key"] == demo["key"], (form["description"], demo["description"])
    assert form["model"]["knobs"] == params.DEMO_KNOBS and form["batch_size"] == 16
    assert form["cluster"]["devices"] == 4 and form["cluster"]["memory_bytes"] == 30 * 2**20
    assert configuration_for(params.defaults())["key"] != demo["key"]  # the knobs matter: a real check


def test_placers_are_a_multi_select_of_the_known_placers_and_models_are_proposed(form_params) -> None:
    from celeritas_core.placers import PLACERS
    from celeritas_tf.models import ZOO

    placers = form_params.get_param("placers").schema
    assert placers["type"] == "array" and placers["examples"] == placers["items"]["enum"]  # the form's rule
    assert set(placers["examples"]) <= set(PLACERS)
    assert sorted(form_params.get_param("model").schema["examples"]) == sorted(ZOO)


@pytest.mark.parametrize(("given", "sentence"), [
    ({"device_memory": "lots"}, "parameter 'device_memory': Memory per device: \"lots\" is not a number of "
                                "bytes with an optional unit, e.g. 32GiB, 500MB or 1e9"),
    ({"batch_size": 0}, "parameter 'batch_size': Batch size must be at least 1, not 0"),
    ({"batch_size": -5}, "parameter 'batch_size': Batch size must be at least 1, not -5"),
    ({"num_devices": 65}, "parameter 'num_devices': Devices must be at most 64, not 65"),
    ({"memory_fraction": 1.5}, "parameter 'memory_fraction': Cluster memory cap must be at most 1, not 1.5"),
    ({"device_memory": "1e30"}, "parameter 'device_memory': Memory per device must be at most 1e+18 bytes "
                                "(1 EB), not \"1e30\""),
    ({"device_memory": "0"}, "parameter 'device_memory': Memory per device: size must be positive and "
                             "finite, got '0'"),
    ({"device_memory": "600"}, "parameter 'device_memory': Memory per device: 600 bytes is too small for "
                               "a device; did you mean 600MiB? (write the unit: 600MiB, 16GiB; a bare number "
                               "is bytes)"),
    ({"model_knobs": {"layers": "many"}}, "parameter 'model_knobs.layers': Model size knobs must be a whole "
                                          "number, not \"many\""),
    ({"model_knobs": {"layers": float("nan")}}, "parameter 'model_knobs.layers': expected a finite number, "
                                                "got nan"),
    ({"batch_size": "8"}, "parameter 'batch_size': Batch size must be a whole number, not \"8\""),
    ({"memory_fraction": 0}, "parameter 'memory_fraction': Cluster memory cap must be more than 0, not 0"),
    ({"placers": ["fastest"]}, "parameter 'placers.0': Placers to compare: \"fastest\" is not one of "
                               + ", ".join(params.PLACERS)),
    ({"placers": []}, "parameter 'placers': Placers to compare needs at least 1 value, not 0"),
    ({"profile_batch_sizes": [4, 4]}, "parameter 'profile_batch_sizes': Profiling batch sizes lists a value "
                                      "twice: [4, 4]"),
    ({"model": ""}, "parameter 'model': Model must not be empty"),
    ({"run_dir": 3}, "parameter 'run_dir': Run directory must be text or empty, not 3"),
    ({"topology": "two nodes"}, "parameter 'topology': Link topology: \"two nodes\" is not a preset "
                                "NODESxDEVICES:LINK[,NETWORK], e.g. 2x2:nvlink,ib"),
    ({"topology": "2x2:warp,ib"}, "parameter 'topology': Link topology: unknown link 'warp' (known: nvlink3, "
                                  "nvlink4, pcie3, pcie4, pcie5, ib-hdr, ib-ndr, 100gbe; nvlink = nvlink4, "
                                  "pcie = pcie4, ib = ib-ndr)"),
    ({"topology": "2x4:nvlink,ib"}, "parameter 'topology': Link topology \"2x4:nvlink,ib\" has 8 devices, "
                                    "but Devices (num_devices) is 4"),
    ({"colour": "red"}, "parameter 'params': unknown parameter 'colour'; the parameters are "
                        + ", ".join(FIELDS)),
])
def test_a_bad_value_is_one_sentence_naming_the_field_and_what_is_allowed(given: dict, sentence: str) -> None:
    with pytest.raises(CeleritasInputError) as err:
        resolve_params(given)
    assert str(err.value) == sentence
    assert trigger_problem(json.dumps({"conf": given}).encode()) == sentence


@pytest.mark.parametrize(("given", "sentence"), [
    ({"model": "no_such_model"},
     "parameter 'model': unknown model 'no_such_model' (zoo: inception_v3, mlp, nmt, tensor_holography, "
     "transformer; or a .keras file under {home}/models, or MODULE:FUNCTION under CELERITAS_MODEL_MODULES)"),
    ({"model": "nmt"},  # the form's knobs are the demo's, tensor_holography's
     "parameter 'model_knobs': nmt has no knob 'filters' (its knobs: layers, units, seq_len, vocab); leave "
     "the knobs empty for its own sizes"),
    ({"model_knobs": {"depth": 3}},
     "parameter 'model_knobs': tensor_holography has no knob 'depth' (its knobs: layers, filters, "
     "image_size); leave the knobs empty for its own sizes"),
    ({"model": "transformer", "model_knobs": {"heads": 3}},
     "parameter 'model_knobs': model 'transformer': hidden (16) must be a multiple of heads (3)"),
    ({"model": "net.keras"}, "parameter 'model': no such .keras file: {home}/models/net.keras"),
    ({"model": "acme.models:build"},
     "parameter 'model': module 'acme.models' is not under an allowed prefix: none (set "
     "CELERITAS_MODEL_MODULES, e.g. 'mycompany.models')"),
    ({"run_dir": "/etc"}, "parameter 'run_dir': /etc is outside the runs root {home}/build/runs "
                          "(CELERITAS_RUNS_ROOT)"),
])
def test_a_trigger_is_refused_what_prepare_would_refuse(given: dict, sentence: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The model and the run directory are checked at trigger time as prepare checks them."""
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    for name in ("CELERITAS_MODELS_ROOT", "CELERITAS_RUNS_ROOT", "CELERITAS_MODEL_MODULES"):
        monkeypatch.delenv(name, raising=False)
    assert trigger_problem(json.dumps({"conf": given}).encode()) == sentence.format(home=tmp_path)
    resolve_params(given)  # none of these is a schema problem


def test_a_topology_joins_the_configuration_and_an_empty_one_leaves_its_key_alone() -> None:
    from tasks.configuration import configuration_of

    identity = {"kind": "zoo", "name": "mlp", "knobs": {}, "paper_config": False}
    flat = configuration_of(resolve_params({"model": "mlp"}), identity)
    assert "topology" not in flat.cluster
    assert configuration_of(resolve_params({"model": "mlp", "topology": None}), identity).key == flat.key
    linked = configuration_of(resolve_params({"model": "mlp", "topology": "2x2:NVLink, ib"}), identity)
    assert linked.cluster["topology"] == "2x2:nvlink,ib" and linked.key != flat.key
    assert "topology 2x2:nvlink,ib" in linked.describe()


def test_a_configuration_says_what_it_asks_for_and_what_a_run_of_it_used() -> None:
    from tasks.configuration import configuration_of

    identity = {"kind": "zoo", "name": "mlp", "knobs": {}, "paper_config": False}
    asks = configuration_of(resolve_params({"model": "mlp", "calibrate_comm": True}), identity)
    assert ", calibrated transfers, " in asks.describe()  # as asked: what prepare records
    assert ", calibrated transfers, " in asks.describe(transfer_model="calibrated", transfer_reason="used")
    rejected = asks.describe(transfer_model="default", transfer_reason="it measured nothing useful")
    assert ", default transfer model (calibration not used: it measured nothing useful), " in rejected
    assert ", calibration asked for (outcome not recorded), " in asks.describe(transfer_model="")
    linked = configuration_of(resolve_params({"model": "mlp", "topology": "2x2:nvlink,ib"}), identity)
    assert ", the preset's link figures where calibration was not used (link ib: R² 0.1), topology " in \
        linked.describe(transfer_model="default", transfer_reason="link ib: R² 0.1")
    off = configuration_of(resolve_params({"model": "mlp", "calibrate_comm": False}), identity)
    assert ", default transfers, " in off.describe(transfer_model="default", transfer_reason="it is off")


def test_a_trigger_is_checked_as_its_tasks_will_get_it_over_the_forms_defaults() -> None:
    """Airflow fills what a trigger leaves out with the form's defaults (the demo's knobs included);
    empty knobs are a model's own sizes."""
    assert check_trigger({}).model_knobs == params.DEMO_KNOBS
    assert check_trigger({"model": "nmt", "model_knobs": None}).model_knobs == {}
    assert check_trigger({"model": "nmt", "model_knobs": {}}).model == "nmt"
    assert resolve_params({"model": "nmt"}).model_knobs == {}  # celeritas run and the fleet


def test_trigger_problem_leaves_what_is_not_a_conf_to_airflow() -> None:
    for body in (b"", b"not json", b"[1, 2]", b'{"note": "no conf"}', b'{"conf": {"batch_size": 64}}'):
        assert trigger_problem(body) is None, body


# ------------------------------------------------------------------------ the API server's trigger check
def _app_behind_the_check(pools: tuple[str, ...] = ("gpu",)):
    """The trigger check in front of a stand-in for Airflow's API, which records the bodies it gets;
    ``pools`` are the Airflow pools that exist."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from celeritas_plugins.trigger_check import TriggerParamsCheck

    received: list[bytes] = []

    async def endpoint(request):
        received.append(await request.body())
        return JSONResponse({"dag_run_id": "made"})

    app = Starlette(routes=[Route("/api/v2/dags/{dag_id}/dagRuns", endpoint, methods=["POST", "GET"])])
    app.add_middleware(TriggerParamsCheck, pool_exists=lambda name: name in pools)
    return TestClient(app), received


def test_the_api_server_refuses_a_bad_placement_trigger_with_the_sentence_and_creates_nothing() -> None:
    client, received = _app_behind_the_check()
    answer = client.post(f"/api/v2/dags/{params.PLACEMENT_DAG_ID}/dagRuns",
                         json={"conf": {"device_memory": "lots"}, "logical_date": None})
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith("parameter 'device_memory': Memory per device: \"lots\"")
    answer = client.post(f"/api/v2/dags/{params.PLACEMENT_DAG_ID}/dagRuns",
                         json={"conf": {"model": "no_such_model"}, "logical_date": None})
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith("parameter 'model': unknown model 'no_such_model' (zoo: ")
    assert received == []


def test_good_triggers_and_other_requests_pass_through_with_their_bodies_intact() -> None:
    client, received = _app_behind_the_check()
    good = json.dumps({"conf": {"batch_size": 64, "placers": ["celeritas"]}, "logical_date": None}).encode()
    assert client.post(f"/api/v2/dags/{params.PLACEMENT_DAG_ID}/dagRuns", content=good).status_code == 200
    other = json.dumps({"conf": {"batch_size": 0}}).encode()  # another DAG: not ours to judge
    assert client.post("/api/v2/dags/someone_elses/dagRuns", content=other).status_code == 200
    assert client.get(f"/api/v2/dags/{params.PLACEMENT_DAG_ID}/dagRuns").status_code == 200
    assert received == [good, other, b""]


def test_a_placement_trigger_is_refused_while_the_gpu_pool_is_missing(monkeypatch) -> None:
    client, received = _app_behind_the_check(pools=("default_pool",))
    trigger = f"/api/v2/dags/{params.PLACEMENT_DAG_ID}/dagRuns"
    answer = client.post(trigger, json={"conf": {}})
    assert answer.status_code == 400 and received == []
    assert answer.json()["detail"].startswith("Airflow pool 'gpu' does not exist, so the GPU tasks would")
    assert "airflow pools set gpu 1" in answer.json()["detail"]
    monkeypatch.setenv("CELERITAS_GPU_POOL", "default_pool")  # a deployment that names its own pool
    assert client.post(trigger, json={"conf": {}}).status_code == 200


def test_the_check_is_an_installed_airflow_plugin() -> None:
    from importlib.metadata import entry_points

    from celeritas_plugins.trigger_check import CeleritasPlugin, TriggerParamsCheck

    (entry,) = [e for e in entry_points(group="airflow.plugins") if e.name == "celeritas"]
    assert entry.load() is CeleritasPlugin
    assert [m["middleware"] for m in CeleritasPlugin.fastapi_root_middlewares] == [TriggerParamsCheck]
