"""Value types shared by the runtime, the storage layer and the flows."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


class WorkflowOutcome(enum.StrEnum):
    """Outcome of one recorded run; ``unknown`` runs never count toward a gate."""

    SUCCESS = "success"
    FAILURE = "failure"
    UNKNOWN = "unknown"


class SkillStatus(enum.StrEnum):
    """Lifecycle of a skill version. ``rejected`` is set by a reviewer, never by a schedule."""

    CANDIDATE = "candidate"
    SHADOW = "shadow"
    ACTIVE = "active"
    DEPRECATED = "deprecated"
    DEMOTED = "demoted"
    REJECTED = "rejected"


LIVE_STATUSES = (SkillStatus.CANDIDATE, SkillStatus.SHADOW, SkillStatus.ACTIVE)


def with_article(status: str) -> str:
    """``status`` after its indefinite article, for messages: "an active", "a shadow"."""
    return f"{'an' if status[:1] in 'aeiou' else 'a'} {status}"


class InjectionRole(enum.StrEnum):
    """Instruction authority a skill is rendered with."""

    USER = "user"
    DEVELOPER = "developer"


def utcnow() -> datetime:
    """Timezone-aware UTC now (the application clock; never the database clock)."""
    return datetime.now(UTC)


def new_id() -> str:
    """A fresh opaque identifier (uuid4 hex)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Step:
    """One tool call of a run, in the order it happened."""

    tool: str
    arguments: Any = field(default_factory=dict)
    result: Any = None
    error: str | None = None
    error_class: str | None = None
    timestamp: datetime | str | None = None

    @property
    def errored(self) -> bool:
        """A failed call: an ``error`` or an ``error_class`` (an agent may record only the exception's class)."""
        return self.error not in (None, "") or self.error_class not in (None, "")


@dataclass(frozen=True)
class Unit:
    """One unit of a canonical signature: a tool call shape with retries collapsed."""

    tool: str
    arg_keys: tuple[str, ...]
    errored: bool
    error_class: str | None = None
    retry_count: int = 0

    def as_hashable(self) -> dict[str, Any]:
        """The hashed form. Clean units carry exactly upstream's three keys (golden-vector compatible)."""
        unit: dict[str, Any] = {"tool": self.tool, "arg_keys": list(self.arg_keys), "errored": self.errored}
        if self.errored and self.error_class:
            unit["error_class"] = self.error_class
        return unit


@dataclass(frozen=True)
class RunInput:
    """What an agent hands to :func:`skillflow.runtime.record_run`."""

    query: str
    agent_id: str
    user_id: str
    steps: tuple[Step, ...] = ()
    skills_activated: tuple[str, ...] = ()
    execution_error: str | None = None
    run_id: str | None = None
    created_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    conversation_id: str | None = None  # the conversation the run belongs to (docs/guide/runtime.md)
    segment_index: int | None = None  # the procedure's position in that conversation (record_conversation)


@dataclass(frozen=True)
class ClassStats:
    """One trajectory class in one (agent, user) partition, aggregated in SQL.

    ``executions`` counts runs with a known outcome (success or failure); ``unknown`` runs (a failed
    business evaluator) count toward nothing. After a demotion only runs created after ``since`` count.
    """

    agent_id: str
    user_id: str
    canonical_hash: str
    executions: int
    successes: int
    failures: int
    unknown: int
    success_rate: float
    distinct_queries: int
    first_seen: datetime
    last_seen: datetime
    tool_sequence: str | None
    since: datetime | None = None
    stamped: int = 0


@dataclass(frozen=True)
class EvidenceRun:
    """A stored sample run of a class (raw; redact before anything reaches an LLM or a skill)."""

    id: str
    query: str
    steps: list[dict[str, Any]]
    outcome: str
    created_at: datetime
