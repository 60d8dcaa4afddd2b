"""The thin runtime agents import: capture runs and (see ``prepare``) inject reviewed skills.

Imports neither prefect nor great_expectations (a test proves it). Learning never breaks the agent:
``record_run`` returns a :class:`CaptureResult` instead of raising, and a run that cannot reach the
database is spooled to disk and replayed later, so nothing is lost.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, delete, insert
from sqlalchemy.exc import OperationalError

from skillflow.capture import CaptureResult, RunValidationError, normalize_run, write_run
from skillflow.config import PromotionConfig, Settings, continual_learning_default, load_promotion_config
from skillflow.models import RunInput, Step, utcnow
from skillflow.outcome import Evaluator
from skillflow.storage.engine import cached_engine
from skillflow.storage.schema import agent_tools
from skillflow.storage.types import dumps

log = logging.getLogger("skillflow.runtime")


@dataclass
class LearningOptions:
    """What the agent turned on. Continual learning forces workflow memory and the skillbox on."""

    continual_learning: bool = False
    workflow_memory: bool = True
    skillbox: bool = True

    def __post_init__(self) -> None:
        if self.continual_learning:
            self.workflow_memory = True
            self.skillbox = True


@dataclass
class Skillflow:
    """One agent's handle on skillflow: ``record_run`` after each run, ``prepare`` before each model call."""

    agent_id: str
    database_url: str | None = None
    config: PromotionConfig | None = None
    workflow_outcome_evaluator: Evaluator | None = None
    continual_learning: bool | None = None
    workflow_memory: bool = True
    spool_dir: Path | None = None
    engine: Engine | None = None
    options: LearningOptions = field(init=False)

    def __post_init__(self) -> None:
        enabled = continual_learning_default() if self.continual_learning is None else self.continual_learning
        self.options = LearningOptions(continual_learning=enabled, workflow_memory=self.workflow_memory)
        self.config = self.config or load_promotion_config()
        if self.engine is None:
            self.engine = cached_engine(self.database_url or Settings().database_url)
        if self.spool_dir is None:
            self.spool_dir = Path(".skillflow/spool")

    # -- capture -----------------------------------------------------------------------------------
    def record_run(
        self,
        query: str,
        user_id: str,
        steps: Sequence[Step | Mapping[str, Any]] | Mapping[str, Any] = (),
        *,
        skills_activated: Iterable[str] = (),
        execution_error: str | BaseException | None = None,
        run_id: str | None = None,
        created_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
        strict: bool = False,
    ) -> CaptureResult:
        """Store one run. Never raises unless ``strict``; errors come back in ``CaptureResult.error``."""
        if isinstance(execution_error, BaseException):
            execution_error = type(execution_error).__name__
        raw: dict[str, Any] = {
            "query": query,
            "agent_id": self.agent_id,
            "user_id": user_id,
            "steps": steps,
            "skills_activated": tuple(skills_activated),
            "execution_error": execution_error,
            "run_id": run_id,
            "created_at": created_at,
            "metadata": dict(metadata or {}),
        }
        return self.record(raw, strict=strict)

    def record(self, run: RunInput | Mapping[str, Any], *, strict: bool = False) -> CaptureResult:
        """Store a :class:`RunInput` (or its mapping form); see :meth:`record_run`."""
        if not self.options.workflow_memory:
            return CaptureResult("", False, error="workflow memory is disabled for this agent")
        try:
            normalized = normalize_run(run)
        except RunValidationError as exc:
            if strict:
                raise
            log.warning("run rejected: %s", exc)  # the message names a field, never a value
            return CaptureResult("", False, error=str(exc))
        assert self.engine is not None and self.config is not None
        try:
            with self.engine.begin() as conn:
                return write_run(conn, normalized, self.config, self.workflow_outcome_evaluator)
        except OperationalError as exc:
            path = self._spool(normalized)
            log.warning("database unavailable (%s); run %s spooled", type(exc).__name__, normalized.run_id)
            if strict:
                raise
            return CaptureResult(normalized.run_id or "", False, error=type(exc).__name__, spooled=path is not None)
        except Exception as exc:  # noqa: BLE001 - learning must never break the user-facing run
            if strict:
                raise
            log.error("capture failed: %s", type(exc).__name__)
            return CaptureResult(normalized.run_id or "", False, error=type(exc).__name__)

    def _spool(self, run: RunInput) -> Path | None:
        try:
            assert self.spool_dir is not None
            self.spool_dir.mkdir(parents=True, exist_ok=True)
            path = self.spool_dir / f"{run.run_id}.json"
            doc = {
                "query": run.query,
                "agent_id": run.agent_id,
                "user_id": run.user_id,
                "steps": [s.__dict__ | {"timestamp": _iso(s.timestamp)} for s in run.steps],
                "skills_activated": list(run.skills_activated),
                "execution_error": run.execution_error,
                "run_id": run.run_id,
                "created_at": _iso(run.created_at),
                "metadata": run.metadata,
            }
            path.write_text(dumps(doc), encoding="utf-8")
            return path
        except OSError:
            return None

    def replay_spool(self) -> int:
        """Store spooled runs (idempotent on run id); returns how many were stored."""
        assert self.spool_dir is not None
        stored = 0
        for path in sorted(self.spool_dir.glob("*.json")) if self.spool_dir.is_dir() else []:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if doc.get("agent_id") != self.agent_id:
                continue
            doc["created_at"] = datetime.fromisoformat(doc["created_at"]) if doc.get("created_at") else None
            result = self.record(doc)
            if result.stored:
                path.unlink()
                stored += 1
        return stored

    # -- toolbox -----------------------------------------------------------------------------------
    def register_tools(self, names: Iterable[str]) -> None:
        """Replace this agent's registered tool list (what declared skill tools must resolve against)."""
        assert self.engine is not None
        now = utcnow()
        rows = [{"agent_id": self.agent_id, "tool_name": n, "registered_at": now} for n in sorted(set(names))]
        with self.engine.begin() as conn:
            conn.execute(delete(agent_tools).where(agent_tools.c.agent_id == self.agent_id))
            if rows:
                conn.execute(insert(agent_tools), rows)


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    return value
