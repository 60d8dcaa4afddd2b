"""Run capture: validate and coerce a run, compute its identity and outcome, write it in one transaction."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, insert, select, update

from skillflow.capture.outcome import ConversationOutcome, Evaluator, Workflow, apply_conversation, resolve_outcome
from skillflow.kernel import canonical
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.errors import InputError
from skillflow.kernel.messages import blank
from skillflow.kernel.models import RunInput, SkillStatus, Step, WorkflowOutcome, new_id, utcnow
from skillflow.kernel.textnorm import MAX_TENANT_CHARS, encodable, tenant_problem
from skillflow.storage.schema import skill_activations, skillbox, workflow_memory

MAX_ID_CHARS = 64
MAX_QUERY_CHARS = 20_000
MAX_STRING_CHARS = 8_000
MAX_STEPS = 500
TRUNCATED = "…[truncated]"


class RunValidationError(InputError):
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
    already_stored: bool = False  # the run id's row was there already: this call wrote nothing (a retried capture)
    # Why the outcome is ``unknown`` when the evaluator failed (``learning_error`` of the row: the error's class, or
    # that it returned an awaitable); None otherwise. The run is stored all the same (docs/guide/runtime.md).
    learning_error: str | None = None


def clean_text(value: str) -> str:
    """``value`` storable everywhere: NUL (PostgreSQL text refuses it) and lone surrogates become U+FFFD; a str
    subclass is read as its plain text (its own methods are never called)."""
    return encodable(str.__str__(value).replace("\x00", "\ufffd"))


def _clean_str(value: str, limit: int = MAX_STRING_CHARS) -> str:
    # NUL cannot be stored in PostgreSQL text; other control characters are kept as data.
    value = str.__str__(value)  # a str subclass's own __len__, slicing or replace are never called
    return clean_text(value if len(value) <= limit else value[:limit] + TRUNCATED)


def tool_name(value: Any, field: str) -> str:
    """A tool's name as capture stores it (stripped, lone surrogates as U+FFFD, a str subclass as its plain text),
    or a :class:`RunValidationError` naming ``field``: not a non-empty string of at most 255 characters, or one
    holding a control character. A step's tool and a registered tool are read alike."""
    if not isinstance(value, str) or not (text := str.__str__(value)).strip() or len(text) > 255:
        raise RunValidationError(f"{field} must be a non-empty string of at most 255 characters")
    if any(ord(ch) < 32 for ch in text):
        raise RunValidationError(f"{field} must not contain control characters")
    return clean_text(text.strip())


def safe_str(value: Any, limit: int = MAX_STRING_CHARS, *, use_repr: bool = False) -> str:
    """``str``/``repr`` of anything, never raising: an object whose conversion fails becomes ``<unprintable T>``."""
    if isinstance(value, str):
        return _clean_str(value, limit)
    try:
        text = repr(value) if use_repr else str(value)
    except Exception:  # noqa: BLE001 - a user object's __str__/__repr__ must not break capture
        text = f"<unprintable {type(value).__name__}>"
    if not isinstance(text, str):  # a __str__ returning a non-str (already a TypeError from str())
        text = f"<unprintable {type(value).__name__}>"
    return _clean_str(text, limit)


def _int(value: int) -> int | str:
    # JSON integers beyond 64 bits are not portable across backends; keep them as text.
    return value if -(2**63) <= value < 2**63 else _clean_str(str(value), 100)


def sanitize(value: Any, depth: int = 0, _path: frozenset[int] = frozenset(), _budget: list[int] | None = None) -> Any:
    """Documented safe coercion to storable JSON, never raising.

    NaN/inf → null; bytes → ``<n bytes>``; sets → lists; datetimes → ISO text; keys → text; unknown objects
    → their repr (``<unprintable T>`` when repr raises); text longer than 8 000 characters is cut; a cycle
    becomes ``<cycle>``; nesting deeper than 20 becomes ``<nested too deep>``; after 10 000 values the rest
    becomes ``<truncated>``.
    """
    budget = _budget if _budget is not None else [10_000]
    budget[0] -= 1
    if budget[0] < 0:
        return "<truncated>"
    if depth > 20:
        return "<nested too deep>"
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _clean_str(value)
    if isinstance(value, datetime):
        return safe_str(value.isoformat())
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        if id(value) in _path:
            return "<cycle>"
        path = _path | {id(value)}
        try:
            if isinstance(value, Mapping):
                # Long keys become a prefix + a digest of the whole key (identity shares this normalisation).
                return {
                    canonical.normalize_key(safe_str(k, 100_000)): sanitize(v, depth + 1, path, budget)
                    for k, v in list(value.items())[:10_000]
                }
            return [sanitize(v, depth + 1, path, budget) for v in list(value)[:10_000]]
        except Exception:  # noqa: BLE001 - a broken container (items() raising) is stored as its type only
            return f"<unreadable {type(value).__name__}>"
    return safe_str(value, 500, use_repr=True)


def normalize_tenant(name: str, value: Any) -> str:
    """``agent_id``/``user_id`` as a plain string, refused (naming ``name``) when
    :func:`skillflow.kernel.textnorm.tenant_problem` finds one."""
    if problem := tenant_problem(name, value):
        raise RunValidationError(problem)
    return str.__str__(value)  # a str subclass's own methods are never called


_UNSET = object()


def _step(raw: Any, index: int) -> Step:
    if isinstance(raw, Step):
        step = raw
    elif isinstance(raw, Mapping):
        # An Anthropic tool_use block's ``name``/``input`` (and ``output``) read as ``tool``/``arguments``/``result``.
        tool, arguments, result = raw.get("tool"), raw.get("arguments", _UNSET), raw.get("result", _UNSET)
        step = Step(
            tool=raw.get("name") if blank(tool) else tool,  # type: ignore[arg-type]  # checked below
            arguments=raw.get("input", {}) if arguments is _UNSET else arguments,
            result=raw.get("output") if result is _UNSET else result,
            error=raw.get("error"),
            error_class=raw.get("error_class"),
            timestamp=raw.get("timestamp"),
        )
    else:
        raise RunValidationError(f"steps[{index}] must be a Step or a mapping")
    tool = tool_name(step.tool, f"steps[{index}].tool")
    error = None if blank(step.error) else safe_str(step.error, 2000, use_repr=True)
    ts = step.timestamp
    if isinstance(ts, str):
        ts = _clean_str(ts, 64)
    elif not isinstance(ts, datetime):
        ts = None
    error_class = step.error_class
    return Step(
        tool=tool,
        arguments=sanitize(step.arguments),
        result=sanitize(step.result),
        error=error or None,
        error_class=None if blank(error_class) else safe_str(error_class, 100),
        timestamp=ts,
    )


MAX_CLOCK_SKEW = timedelta(minutes=5)  # how far ahead of this process's clock a caller's created_at may be


def _created_at(value: Any) -> datetime:
    """``created_at``: None → now; an aware datetime; an ISO-8601 text with an offset. Anything else is an error."""
    if value is None:
        return utcnow()
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise RunValidationError("created_at must be a datetime or ISO-8601 text") from None
    if not isinstance(value, datetime):
        raise RunValidationError("created_at must be a datetime or ISO-8601 text")
    if value.tzinfo is None or value.utcoffset() is None:
        raise RunValidationError("created_at must be timezone-aware")
    try:
        value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise RunValidationError("created_at is out of range") from None
    if value > utcnow() + MAX_CLOCK_SKEW:  # a run ahead of the clock would outrank every later one (drift, requalify)
        raise RunValidationError(f"created_at is more than {MAX_CLOCK_SKEW.seconds // 60} minutes ahead of this clock")
    return value


def _skill_ids(value: Any) -> tuple[str, ...]:
    """``skills_activated``: None → none; an iterable of ids (non-text entries are dropped); else an error."""
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise RunValidationError("skills_activated must be an iterable of skill ids")
    try:
        return tuple(clean_text(s) for s in list(value)[:1000] if isinstance(s, str) and len(s) <= MAX_ID_CHARS)
    except Exception:  # noqa: BLE001 - an iterable that fails while iterating
        raise RunValidationError("skills_activated could not be read") from None


def _metadata(value: Any) -> dict[str, Any]:
    """``metadata``: None → ``{}``; a mapping → sanitized JSON; anything else is an error."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RunValidationError("metadata must be a mapping")
    cleaned = sanitize(value)
    if not isinstance(cleaned, dict):
        raise RunValidationError("metadata could not be read")
    return cleaned


def normalize_run(run: RunInput | Mapping[str, Any]) -> RunInput:
    """Validate a run and coerce what can safely be coerced; raise :class:`RunValidationError` otherwise.

    Never raises anything else: an unexpected failure while reading a value becomes a
    ``RunValidationError`` naming the error class (never the value).
    """
    try:
        return _normalize(run)
    except RunValidationError:
        raise
    except Exception as exc:  # noqa: BLE001 - user values with hostile __eq__/__iter__/__len__ etc.
        raise RunValidationError(f"run could not be read: {type(exc).__name__}") from None


def _normalize(run: RunInput | Mapping[str, Any]) -> RunInput:
    if isinstance(run, Mapping):
        known = {k: run[k] for k in RunInput.__dataclass_fields__ if k in run}
        if "steps" in run and isinstance(run["steps"], Mapping):
            try:
                known["steps"] = canonical.steps_from_document(run)
            except InputError as exc:  # the message names the shape, never a value
                raise RunValidationError(f"steps: {exc}") from None
        try:
            run = RunInput(**known)
        except TypeError as exc:
            raise RunValidationError(f"missing run field: {exc}") from None
    query = "" if run.query is None else run.query
    if not isinstance(query, str):
        raise RunValidationError("query must be a string")
    if not isinstance(run.steps, Sequence) or isinstance(run.steps, str | bytes):
        raise RunValidationError("steps must be a sequence")
    if len(run.steps) > MAX_STEPS:
        raise RunValidationError(f"a run holds at most {MAX_STEPS} steps")
    run_id = new_id() if blank(run.run_id) else run.run_id
    if not isinstance(run_id, str) or str.__len__(run_id) > MAX_ID_CHARS:
        raise RunValidationError(f"run_id must be a string of at most {MAX_ID_CHARS} characters")
    err = run.execution_error
    return replace(
        run,
        query=_clean_str(query, MAX_QUERY_CHARS),
        agent_id=normalize_tenant("agent_id", run.agent_id),
        user_id=normalize_tenant("user_id", run.user_id),
        steps=tuple(_step(s, i) for i, s in enumerate(run.steps)),
        skills_activated=_skill_ids(run.skills_activated),
        execution_error=None if blank(err) else safe_str(err, 200),
        run_id=_clean_str(run_id, MAX_ID_CHARS),
        created_at=_created_at(run.created_at),
        metadata=_metadata(run.metadata),
        conversation_id=normalize_conversation_id(run.conversation_id),
        segment_index=_segment_index(run.segment_index),
    )


def normalize_conversation_id(value: Any) -> str | None:
    """``conversation_id``: None or "" → none; a string of at most 255 characters without control characters."""
    if blank(value):
        return None
    text = str.__str__(value) if isinstance(value, str) else None  # a str subclass's own methods are never called
    if text is None or len(text) > MAX_TENANT_CHARS or any(ord(ch) < 32 for ch in text):
        raise RunValidationError(f"conversation_id must be a string of at most {MAX_TENANT_CHARS} characters")
    return clean_text(text)


def _segment_index(value: Any) -> int | None:
    """``segment_index``: None, or a non-negative integer (not a bool) below 1 000 000."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1_000_000:
        raise RunValidationError("segment_index must be a non-negative integer")
    return value


def _late_outcome(conn: Connection, run_id: str, row: Any, conversation: ConversationOutcome) -> str:
    """A procedure stored by its execution before its conversation ended takes the conversation's outcome.

    A conversation recorded after every turn (``complete=False``) stores each closed procedure by execution;
    the outcome given (or evaluated) when it ends is then every procedure's, as a single final call stores it
    (docs/guide/runtime.md). The run, the activations drift reads and, for a run already folded, its class's
    statistics (recounted by the next fold) follow; a tool-calling run goes back into the outbox, whose drain
    corrects its records. Only an execution-sourced row changes: an outcome once given or evaluated stands."""
    resolution = apply_conversation(WorkflowOutcome(row.execution_outcome), conversation)
    if resolution.source == "execution":
        return str(row.outcome)
    values: dict[str, Any] = {
        "outcome": resolution.outcome.value,
        "outcome_source": resolution.source,
        "learning_error": resolution.learning_error,
    }
    changed = resolution.outcome.value != row.outcome
    if changed and row.canonical_hash is not None:
        # Back into the outbox: its records, written or being written by a drain that holds the row (it read the
        # old outcome), name the old outcome, and the next drain corrects them.
        values["shadow_pending"] = 1
    conn.execute(update(workflow_memory).where(workflow_memory.c.id == run_id).values(**values))
    if changed:
        conn.execute(
            update(skill_activations)
            .where(skill_activations.c.run_id == run_id)
            .values(outcome=resolution.outcome.value)
        )
        if row.canonical_hash is not None and row.stats_pending != 1:  # folded (a pending run folds its new outcome)
            from skillflow.storage.class_stats import mark_stale

            mark_stale(conn, [(row.agent_id, row.user_id, row.canonical_hash)])
    return resolution.outcome.value


def write_run(
    conn: Connection,
    run: RunInput,
    config: PromotionConfig,
    evaluator: Evaluator | None = None,
    conversation: ConversationOutcome | None = None,
) -> CaptureResult:
    """Insert one normalized run (idempotent on ``run_id``) with identity, outcome, stamp and outbox flag.

    ``conversation`` (a procedure of a recorded conversation) decides the business outcome instead of
    ``evaluator``: :func:`skillflow.capture.outcome.apply_conversation`.

    The outbox flag does not depend on the agent's ``shadow_evaluation_enabled``: an agent started in
    another working directory reads another (or no) config file, so the shadow-evaluation flow decides.
    """
    assert run.run_id is not None and run.created_at is not None
    wm = workflow_memory.c
    existing = conn.execute(
        select(
            wm.canonical_hash, wm.outcome, wm.promoted_skill_id, wm.agent_id, wm.user_id, wm.outcome_source,
            wm.execution_outcome, wm.stats_pending, wm.shadow_evaluations,
        ).where(wm.id == run.run_id)
    ).first()  # fmt: skip
    if existing is not None:
        if (existing.agent_id, existing.user_id) != (run.agent_id, run.user_id):
            # Never confirm, or reveal, another tenant's run.
            return CaptureResult(run.run_id, False, error="run_id is already used by another agent or user")
        outcome = existing.outcome
        if conversation is not None and existing.outcome_source == "execution":
            outcome = _late_outcome(conn, run.run_id, existing, conversation)
        # A retried capture converges on the row already written.
        return CaptureResult(
            run.run_id, True, existing.canonical_hash, outcome, existing.promoted_skill_id, already_stored=True
        )
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
    resolution = (
        apply_conversation(execution, conversation)
        if conversation is not None
        else resolve_outcome(workflow, evaluator)
    )
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
            tool_sequence=canonical.stored_sequence(units),
            step_count=len(run.steps),
            outcome=resolution.outcome.value,
            execution_outcome=execution.value,
            outcome_source=resolution.source,
            learning_error=resolution.learning_error,
            promoted_skill_id=stamp,
            # Every tool-calling run enters the outbox: the shadow flow (not this process's config) decides.
            shadow_pending=1 if chash is not None else 0,
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
            conversation_id=run.conversation_id,
            segment_index=run.segment_index,
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
    return CaptureResult(
        run.run_id, True, chash, resolution.outcome.value, stamp, active_ids, learning_error=resolution.learning_error
    )
