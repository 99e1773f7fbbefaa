"""The production-models file of the fleet DAG: YAML and JSON, defaults, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from celeritas_core.errors import CeleritasInputError
from tasks.fleet import FleetModel, load_fleet

ROOT = Path(__file__).resolve().parents[2]


def test_yaml_and_json_files_with_defaults(tmp_path: Path) -> None:
    yaml_file = tmp_path / "models.yaml"
    yaml_file.write_text("defaults:\n  num_devices: 4\n  batch_size: 32\nmodels:\n"
                         "  - name: holo\n    params: {model: tensor_holography}\n"
                         "  - name: nmt-small\n"
                         "    params: {model: nmt, batch_size: 64, model_knobs: {layers: 2}}\n")
    models = load_fleet(str(yaml_file))
    assert models == (FleetModel("holo", {"num_devices": 4, "batch_size": 32, "model": "tensor_holography"}),
                      FleetModel("nmt-small", {"num_devices": 4, "batch_size": 64, "model": "nmt",
                                               "model_knobs": {"layers": 2}}))
    json_file = tmp_path / "models.json"
    json_file.write_text(json.dumps({"models": [m.to_json() for m in models]}))
    assert load_fleet(str(json_file)) == models


def test_the_shipped_example_loads() -> None:
    from tasks.params import resolve_params

    models = load_fleet(str(ROOT / "examples" / "production_models.yaml"))
    assert len(models) >= 2
    for model in models:
        resolve_params(model.params)  # every example entry has valid parameters


@pytest.mark.parametrize(("text", "message"), [
    ("", "expected a mapping with a 'models' list"),
    ("models: []\n", "field 'models' must be a non-empty list"),
    ("models: [{name: a}]\nextra: 1\n", "unknown key 'extra'"),
    ("models: [{name: a, params: 3}]\n", r"models\[0\]\.params must be a mapping"),
    ("models: [{name: 'a b'}]\n", r"models\[0\]\.name must be 1-64 letters"),
    ("models: [{name: a, model: mlp}]\n", r"models\[0\]: unknown key 'model'"),
    ("models: [{name: a}, {name: a}]\n", "model name 'a' appears twice"),
    ("defaults: 3\nmodels: [{name: a}]\n", "field 'defaults' must be a mapping"),
    ("models: [a, {\n", "not valid YAML"),
])
def test_bad_files_are_one_line_errors_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(text)
    with pytest.raises(CeleritasInputError, match=message) as err:
        load_fleet(str(path))
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_missing_or_unset_file(tmp_path: Path) -> None:
    with pytest.raises(CeleritasInputError, match="production-models file not found"):
        load_fleet(str(tmp_path / "nope.yaml"))
    with pytest.raises(CeleritasInputError, match="celeritas_production_models"):
        load_fleet("")
