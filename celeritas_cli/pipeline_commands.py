"""The pipeline's commands of the ``celeritas`` CLI: ``run`` (the whole pipeline without Airflow)
and ``runs compare`` (the last runs of a model from MLflow).

``run``'s flags are generated from :data:`tasks.params.FIELDS`, the same schema the Airflow trigger
form uses, so the CLI and the form accept the same parameters. Heavy imports happen when a
command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from celeritas_cli import flags
from celeritas_core.errors import CeleritasInputError
from tasks.params import FIELDS


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _convert(name: str, text: str) -> Any:
    """A flag's text as the schema's type (arrays comma-separated, objects as JSON)."""
    kind = FIELDS[name]["type"]
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)
        if kind == "boolean":
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind == "array":
            item = FIELDS[name]["items"]["type"]
            parts = [p.strip() for p in text.split(",") if p.strip()]
            return [int(p) for p in parts] if item == "integer" else parts
        if kind == "object":
            value = json.loads(text)
            if not isinstance(value, dict):
                raise ValueError(text)
            return value
    except (ValueError, json.JSONDecodeError):
        raise CeleritasInputError(f"{_flag(name)}: expected {kind}, got {text!r}") from None
    return text


def cmd_run(args: argparse.Namespace) -> int:
    """Run the whole pipeline once, printing each step, then where the results are."""
    from tasks.pipeline import run_pipeline

    given: dict[str, Any] = {}
    if args.params:
        from celeritas_core.formats import read_json

        doc = read_json(args.params)
        if not isinstance(doc, dict):
            raise CeleritasInputError("expected a JSON object of parameters", source=args.params)
        given.update(doc)
    for name in FIELDS:
        value = getattr(args, name)
        if value is not None:
            given[name] = _convert(name, value)
    from tasks.params import resolve_params

    resolve_params(given)  # bad parameters fail here, before any step starts
    out = run_pipeline(given, job_id=args.job_id,
                       progress=lambda step: print(f"  {step}", file=sys.stderr, flush=True))
    prepared, validation, decision = out.prepare, out.validate, out.publish
    print(f"model {prepared.params['model']}: best measured {validation.best_measured} "
          f"{validation.best_measured_step_time_s * 1e3:.3f} ms per step; publish: {decision.decision} "
          f"({decision.reason})")
    print(f"artifacts: {prepared.run_dir}")
    from tasks import tracking

    print(f"MLflow run {prepared.parent_run_id} in {tracking.tracking_uri()}")
    return 0


def cmd_runs_compare(args: argparse.Namespace) -> int:
    """Print the last runs of a model from MLflow."""
    from tasks import tracking

    if args.last < 1:
        raise CeleritasInputError(f"--last: must be >= 1, got {args.last}")
    flags.count(args.last, "--last", high=flags.MAX_LAST_RUNS)
    rows = tracking.recent_runs(args.model, args.last)
    if not rows:
        print(f"no runs of model {args.model!r} in {tracking.tracking_uri()}")
        return 0
    print(tracking.format_runs_table(rows))
    return 0


def add_commands(sub: Any) -> None:
    """Register ``run`` and ``runs`` on the CLI's subparsers."""
    r = sub.add_parser("run", help="run the whole placement pipeline once (no Airflow needed)",
                       description="Run the pipeline's steps in order for one model: calibrate, profile, "
                                   "fit, re-measure, fuse, place, validate, publish. Artifacts go to the run "
                                   "directory, metrics and artifacts to MLflow (MLFLOW_TRACKING_URI, default "
                                   "a SQLite store under build/mlflow). The flags are the Airflow form's "
                                   "fields (docs/pipeline.md).")
    r.add_argument("--params", metavar="FILE", help="a JSON object of parameters (flags override it)")
    r.add_argument("--job-id", help="job id (a retry with the same id reuses its MLflow run)")
    for name, field in FIELDS.items():
        default = json.dumps(field["default"]) if not isinstance(field["default"], str) else field["default"]
        r.add_argument(_flag(name), dest=name, metavar=field["type"].upper(),
                       help=f"{field['title']}: {field['description']} (default: {default or 'automatic'})"
                       .replace("%", "%%"))
    r.set_defaults(func=cmd_run)

    runs = sub.add_parser("runs", help="look at past pipeline runs in MLflow",
                          description="Look at past pipeline runs recorded in MLflow.")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="SUBCOMMAND", required=True)
    c = runs_sub.add_parser("compare", help="the last runs of a model",
                            description="Print the last N parent runs of MODEL: start, status, batch, "
                                        "devices, winning placer, measured and simulated step time, "
                                        "speed-up, placement seconds.")
    c.add_argument("--model", required=True, help="model name as given to the pipeline")
    c.add_argument("--last", type=int, default=10, help="how many runs (default 10)")
    c.set_defaults(func=cmd_runs_compare)
