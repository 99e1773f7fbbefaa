"""Pipeline step (light): a trial no-op, the run's decision in one line."""

from __future__ import annotations

from tasks.contracts import Job, PublishResult, SummaryResult


def summarize(job: Job, decision: PublishResult) -> SummaryResult:
    """One line: the job's configuration and what publish decided."""
    return SummaryResult(line=f"{job.config_key}: {decision.decision} ({decision.placer})")
