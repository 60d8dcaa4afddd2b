"""What the promotion pipeline knows about a trajectory class: its SQL aggregate and its sample runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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


@dataclass(frozen=True)
class Evidence:
    """Everything distillation and validation may use for one class."""

    stats: ClassStats
    signature: list[dict[str, Any]]
    successes: list[EvidenceRun]
    failures: list[EvidenceRun]
    toolbox: list[str]
    previous_demotion_reason: str | None = None
    version: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def source_ids(self) -> list[str]:
        return [r.id for r in (*self.successes, *self.failures)]
