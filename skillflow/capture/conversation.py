"""A recorded conversation's business outcome: the evaluator's verdict over the whole conversation.

The evaluator sees the conversation as one :class:`~skillflow.capture.outcome.Workflow`: ``id`` is the
conversation id, ``query`` every user message joined with ``"\\n"`` (an Anthropic user message's text blocks,
not its ``tool_result`` blocks), ``steps`` every call of every procedure
in order (normalized as capture stores them), ``outcome`` the execution outcome of all of them (a failure
when any call failed for good), ``canonical_hash`` ``None`` (a conversation is not one procedure) and the
conversation's ``metadata``. Its verdict is the outcome of each procedure (docs/guide/runtime.md,
"Conversations").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skillflow.capture.outcome import ConversationOutcome, Evaluator, Workflow, evaluate_conversation
from skillflow.capture.record import normalize_run
from skillflow.capture.segments import Segment
from skillflow.kernel import canonical
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.messages import chat_messages, message_text
from skillflow.kernel.models import WorkflowOutcome


def conversation_workflow(
    ids: tuple[str, str, str],
    messages: Sequence[Mapping[str, Any]],
    segments: Sequence[Segment],
    metadata: Mapping[str, Any] | None,
    config: PromotionConfig,
) -> Workflow:
    """The whole conversation ``(agent_id, user_id, conversation_id)`` as the evaluator sees it.

    Raises ``RunValidationError`` when a procedure cannot be stored (capture refuses it too)."""
    agent_id, user_id, conversation_id = ids
    runs = [
        normalize_run({"query": "", "agent_id": agent_id, "user_id": user_id, "steps": seg.steps, "metadata": metadata})
        for seg in segments
    ]
    steps = tuple(step for run in runs for step in run.steps)
    chat = [m for _, m in chat_messages(messages, strict=False)]  # either format, as segmentation read it
    query = "\n".join(
        message_text(m.get("content")) for m in chat if isinstance(m, Mapping) and m.get("role") == "user"
    )
    executed = canonical.execution_succeeded(canonical.signature(steps, config.noop_tools), None)
    return Workflow(
        id=conversation_id,
        query=query,
        agent_id=agent_id,
        user_id=user_id,
        steps=Workflow.steps_mapping(steps),
        outcome=WorkflowOutcome.SUCCESS if executed else WorkflowOutcome.FAILURE,
        canonical_hash=None,
        metadata=runs[0].metadata if runs else {},
    )


def conversation_outcome(
    ids: tuple[str, str, str],
    messages: Sequence[Mapping[str, Any]],
    segments: Sequence[Segment],
    metadata: Mapping[str, Any] | None,
    evaluator: Evaluator | None,
    config: PromotionConfig,
) -> ConversationOutcome | None:
    """The evaluator's verdict over the whole conversation (None without an evaluator or a procedure).

    Never raises: a conversation the evaluator cannot be shown is a learning failure (``unknown``), never
    a success."""
    if evaluator is None or not segments:
        return None
    try:
        workflow = conversation_workflow(ids, messages, segments, metadata, config)
    except Exception as exc:  # noqa: BLE001 - capture refuses the procedure itself; the outcome stays unknown
        return ConversationOutcome(WorkflowOutcome.UNKNOWN, "learning_failure", f"conversation: {type(exc).__name__}")
    return evaluate_conversation(workflow, evaluator)
