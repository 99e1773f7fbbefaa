"""The pipeline's steps, declared once: the runner, the DAG's tasks and the whole result derive from it.

Each :class:`Step` names its function in ``tasks/``, the steps whose results it takes (after the
:class:`~tasks.contracts.Job`, which every step takes), the contract it returns and whether it runs
on a GPU node. ``celeritas run`` (:func:`tasks.pipeline.run_pipeline`) runs :data:`STEPS` in this
order; ``dags/celeritas_steps.py`` makes one Airflow task of each (GPU-node tasks on the ``gpu``
queue and pool) and wires them by their inputs; :class:`PipelineResult` has one field per step.
A new step is one function (and the contract it returns) and one entry here.

A ``mapped`` step runs once per item of its one input's ``items`` (``validate``: once per
placement in ``plan_validation``'s plan), each named by the item's ``label`` field; its result is
the tuple of the runs' results, in the items' order. The DAG maps it (one GPU task per item), or,
inside the fleet's mapped task group where Airflow cannot map again, runs it over every item in one
task (``<step>_all``).

``prepare`` is not in :data:`STEPS`: it takes the form's parameters rather than a job, and makes the
job (a setup task in the DAG). Importing this module is cheap (no numpy, MLflow or TensorFlow: the
DAG processor imports it); a step's function is imported when the step runs.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields, make_dataclass
from typing import Any

from tasks.contracts import (
    CalibrationResult,
    Contract,
    FitResult,
    FuseResult,
    PlacementValidation,
    PlaceResult,
    PrepareResult,
    ProfileResult,
    PublishResult,
    RemeasureResult,
    ValidationPlan,
)


@dataclass(frozen=True)
class Step:
    """One step of the pipeline.

    Parameters
    ----------
    name : str
        The step's name: its Airflow task id, its field of :class:`PipelineResult`.
    function : str
        ``MODULE:FUNCTION`` in ``tasks/``, called ``function(job, *results of inputs)`` (a mapped
        step: ``function(job, item)``). Imported when the step runs, not with this module.
    returns : type[Contract]
        The contract the function returns.
    inputs : tuple of str
        The earlier steps whose results it takes, in the order of its parameters after the job.
    gpu : bool
        Whether it runs on a GPU node (the DAG's ``gpu`` queue and pool, the longer time limit).
    after : tuple of str
        Earlier steps it waits for without reading their results (an ordering only).
    mapped : bool
        Whether it runs once per item of its one input's ``items``.
    label : str
        The field of a mapped step's item that names each run (the UI's map index, the progress line).
    summary : str
        One line for the task's documentation.
    """

    name: str
    function: str
    returns: type[Contract]
    inputs: tuple[str, ...] = ()
    gpu: bool = False
    after: tuple[str, ...] = ()
    mapped: bool = False
    label: str = ""
    summary: str = ""

    def run(self, job: Any, *inputs: Any) -> Any:
        """Run the step's function on ``job`` and ``inputs`` (its module imported now)."""
        module, _, name = self.function.partition(":")
        func: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return func(job, *inputs)

    def item_type(self, source: Step) -> type[Contract]:
        """The contract of the items a mapped step runs over: those of ``source``'s ``items``."""
        return typing.get_args(typing.get_type_hints(source.returns)["items"])[0]

    @property
    def result_type(self) -> Any:
        """The type of the step's field of :class:`PipelineResult` (a tuple for a mapped step)."""
        return tuple[self.returns, ...] if self.mapped else self.returns


#: The step that makes the job from the form's parameters (``tasks.prepare.prepare``; the DAG's
#: setup task): not in :data:`STEPS`, as it takes no job.
PREPARE = Step("prepare", "tasks.prepare:prepare", PrepareResult,
               summary="Validate the form's parameters, fix the run directory, open the MLflow parent run.")

#: The steps after ``prepare``, in the order ``celeritas run`` runs them.
STEPS: tuple[Step, ...] = (
    Step("calibrate_comm", "tasks.calibrate_comm:calibrate_comm", CalibrationResult, gpu=True,
         summary="Fit the transfer model between two devices of the GPU node."),
    Step("profile_small_batches", "tasks.profile_small_batches:profile_small_batches", ProfileResult,
         gpu=True, summary="Standard Evaluation 1: trace small batches on one device."),
    Step("fit_regression", "tasks.fit_regression:fit_regression", FitResult,
         inputs=("profile_small_batches",), summary="Per-op linear fits of time and memory on batch size."),
    Step("remeasure_large_batch", "tasks.remeasure_large_batch:remeasure_large_batch", RemeasureResult,
         inputs=("fit_regression", "calibrate_comm"), gpu=True,
         summary="Standard Evaluation 2: sequential placement of the large batch, re-measured on the "
                 "devices."),
    Step("fuse", "tasks.fuse:fuse", FuseResult, inputs=("remeasure_large_batch", "calibrate_comm"),
         summary="Optimal Operation Fusion of the measured graph (coarse graph and CCR figures)."),
    Step("place", "tasks.place:place", PlaceResult, inputs=("remeasure_large_batch", "calibrate_comm"),
         after=("fuse",),
         summary="Celeritas and the chosen baselines; one MLflow child run per placer (after fuse, "
                 "whose figures it does not read)."),
    Step("plan_validation", "tasks.validate:plan_validation", ValidationPlan, inputs=("place",),
         summary="The placements to validate (those that fit) and the configuration's current champion."),
    Step("validate", "tasks.validate:validate", PlacementValidation, inputs=("plan_validation",), gpu=True,
         mapped=True, label="placer",
         summary="Time one placement against the champion, interleaved in blocks (mapped: one per "
                 "placement)."),
    Step("publish", "tasks.publish:publish", PublishResult, inputs=("plan_validation", "validate"),
         summary="Champion/challenger: promote only if faster than the champion with confidence and by "
                 "the threshold; record the decision."),
)

#: Every step by name, ``prepare`` included.
BY_NAME: dict[str, Step] = {step.name: step for step in (PREPARE, *STEPS)}


def _check_declaration() -> None:
    """Each step's inputs and waits name earlier steps; a mapped step has one input, whose result
    has ``items``, each with its ``label`` field (a mistake here fails the import, and the tests)."""
    seen = {PREPARE.name}
    for step in STEPS:
        unknown = [name for name in (*step.inputs, *step.after) if name not in seen]
        if unknown or step.name in seen:
            raise TypeError(f"step {step.name!r}: {unknown or 'its name'} must name earlier steps")
        if step.mapped:
            (source,) = step.inputs
            item = step.item_type(BY_NAME[source])
            if step.label not in {f.name for f in fields(item)}:
                raise TypeError(f"step {step.name!r}: its items ({item.__name__}) have no {step.label!r}")
        seen.add(step.name)


_check_declaration()


@dataclass(frozen=True)
class _PipelineResultBase(Contract):
    """The methods of :class:`PipelineResult` (its fields come from the declaration)."""

    def to_dict(self) -> dict[str, Any]:
        """Step name → the step's result as JSON (a mapped step's: a list)."""
        return self.to_xcom()

    @classmethod
    def steps(cls) -> tuple[str, ...]:
        """The steps in the order they run, ``prepare`` first."""
        return tuple(f.name for f in fields(cls))


#: :func:`tasks.pipeline.run_pipeline`'s result: one typed field per step, named after it, in the
#: order they run (``prepare`` first; a mapped step's field is the tuple of its results).
PipelineResult = make_dataclass(
    "PipelineResult", [(step.name, step.result_type) for step in (PREPARE, *STEPS)],
    bases=(_PipelineResultBase,), frozen=True, namespace={"__module__": __name__})
PipelineResult.__doc__ = (":func:`tasks.pipeline.run_pipeline`: every step's result, by step name (one typed "
                          "field per step of :data:`STEPS`, ``prepare`` first); :meth:`to_dict` gives "
                          "them all as JSON.")
