"""Business outcome: the ``workflow_outcome_evaluator`` contract, resolved safely, per run or per conversation."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from skillflow.kernel.errors import InputError
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

# The learning failure of an evaluator that returned an awaitable (an ``async def`` one): nothing awaits it.
AWAITABLE = "evaluator failed: it returned an awaitable (workflow_outcome_evaluator must be a sync function)"


class AwaitableAnswer(TypeError):
    """The evaluator returned an awaitable: it was closed, never awaited (docs/guide/runtime.md)."""


def check_evaluator(evaluator: Any) -> None:
    """Refuse, where the handle is made, an evaluator capture cannot call: not callable, or ``async`` (an ``async
    def`` function, a callable whose ``__call__`` is one, an async generator function), whose answer nothing would
    await, so every run would be ``unknown``. ``TypeError`` naming the parameter; ``None`` is no evaluator."""
    if evaluator is None:
        return
    if not callable(evaluator):
        raise TypeError("workflow_outcome_evaluator must be a sync function (a callable taking the Workflow)")
    call = getattr(type(evaluator), "__call__", None)  # noqa: B004 - the class's method: an async __call__
    if any(inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in (evaluator, call) if f is not None):
        raise TypeError(
            "workflow_outcome_evaluator must be a sync function: an async one is never awaited by capture "
            "(run the async check yourself and pass record_conversation(outcome=...), or wrap it in a sync function)"
        )


def _ask(evaluator: Evaluator, workflow: Workflow) -> Any:
    """The evaluator's answer. An awaitable is closed (a coroutine never started then warns nothing) and refused
    with :class:`AwaitableAnswer`: capture runs in the agent's thread and awaits nothing."""
    answer = evaluator(workflow)
    if inspect.isawaitable(answer):
        close = getattr(answer, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):  # closing is a courtesy; the run is unknown either way
                close()
        raise AwaitableAnswer(AWAITABLE)
    return answer


@dataclass(frozen=True)
class Resolution:
    outcome: WorkflowOutcome
    source: str  # "execution" | "evaluator" | "given" | "learning_failure"
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
    gate bounds it) and the error class, never the error text. An evaluator that returns an awaitable (an
    ``async def`` one set after construction) is a learning failure too, named :data:`AWAITABLE`; the awaitable
    is closed, never awaited.
    """
    execution = workflow.outcome
    if evaluator is None or execution is WorkflowOutcome.FAILURE:
        return Resolution(execution, "execution")
    try:
        verdict = _coerce(_ask(evaluator, workflow))
    except AwaitableAnswer:
        return Resolution(WorkflowOutcome.UNKNOWN, "learning_failure", AWAITABLE)
    except Exception as exc:  # noqa: BLE001 - a user callback must never break the agent's run
        return Resolution(WorkflowOutcome.UNKNOWN, "learning_failure", f"evaluator failed: {type(exc).__name__}")
    if verdict is None:
        return Resolution(execution, "execution")
    return Resolution(verdict, "evaluator")


CONVERSATION_OUTCOME = "conversation_outcome"  # the key a spooled procedure carries its conversation's outcome under


@dataclass(frozen=True)
class ConversationOutcome:
    """A whole conversation's business outcome, the outcome of each of its procedures (docs/guide/runtime.md).

    ``outcome`` is ``None`` when the evaluator left it to execution; ``source`` is ``given`` (the caller's
    ``outcome=``), ``evaluator`` or ``learning_failure`` (the evaluator raised or answered outside the contract).
    """

    outcome: WorkflowOutcome | None
    source: str
    learning_error: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """The JSON form a spooled run carries, so a replay applies the same outcome."""
        outcome = None if self.outcome is None else self.outcome.value
        return {"outcome": outcome, "source": self.source, "learning_error": self.learning_error}

    @classmethod
    def from_dict(cls, doc: Any) -> ConversationOutcome | None:
        """The spooled form back (None when the run carried none); an unreadable one is ``unknown``, never a
        success the run's own evaluator could give."""
        if doc is None:
            return None
        try:
            value, source, error = doc["outcome"], doc["source"], doc.get("learning_error")
            outcome = None if value is None else WorkflowOutcome(value)
            if source not in ("given", "evaluator", "learning_failure") or not isinstance(error, str | None):
                raise TypeError(source)
        except (KeyError, TypeError, ValueError):
            return cls(WorkflowOutcome.UNKNOWN, "learning_failure", "spooled conversation outcome unreadable")
        return cls(outcome, source, error)


def given_outcome(value: Any) -> ConversationOutcome | None:
    """The caller's ``outcome=``: ``None``, a bool, ``"success"``/``"failure"`` or a ``WorkflowOutcome``.

    Raises :class:`~skillflow.kernel.errors.InputError` (naming the parameter, never the value) for anything
    else.
    """
    if value is None:
        return None
    try:
        verdict = _coerce(value)
    except Exception:  # noqa: BLE001 - a caller's object that fails to compare is not an outcome
        verdict = None
    if verdict is None:
        raise InputError("outcome must be a bool, 'success', 'failure' or a WorkflowOutcome")
    return ConversationOutcome(verdict, "given")


def evaluate_conversation(workflow: Workflow, evaluator: Evaluator) -> ConversationOutcome:
    """Run ``evaluator`` once over a whole conversation. Never raises.

    Unlike a single run, the evaluator runs even when a call failed: its verdict still decides the procedures
    that executed. An exception or an answer outside the contract is a learning failure (``unknown``).
    """
    try:
        verdict = _coerce(_ask(evaluator, workflow))
    except AwaitableAnswer:
        return ConversationOutcome(WorkflowOutcome.UNKNOWN, "learning_failure", AWAITABLE)
    except Exception as exc:  # noqa: BLE001 - a user callback must never break the agent's run
        return ConversationOutcome(
            WorkflowOutcome.UNKNOWN, "learning_failure", f"evaluator failed: {type(exc).__name__}"
        )
    return ConversationOutcome(verdict, "evaluator")


def apply_conversation(execution: WorkflowOutcome, conversation: ConversationOutcome) -> Resolution:
    """One procedure's outcome under its conversation's: a failed execution stays a failure, whatever the
    conversation's outcome; otherwise the conversation's outcome, so a failed conversation fails every procedure
    and an evaluator error gives ``unknown``, never a success."""
    if execution is WorkflowOutcome.FAILURE or conversation.outcome is None:
        return Resolution(execution, "execution")
    return Resolution(conversation.outcome, conversation.source, conversation.learning_error)
