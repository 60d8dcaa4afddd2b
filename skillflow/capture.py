"""Run capture: validate and coerce a run, compute its identity and outcome, write it in one transaction."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, insert, select

from skillflow import canonical
from skillflow.config import PromotionConfig
from skillflow.models import RunInput, SkillStatus, Step, WorkflowOutcome, new_id, utcnow
from skillflow.outcome import Evaluator, Workflow, resolve_outcome
from skillflow.storage.schema import skill_activations, skillbox, workflow_memory

MAX_ID_CHARS = 64
MAX_TENANT_CHARS = 255
MAX_QUERY_CHARS = 20_000
MAX_STRING_CHARS = 8_000
MAX_STEPS = 500
TRUNCATED = "…[truncated]"


class RunValidationError(ValueError):
    """A run that cannot be stored as given; the message names the field, never its value."""


@dataclass(frozen=True)
class CaptureResult:
    run_id: str
    stored: bool
    canonical_hash: str | None = None
    outcome: str | None = None
    promoted_skill_id: str | None = None
    skills_activated: tuple[str, ...] = ()
    error: str | None = None
    spooled: bool = False


def _clean_str(value: str, limit: int = MAX_STRING_CHARS) -> str:
    # NUL cannot be stored in PostgreSQL text; other control characters are kept as data.
    value = value.replace("\x00", "\ufffd")
    return value if len(value) <= limit else value[:limit] + TRUNCATED


def sanitize(value: Any, depth: int = 0) -> Any:
    """Documented safe coercion to storable JSON: NaN/inf → null, unknown objects → repr, long text cut."""
    if depth > 20:
        return "<nested too deep>"
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _clean_str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping):
        return {_clean_str(str(k), 200): sanitize(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [sanitize(v, depth + 1) for v in value]
    return _clean_str(repr(value), 500)


def _tenant(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RunValidationError(f"{name} must be a non-empty string")
    if len(value) > MAX_TENANT_CHARS:
        raise RunValidationError(f"{name} is longer than {MAX_TENANT_CHARS} characters")
    return value


def _step(raw: Any, index: int) -> Step:
    if isinstance(raw, Step):
        step = raw
    elif isinstance(raw, Mapping):
        step = Step(
            tool=raw.get("tool") or raw.get("name"),  # type: ignore[arg-type]  # validated just below
            arguments=raw.get("arguments", {}),
            result=raw.get("result"),
            error=raw.get("error"),
            error_class=raw.get("error_class"),
            timestamp=raw.get("timestamp"),
        )
    else:
        raise RunValidationError(f"steps[{index}] must be a Step or a mapping")
    if not isinstance(step.tool, str) or not step.tool.strip() or len(step.tool) > 255:
        raise RunValidationError(f"steps[{index}].tool must be a non-empty string of at most 255 characters")
    if any(ord(ch) < 32 for ch in step.tool):
        raise RunValidationError(f"steps[{index}].tool must not contain control characters")
    error = step.error
    if error is not None and not isinstance(error, str):
        error = repr(error)
    ts = step.timestamp
    if ts is not None and not isinstance(ts, datetime | str):
        ts = None
    return Step(
        tool=step.tool.strip(),
        arguments=sanitize(step.arguments),
        result=sanitize(step.result),
        error=_clean_str(error, 2000) if error else None,
        error_class=_clean_str(str(step.error_class), 100) if step.error_class else None,
        timestamp=ts,
    )


def normalize_run(run: RunInput | Mapping[str, Any]) -> RunInput:
    """Validate a run and coerce what can safely be coerced; raise :class:`RunValidationError` otherwise."""
    if isinstance(run, Mapping):
        known = {k: run[k] for k in RunInput.__dataclass_fields__ if k in run}
        if "steps" in run and isinstance(run["steps"], Mapping):
            known["steps"] = canonical.steps_from_document(run)
        try:
            run = RunInput(**known)
        except TypeError as exc:
            raise RunValidationError(f"missing run field: {exc}") from None
    query = run.query
    if query is None:
        query = ""
    if not isinstance(query, str):
        raise RunValidationError("query must be a string")
    if not isinstance(run.steps, Sequence) or isinstance(run.steps, str | bytes):
        raise RunValidationError("steps must be a sequence")
    if len(run.steps) > MAX_STEPS:
        raise RunValidationError(f"a run holds at most {MAX_STEPS} steps")
    run_id = run.run_id or new_id()
    if not isinstance(run_id, str) or len(run_id) > MAX_ID_CHARS:
        raise RunValidationError(f"run_id must be a string of at most {MAX_ID_CHARS} characters")
    created = run.created_at or utcnow()
    if created.tzinfo is None:
        raise RunValidationError("created_at must be timezone-aware")
    skills = tuple(s for s in run.skills_activated if isinstance(s, str))
    return replace(
        run,
        query=_clean_str(query, MAX_QUERY_CHARS),
        agent_id=_tenant("agent_id", run.agent_id),
        user_id=_tenant("user_id", run.user_id),
        steps=tuple(_step(s, i) for i, s in enumerate(run.steps)),
        skills_activated=skills,
        execution_error=_clean_str(str(run.execution_error), 200) if run.execution_error else None,
        run_id=run_id,
        created_at=created,
        metadata=sanitize(dict(run.metadata or {})),
    )


def write_run(
    conn: Connection,
    run: RunInput,
    config: PromotionConfig,
    evaluator: Evaluator | None = None,
) -> CaptureResult:
    """Insert one normalized run (idempotent on ``run_id``) with identity, outcome, stamp and outbox flag."""
    assert run.run_id is not None and run.created_at is not None
    existing = conn.execute(
        select(
            workflow_memory.c.canonical_hash,
            workflow_memory.c.outcome,
            workflow_memory.c.promoted_skill_id,
            workflow_memory.c.agent_id,
            workflow_memory.c.user_id,
        ).where(workflow_memory.c.id == run.run_id)
    ).first()
    if existing is not None:
        if (existing[3], existing[4]) != (run.agent_id, run.user_id):
            # Never confirm, or reveal, another tenant's run.
            return CaptureResult(run.run_id, False, error="run_id is already used by another agent or user")
        # A retried capture converges on the row already written.
        return CaptureResult(run.run_id, True, existing[0], existing[1], existing[2])
    units = canonical.signature(run.steps, config.noop_tools)
    chash = canonical.canonical_hash(units)
    execution = (
        WorkflowOutcome.SUCCESS
        if canonical.execution_succeeded(units, run.execution_error)
        else WorkflowOutcome.FAILURE
    )
    workflow = Workflow(
        id=run.run_id,
        query=run.query,
        agent_id=run.agent_id,
        user_id=run.user_id,
        steps=Workflow.steps_mapping(run.steps),
        outcome=execution,
        canonical_hash=chash,
        metadata=run.metadata,
    )
    resolution = resolve_outcome(workflow, evaluator)
    tenant = and_(skillbox.c.agent_id == run.agent_id, skillbox.c.user_id == run.user_id)
    active_ids: tuple[str, ...] = ()
    if run.skills_activated:
        rows = conn.execute(
            select(skillbox.c.id).where(
                tenant, skillbox.c.status == SkillStatus.ACTIVE.value, skillbox.c.id.in_(set(run.skills_activated))
            )
        ).scalars()
        found = set(rows)
        active_ids = tuple(dict.fromkeys(s for s in run.skills_activated if s in found))
    stamp = None
    if chash is not None:
        stamp = conn.execute(
            select(skillbox.c.id).where(
                tenant, skillbox.c.canonical_hash == chash, skillbox.c.status == SkillStatus.ACTIVE.value
            )
        ).scalar()
    conn.execute(
        insert(workflow_memory).values(
            id=run.run_id,
            agent_id=run.agent_id,
            user_id=run.user_id,
            query=run.query,
            query_fingerprint=canonical.query_fingerprint(run.query),
            canonical_hash=chash,
            tool_sequence=canonical.tool_sequence(units)[:4000] or None,
            step_count=len(run.steps),
            outcome=resolution.outcome.value,
            execution_outcome=execution.value,
            outcome_source=resolution.source,
            learning_error=resolution.learning_error,
            promoted_skill_id=stamp,
            shadow_pending=1 if (chash is not None and config.shadow_evaluation_enabled) else 0,
            created_at=run.created_at,
            steps=[
                {
                    "tool": s.tool,
                    "arguments": s.arguments,
                    "result": s.result,
                    "error": s.error,
                    "error_class": s.error_class,
                    "timestamp": s.timestamp.isoformat() if isinstance(s.timestamp, datetime) else s.timestamp,
                }
                for s in run.steps
            ],
            signature=[u.as_hashable() for u in units] if units else None,
            skills_activated=list(active_ids),
            metadata=run.metadata or None,
        )
    )
    if active_ids:
        conn.execute(
            insert(skill_activations),
            [
                {
                    "run_id": run.run_id,
                    "skill_id": sid,
                    "agent_id": run.agent_id,
                    "user_id": run.user_id,
                    "canonical_hash": chash,
                    "outcome": resolution.outcome.value,
                    "created_at": run.created_at,
                }
                for sid in active_ids
            ],
        )
    return CaptureResult(run.run_id, True, chash, resolution.outcome.value, stamp, active_ids)
