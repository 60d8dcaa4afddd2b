"""Business outcome: the ``workflow_outcome_evaluator`` contract, resolved safely."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from skillflow.kernel.models import Step, WorkflowOutcome


@dataclass(frozen=True)
class Workflow:
    """The completed run as an evaluator sees it, before it is stored.

    ``steps`` is an ordered mapping ``"Step N: tool" -> {arguments, result, error, timestamp}`` (the
    upstream document shape), so evaluators written for upstream keep working.
    """

    id: str
    query: str
    agent_id: str
    user_id: str
    steps: Mapping[str, dict[str, Any]]
    outcome: WorkflowOutcome
    canonical_hash: str | None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def steps_mapping(steps: tuple[Step, ...]) -> dict[str, dict[str, Any]]:
        return {
            f"Step {i}: {s.tool}": {
                "arguments": s.arguments,
                "result": s.result,
                "error": s.error,
                "timestamp": s.timestamp,
            }
            for i, s in enumerate(steps, start=1)
        }


Evaluator = Callable[[Workflow], Any]


@dataclass(frozen=True)
class Resolution:
    outcome: WorkflowOutcome
    source: str  # "execution" | "evaluator" | "learning_failure"
    learning_error: str | None = None


def _coerce(value: Any) -> WorkflowOutcome | None:
    """Map an evaluator's answer; raise ``TypeError`` for anything outside the contract."""
    if value is None:
        return None
    if isinstance(value, bool):
        return WorkflowOutcome.SUCCESS if value else WorkflowOutcome.FAILURE
    if isinstance(value, WorkflowOutcome):
        return value
    if isinstance(value, str) and value in ("success", "failure"):
        return WorkflowOutcome(value)
    raise TypeError(f"unsupported evaluator return type {type(value).__name__}")


def resolve_outcome(workflow: Workflow, evaluator: Evaluator | None) -> Resolution:
    """Apply the evaluator. Never raises; an execution failure is never upgraded to success.

    The execution outcome is looked at first: a failed execution stays a failure whatever the evaluator
    does (raises, returns garbage, says success), so failed runs always count in the success rate. Only on
    a successful execution can the evaluator decide; an exception or an unsupported return value there
    records a learning failure: outcome ``unknown`` (it counts toward no rate; the ``max_unknown_share``
    gate bounds it) and the error class, never the error text.
    """
    execution = workflow.outcome
    if evaluator is None or execution is WorkflowOutcome.FAILURE:
        return Resolution(execution, "execution")
    try:
        verdict = _coerce(evaluator(workflow))
    except Exception as exc:  # noqa: BLE001 - a user callback must never break the agent's run
        return Resolution(WorkflowOutcome.UNKNOWN, "learning_failure", f"evaluator failed: {type(exc).__name__}")
    if verdict is None:
        return Resolution(execution, "execution")
    return Resolution(verdict, "evaluator")
