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

import numpy as np
from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.exc import OperationalError

from skillflow.capture.outcome import Evaluator
from skillflow.capture.record import CaptureResult, RunValidationError, normalize_run, write_run
from skillflow.injection.conversation import Conversation
from skillflow.injection.embeddings import Embedder, get_embedder
from skillflow.injection.prompting import PROVIDERS, Assembled, Provider, assemble, to_provider
from skillflow.injection.retrieval import ScoredSkill, search_skills
from skillflow.injection.selection import Selection
from skillflow.kernel.config import PromotionConfig, continual_learning_default, get_settings, load_promotion_config
from skillflow.kernel.models import RunInput, SkillStatus, Step, utcnow
from skillflow.storage.engine import cached_engine
from skillflow.storage.migrations import require_current
from skillflow.storage.schema import agent_tools, workflow_memory
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


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` hands back: the SDK request and exactly the ACTIVE skill ids rendered into it."""

    request: dict[str, Any]
    skills: list[ScoredSkill]
    skill_ids: tuple[str, ...]
    assembled: Assembled


@dataclass
class Skillflow:
    """One agent's handle on skillflow: ``record_run`` after each run, ``prepare`` before each model call."""

    agent_id: str
    database_url: str | None = None
    config: PromotionConfig | None = None
    workflow_outcome_evaluator: Evaluator | None = None
    continual_learning: bool | None = None
    workflow_memory: bool = True
    skillbox: bool | None = None  # default: on exactly when continual learning is on
    spool_dir: Path | None = None
    engine: Engine | None = None
    embedder: Embedder | None = None
    options: LearningOptions = field(init=False)

    def __post_init__(self) -> None:
        enabled = continual_learning_default() if self.continual_learning is None else self.continual_learning
        self.options = LearningOptions(
            continual_learning=enabled,
            workflow_memory=self.workflow_memory,
            skillbox=enabled if self.skillbox is None else self.skillbox,
        )
        self.config = self.config or load_promotion_config()
        if self.engine is None:
            self.engine = cached_engine(self.database_url or get_settings().database_url)
        try:  # an unmigrated or outdated database fails here, naming `skillflow migrate`
            require_current(self.engine)
        except OperationalError:
            log.warning("database unreachable at start-up: runs spool until it is back")
        if self.spool_dir is None:
            self.spool_dir = Path(".skillflow/spool")

    # -- capture -----------------------------------------------------------------------------------
    def record_run(
        self,
        query: str,
        user_id: str,
        steps: Sequence[Step | Mapping[str, Any]] | Mapping[str, Any] = (),
        *,
        skills_activated: Iterable[str] | None = (),
        execution_error: str | BaseException | None = None,
        run_id: str | None = None,
        created_at: datetime | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        conversation_id: str | None = None,
        strict: bool = False,
    ) -> CaptureResult:
        """Store one run (of ``conversation_id`` when given). Never raises unless ``strict``: any value in any
        parameter gives a :class:`CaptureResult`.

        The run is stored (``stored``), spooled while the database is unreachable (``spooled``), or refused
        with ``error`` naming the field (never its value); nothing is dropped silently. Coercions are
        documented in :func:`skillflow.capture.record.sanitize` and docs/guide/runtime.md. With
        ``strict=True`` invalid input raises :class:`RunValidationError` and a database error is re-raised
        (after spooling the run).
        """
        if isinstance(execution_error, BaseException):
            execution_error = type(execution_error).__name__
        elif isinstance(execution_error, type) and issubclass(execution_error, BaseException):
            execution_error = execution_error.__name__
        raw: dict[str, Any] = {
            "query": query,
            "agent_id": self.agent_id,
            "user_id": user_id,
            "steps": steps,
            "skills_activated": skills_activated,
            "execution_error": execution_error,
            "run_id": run_id,
            "created_at": created_at,
            "metadata": metadata,
            "conversation_id": conversation_id,
        }
        return self.record(raw, strict=strict)

    def record_conversation(
        self,
        messages: Sequence[Mapping[str, Any]],
        user_id: str,
        *,
        conversation_id: str,
        complete: bool = True,
        skills_activated: Mapping[int, Iterable[str]] | None = None,
        created_at: datetime | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        strict: bool = False,
    ) -> list[CaptureResult]:
        """Store a conversation (OpenAI chat messages) as one run per procedure; one result per segment.

        Segments (:func:`skillflow.capture.segments.segment_conversation`) are anchored on state-changing
        calls, as declared by :meth:`register_tools` or by the tool-name verb rule. Run ids are deterministic
        per (agent, user, conversation, segment), so recording the same conversation again converges;
        ``complete=False`` leaves out the open tail of a conversation still going on. ``skills_activated``
        maps a segment index to the skill ids ``prepare`` injected for that procedure. Never raises unless
        ``strict``: unreadable input gives one result with ``error`` naming the position, never a value.
        """
        from skillflow.capture.record import normalize_conversation_id
        from skillflow.capture.segments import segment_conversation, segment_run_id

        if not self.options.workflow_memory:
            return [CaptureResult("", False, error="workflow memory is disabled for this agent")]
        try:
            conversation = normalize_conversation_id(conversation_id)
            if conversation is None:
                raise RunValidationError("conversation_id must be a non-empty string")
            segments = segment_conversation(messages, self._declared_tools(), complete=complete)
            activated = dict(skills_activated or {})
        except Exception as exc:
            if strict:
                raise
            error = str(exc) if isinstance(exc, ValueError) else f"conversation could not be read: {type(exc).__name__}"
            log.warning("conversation rejected: %s", error)  # names a position or a field, never a value
            return [CaptureResult("", False, error=error)]
        results = []
        for seg in segments:
            # A non-text user_id gets no id here: normalization refuses it, naming the field.
            run_id = (
                segment_run_id(self.agent_id, user_id, conversation, seg.index) if isinstance(user_id, str) else None
            )
            raw = {
                "query": seg.query,
                "agent_id": self.agent_id,
                "user_id": user_id,
                "steps": seg.steps,
                "skills_activated": activated.get(seg.index, ()),
                "run_id": run_id,
                "created_at": created_at,
                "metadata": metadata,
                "conversation_id": conversation,
                "segment_index": seg.index,
            }
            results.append(self.record(raw, strict=strict))
        return results

    def _declared_tools(self) -> dict[str, bool] | None:
        """The agent's declared state-changing flags (None while the database is unreachable: the verb rule)."""
        from skillflow.storage.skills import declared_state_changes

        assert self.engine is not None
        try:
            with self.engine.connect() as conn:
                return declared_state_changes(conn, self.agent_id)
        except OperationalError:
            return None

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
        except Exception as exc:  # learning must never break the user-facing run
            if strict:
                raise
            log.error("capture failed: %s", type(exc).__name__)
            return CaptureResult(normalized.run_id or "", False, error=f"capture failed: {type(exc).__name__}")

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
                "conversation_id": run.conversation_id,
                "segment_index": run.segment_index,
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

    # -- injection ---------------------------------------------------------------------------------
    def _embedder(self) -> Embedder:
        if self.embedder is None:
            self.embedder = get_embedder(get_settings().embedder)
        return self.embedder

    def retrieve_skills(self, query: str, user_id: str) -> list[ScoredSkill]:
        """ACTIVE skills of exactly (agent_id, user_id) scoring >= ``retrieval_min_similarity``, best first."""
        assert self.engine is not None and self.config is not None
        if self.config.max_skills_in_context <= 0 or not query.strip():
            return []
        embedder = self._embedder()
        vec = embedder.embed([query])[0]
        with self.engine.connect() as conn:
            return search_skills(
                conn,
                vec,
                embedder.model_id,
                self.agent_id,
                user_id,
                SkillStatus.ACTIVE,
                k=self.config.max_skills_in_context,
                min_score=self.config.retrieval_min_similarity,
            )

    def select_skills(self, query: str, user_id: str, conversation: Conversation | None = None) -> Selection:
        """The skills ``prepare`` would render for ``query`` after ``conversation``, and why."""
        from skillflow.injection.selection import select_skills
        from skillflow.kernel.state import changes_state
        from skillflow.promotion.redact import redact_query

        assert self.engine is not None and self.config is not None
        declared = self._declared_tools() if conversation is not None and conversation.calls else None
        return select_skills(
            self.engine,
            self._embedder(),
            self.agent_id,
            user_id,
            query,
            self.config,
            conversation=conversation,
            form=redact_query,
            changes_state=lambda tool: changes_state(tool, declared or None),
        )

    def prepare(
        self,
        query: str,
        user_id: str,
        *,
        conversation: Conversation | None = None,
        history: Sequence[Mapping[str, Any]] = (),
        memories: Sequence[Any] = (),
        workflows: Sequence[Any] = (),
        provider: Provider | str = "openai",
        system_prompt: str | None = None,
    ) -> Prepared:
        """Assemble the request for ``provider``; pass ``skill_ids`` to ``record_run(skills_activated=...)``.

        Call it before every model call with the ``conversation`` so far (earlier user messages and the
        tool calls already made, e.g. ``Conversation.from_messages(messages)``): the tenant's fitted rule
        picks at most one skill whose procedure continues those calls, or none (docs/guide/runtime.md,
        "Which skill, or none"). Workflow memory is never retrieved here. A disabled skillbox or a
        retrieval failure yields a request without skills; it never raises into the agent.
        """
        if provider not in PROVIDERS:
            raise ValueError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
        skills: list[ScoredSkill] = []
        if self.options.skillbox:
            try:
                skills = self.select_skills(query, user_id, conversation).skills
            except Exception as exc:  # noqa: BLE001 - injection is best-effort; the agent must still answer
                log.warning("skill retrieval failed (%s); preparing without skills", type(exc).__name__)
        assembled = assemble(
            query, skills=skills, history=history, memories=memories, workflows=workflows, system_prompt=system_prompt
        )
        log.debug(
            "prepared request: %d skill(s), %d workflow item(s) dropped",
            len(assembled.skill_ids),
            assembled.dropped_workflows,
        )
        return Prepared(to_provider(assembled, provider), list(assembled.skills), assembled.skill_ids, assembled)

    def retrieve_workflows_by_query(
        self, query: str, user_id: str, k: int = 5, *, exclude_promoted: bool = True, candidates: int = 200
    ) -> list[dict[str, Any]]:
        """Audit API: this tenant's recent runs most similar to ``query`` (never injected automatically).

        Runs stamped with a promoted skill are excluded unless ``exclude_promoted=False``; similarity is
        computed over the newest ``candidates`` runs' queries with the configured embedder.
        """
        assert self.engine is not None
        cols = [
            workflow_memory.c.id,
            workflow_memory.c.query,
            workflow_memory.c.canonical_hash,
            workflow_memory.c.tool_sequence,
            workflow_memory.c.outcome,
            workflow_memory.c.promoted_skill_id,
            workflow_memory.c.created_at,
        ]
        stmt = select(*cols).where(workflow_memory.c.agent_id == self.agent_id, workflow_memory.c.user_id == user_id)
        if exclude_promoted:
            stmt = stmt.where(workflow_memory.c.promoted_skill_id.is_(None))
        stmt = stmt.order_by(workflow_memory.c.created_at.desc(), workflow_memory.c.id).limit(max(1, candidates))
        with self.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(stmt).mappings()]
        if not rows or k <= 0:
            return []
        embedder = self._embedder()
        matrix = embedder.embed([query] + [r["query"] or "" for r in rows])
        scores = matrix[1:] @ matrix[0]
        order = np.argsort(-scores, kind="stable")[:k]
        return [{**rows[i], "score": round(float(scores[i]), 6)} for i in order]

    # -- toolbox -----------------------------------------------------------------------------------
    def register_tools(self, names: Iterable[str], state_changing: Mapping[str, bool] | None = None) -> None:
        """Replace this agent's registered tool list (what declared skill tools must resolve against).

        ``state_changing`` declares, per tool, whether it changes state (what segments a conversation,
        docs/guide/runtime.md); a tool left out follows the tool-name verb rule. Naming a tool that is not
        registered is a ``ValueError``.
        """
        assert self.engine is not None
        now = utcnow()
        tools = sorted(set(names))
        declared = dict(state_changing or {})
        unknown = sorted(set(declared) - set(tools))
        if unknown:
            raise ValueError(f"state_changing names {len(unknown)} tool(s) that are not registered")
        rows = [
            {
                "agent_id": self.agent_id,
                "tool_name": n,
                "registered_at": now,
                "changes_state": None if n not in declared else int(bool(declared[n])),
            }
            for n in tools
        ]
        with self.engine.begin() as conn:
            conn.execute(delete(agent_tools).where(agent_tools.c.agent_id == self.agent_id))
            if rows:
                conn.execute(insert(agent_tools), rows)


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    return value
