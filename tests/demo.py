"""The demo's parameters (``make demo``: examples/run_pipeline_demo.py), for the tests that check
that the trigger form starts from the same configuration."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

DEMO_SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "run_pipeline_demo.py"


def demo_params() -> dict[str, Any]:
    """``DEMO_PARAMS`` of the demo script, read from the script itself (it is not a package)."""
    spec = importlib.util.spec_from_file_location("run_pipeline_demo", DEMO_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.DEMO_PARAMS)
