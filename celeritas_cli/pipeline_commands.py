"""The pipeline's commands of the ``celeritas`` CLI: ``run`` (the whole pipeline without Airflow),
``runs compare`` (the last runs of a model from MLflow) and ``production show|history`` (the
champion of each configuration in MLflow's Model Registry, and the decisions).

``run``'s flags are generated from :data:`tasks.params.FIELDS`, the same schema the Airflow trigger
form uses, so the CLI and the form accept the same parameters. Heavy imports happen when a
command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from celeritas_cli import flags
from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.redact import redact
from tasks.params import FIELDS, resolve_params, value_type
from tasks.report import format_table

if TYPE_CHECKING:  # MLflow loads when a command runs (fast --help)
    from tasks.tracking import Champion


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _convert(name: str, text: str) -> Any:
    """A flag's text as the schema's type (arrays comma-separated, objects as JSON)."""
    kind = value_type(name)
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
    # lazy: the pipeline (numpy, MLflow, boto3) loads only when a command runs (fast --help)
    from tasks.pipeline import run_pipeline

    given: dict[str, Any] = {}
    if args.params is not None:  # `--params ''` names no file: an error, not "no parameters"
        # lazy: the pipeline (numpy, MLflow, boto3) loads only when a command runs (fast --help)
        from celeritas_core.readwrite.formats import read_json

        doc = read_json(args.params)
        if not isinstance(doc, dict):
            raise CeleritasInputError("expected a JSON object of parameters", source=args.params)
        given.update(doc)
    for name in FIELDS:
        value = getattr(args, name)
        if value is not None:
            given[name] = _convert(name, value)

    resolve_params(given)  # bad parameters fail here, before any step starts
    out = run_pipeline(given, job_id=args.job_id,
                       progress=lambda step: print(f"  {step}", file=sys.stderr, flush=True))
    prepared, decision = out.prepare, out.publish
    print(f"model {prepared.params.model}, configuration {decision.config_key}: best measured "
          f"{decision.placer} {decision.step_time_s * 1e3:.3f} ms per step (median); {decision.decision}: "
          f"{decision.reason}")
    if decision.champion_version is not None:
        print(f"champion: version {decision.champion_version} of "
              f"{prepared.configuration['registered_model']}, {decision.placement_uri}")
    print(f"artifacts: {prepared.run_dir}")
    # lazy: the pipeline (numpy, MLflow, boto3) loads only when a command runs (fast --help)
    from tasks import tracking

    print(f"MLflow run {prepared.parent_run_id} in {redact(tracking.tracking_uri(create=False))}")
    return 0


def cmd_runs_compare(args: argparse.Namespace) -> int:
    """Print the last runs of a model from MLflow."""
    # lazy: the pipeline (numpy, MLflow, boto3) loads only when a command runs (fast --help)
    from tasks import tracking

    if args.last < 1:
        raise CeleritasInputError(f"--last: must be >= 1, got {args.last}")
    flags.count(args.last, "--last", high=flags.MAX_LAST_RUNS)
    rows = tracking.recent_runs(args.model, args.last)
    if not rows:
        print(f"no runs of model {args.model!r} in {redact(tracking.tracking_uri(create=False))}")
        return 0
    print(tracking.format_runs_table(rows))
    return 0


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _described(champion: Champion) -> str:
    """One line on a champion's configuration, its transfers as its run used them (a configuration
    asking for calibration may have run on the default model): empty if unreadable."""
    # lazy: the pipeline (numpy, MLflow, boto3) loads only when a command runs (fast --help)
    from tasks.configuration import configuration_from_json

    try:
        doc = json.loads(champion.configuration)
    except ValueError:
        return ""
    if not isinstance(doc, dict):
        return ""
    try:
        return configuration_from_json(doc).describe(transfer_model=champion.transfer_model,
                                                     transfer_reason=champion.transfer_reason)
    except (KeyError, TypeError, ValueError):  # written by another version: as it says
        return str(doc.get("description", ""))


def cmd_production_show(args: argparse.Namespace) -> int:
    """Print the champion of every configuration of a model (MLflow Model Registry)."""
    # lazy: the pipeline (numpy, MLflow, boto3) loads only when a command runs (fast --help)
    from tasks import tracking

    found = tracking.champions(args.model)
    if args.json:
        print(json.dumps([c.to_json() for c in found], indent=1, allow_nan=False))
        return 0
    if not found:
        print(f"no champion for model {args.model!r} in {redact(tracking.tracking_uri(create=False))}")
        return 0
    header = ("configuration", "version", "placer", "step_ms", "promoted (UTC)", "run_id", "placement")
    rows = [(c.config_key, c.version, c.placer, _num(c.step_time_s * 1e3, ".3f"),
             c.promoted_at.replace("T", " ")[:19], c.run_id, c.placement_uri) for c in found]
    print(format_table(header, rows, {1, 3}))
    for c in found:
        print(f"{c.config_key}: {_described(c)}")
    return 0


def cmd_production_history(args: argparse.Namespace) -> int:
    """Print every publish decision about a model, oldest first."""
    # lazy: the pipeline (numpy, MLflow, boto3) loads only when a command runs (fast --help)
    from tasks import tracking

    decisions = tracking.decision_history(args.model)
    if args.json:
        print(json.dumps([d.to_json() for d in decisions], indent=1, allow_nan=False))
        return 0
    if not decisions:
        print(f"no decisions about model {args.model!r} in {redact(tracking.tracking_uri(create=False))}")
        return 0
    header = ("decided (UTC)", "configuration", "decision", "version", "placer", "step_ms", "champion_ms",
              "gain", "p_value", "run_id")
    rows = [(d.decided_at.replace("T", " ")[:19], d.config_key, d.decision, d.version or "-", d.placer,
             _num(None if d.step_time_s is None else d.step_time_s * 1e3, ".3f"),
             _num(None if d.champion_step_time_s is None else d.champion_step_time_s * 1e3, ".3f"),
             _num(d.gain, "+.1%"), _num(d.p_value, ".2g"), d.run_id) for d in decisions]
    print(format_table(header, rows, {5, 6, 7, 8}))
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
    r.add_argument("--job-id", help="job id (default: a new one); a failed job run again with its id reuses "
                   "its MLflow run; a finished or running one is refused")
    for name, field in FIELDS.items():
        default = field["default"] if isinstance(field["default"], str) or field["default"] is None \
            else json.dumps(field["default"])
        r.add_argument(_flag(name), dest=name, metavar=value_type(name).upper(),
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

    prod = sub.add_parser("production", help="the production placements (champions) in MLflow's registry",
                          description="The champion placement of each configuration of a model (model "
                                      "identity, batch size and cluster), and the decisions that made it.")
    prod_sub = prod.add_subparsers(dest="production_command", metavar="SUBCOMMAND", required=True)
    show = prod_sub.add_parser("show", help="the champion of each configuration of a model",
                               description="Print the champion of each configuration of MODEL: configuration "
                                           "key, model version, placer, measured median step time, when it "
                                           "was promoted, its run and its placement's URI.")
    show.add_argument("--model", required=True, help="model name as given to the pipeline")
    show.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    show.set_defaults(func=cmd_production_show)
    hist = prod_sub.add_parser("history", help="every publish decision about a model, oldest first",
                               description="Print every publish decision about MODEL, oldest first: when, "
                                           "configuration, promoted or kept, the version promoted, the best "
                                           "placer, its and the champion's median step time, the gain and "
                                           "the test's p-value, and the run.")
    hist.add_argument("--model", required=True, help="model name as given to the pipeline")
    hist.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    hist.set_defaults(func=cmd_production_history)
