"""The thin runtime agents import: capture runs and (see ``prepare``) inject reviewed skills.

Imports neither prefect nor great_expectations (a test proves it). Learning never breaks the agent:
``record_run`` returns a :class:`CaptureResult` instead of raising, and a run that cannot reach the
database is spooled to disk and replayed later, so nothing is lost.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from skillflow.capture import spool
from skillflow.capture.outcome import CONVERSATION_OUTCOME, ConversationOutcome, Evaluator, check_evaluator
from skillflow.capture.record import (
    CaptureResult,
    RunValidationError,
    normalize_run,
    normalize_tenant,
    tool_name,
    write_run,
)
from skillflow.capture.segments import RUN_PREFIX as CONVERSATION_RUN_PREFIX
from skillflow.capture.segments import segment_run_id
from skillflow.injection.conversation import Conversation
from skillflow.injection.embeddings import Embedder, get_embedder
from skillflow.injection.guard import MAX_RETRIEVAL_CHARS, PrepareArgs
from skillflow.injection.prompting import PROVIDERS, Assembled, Provider, assemble, to_provider
from skillflow.injection.retrieval import ScoredSkill, search_skills
from skillflow.injection.selection import Selection
from skillflow.kernel.config import PromotionConfig, continual_learning_default, get_settings, load_promotion_config
from skillflow.kernel.errors import InputError, WeightsNotInstalled
from skillflow.kernel.models import RunInput, SkillStatus, Step, WorkflowOutcome, utcnow
from skillflow.storage.engine import Budget, Deadline, capture_engine, deadline, set_statement_timeout, stale
from skillflow.storage.migrations import SchemaNewer, SchemaOutdated, require_current
from skillflow.storage.schema import workflow_memory

log = logging.getLogger("skillflow.runtime")

# The database did not answer within the bound: a statement aborted by the deadline (OperationalError), or no
# pool slot, or no time left, within it (sqlalchemy.exc.TimeoutError). Either spools the run and opens the breaker
# (docs/guide/runtime.md, "The spool, and when the database does not answer").
NOT_ANSWERING = (OperationalError, PoolTimeout)
T = TypeVar("T")


def _flag(value: Any) -> bool | None:
    """A caller's boolean flag: a bool (numpy's too) or the integer 0/1; ``None`` for anything else. Never calls
    the value's own ``__bool__``/``__eq__``."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if type(value) is int and value in (0, 1):
        return bool(value)
    return None


def _segment_skills(value: Any) -> dict[int, Any]:
    """``record_conversation``'s ``skills_activated``: a mapping of segment indexes (int) to skill ids, each id
    list read later as ``record_run``'s is; ``RunValidationError`` naming the parameter for anything else (the
    ids alone, ``record_run``'s form, say nothing of which procedure they were injected for)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RunValidationError("skills_activated must map a segment index to the skill ids injected for it")
    out: dict[int, Any] = {}
    for key, ids in value.items():
        if type(key) is not int:  # never the key's own __eq__/__hash__: it is looked up by the segment's index
            raise RunValidationError("skills_activated keys must be segment indexes (int)")
        if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
            raise RunValidationError("skills_activated values must be iterables of skill ids")
        out[key] = ids
    return out


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
    error: str | None = None  # why the turn degraded to a request without skills (names parameters, not values)
    reason: str = ""  # why the rule chose these skills or none (``select_skills``' fixed phrase); "" if not asked


class DatabaseDown(RuntimeError):
    """The database failed a call less than ``capture_breaker_seconds`` ago: the runtime does not wait on it
    again until then (docs/guide/runtime.md, "The spool, and when the database does not answer")."""


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
    _timeout: float = field(init=False, default=2.0, repr=False)
    _breaker: float = field(init=False, default=30.0, repr=False)
    _down_until: float = field(init=False, default=0.0, repr=False)  # time.monotonic(): the breaker is open until
    _schema_unchecked: bool = field(init=False, default=False, repr=False)  # the start-up check met an outage
    _declared: dict[str, bool] | None = field(init=False, default=None, repr=False)  # the last flags read
    _unwritten_tools: tuple[str, list[dict[str, Any]]] | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        check_evaluator(self.workflow_outcome_evaluator)  # setup time: an async one would never be awaited
        enabled = continual_learning_default() if self.continual_learning is None else self.continual_learning
        self.options = LearningOptions(
            continual_learning=enabled,
            workflow_memory=self.workflow_memory,
            skillbox=enabled if self.skillbox is None else self.skillbox,
        )
        if self.spool_dir is None:
            self.spool_dir = Path(".skillflow/spool")
        elif isinstance(self.spool_dir, str | os.PathLike):
            self.spool_dir = Path(self.spool_dir)  # a str spooled nothing: the run of an outage was lost
        else:
            raise TypeError("spool_dir must be a path (str or os.PathLike)")
        self.spool_dir = spool.absolute_folder(self.spool_dir)  # once: a later chdir moves no spooled run
        self.config = self.config or load_promotion_config()
        settings = get_settings()
        self._timeout = settings.capture_timeout_seconds
        self._breaker = settings.capture_breaker_seconds
        if self.engine is None:
            url = self.database_url or settings.database_url
            self.engine = capture_engine(url, settings.capture_connect_timeout_seconds, self._timeout)
        try:  # an unmigrated or outdated database fails here, naming `skillflow migrate`
            with deadline(self.engine, self._timeout):
                require_current(self.engine)
        except SchemaNewer as exc:  # capture and prepare go on (learning never stops the agent); the pipeline refuses
            log.warning("%s; capture and prepare go on meanwhile", exc)
        except NOT_ANSWERING:
            log.warning("database unreachable at start-up: runs spool until it is back")
            self._schema_unchecked = True
            self._went_down()

    def _check_schema(self) -> None:
        """The start-up schema check an outage put off, made at the first contact after it: a database still
        behind (``skillflow migrate`` not run yet) raises :class:`DatabaseDown`, so the run spools and the replay
        after the migration stores it (before, each run failed on a missing column, and on PostgreSQL was lost)."""
        assert self.engine is not None
        try:
            with deadline(self.engine, self._timeout):
                require_current(self.engine)
        except SchemaNewer as exc:
            log.warning("%s; capture and prepare go on meanwhile", exc)
        except SchemaOutdated as exc:
            log.warning("%s; runs spool until then", exc)
            raise DatabaseDown("the database is behind this skillflow: runs spool until it is migrated") from exc
        self._schema_unchecked = False

    # -- the database breaker ----------------------------------------------------------------------
    def _down(self) -> bool:
        """Whether the breaker is open (the database failed less than its window ago)."""
        return time.monotonic() < self._down_until

    def _check_up(self) -> None:
        if self._down():
            raise DatabaseDown("the database failed recently: not waited on until the breaker's window ends")

    def _went_down(self) -> None:
        if self._breaker <= 0:
            return
        if not self._down():
            log.warning(
                "database unavailable: for %.0f s runs spool and prepare goes without skills at once", self._breaker
            )
        self._down_until = time.monotonic() + self._breaker

    def _came_up(self) -> None:
        self._down_until = 0.0

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
        outcome: bool | str | WorkflowOutcome | None = None,
        strict: bool = False,
    ) -> list[CaptureResult]:
        """Store a conversation as one run per procedure; one result per segment.

        ``messages`` are OpenAI chat messages or Anthropic Messages API ones (``tool_use`` / ``tool_result``
        content blocks), which store the same runs; tool use in a form neither has is refused, naming the position.

        Segments (:func:`skillflow.capture.segments.segment_conversation`) are anchored on state-changing
        calls, as declared by :meth:`register_tools` or by the tool-name verb rule. Run ids are deterministic
        per (agent, user, conversation, segment), so recording the same conversation again converges;
        ``complete=False`` leaves out the open tail of a conversation still going on. ``skills_activated``
        maps a segment index to the skill ids ``prepare`` injected for that procedure. Never raises unless
        ``strict``: unreadable input gives one result with ``error`` naming the position, never a value. One call
        reads at most ``MAX_MESSAGES`` (5 000) messages: of a longer conversation the procedures closed within them
        are stored and one more result's ``error`` names the rest (``strict`` raises it after storing them).

        The conversation's business outcome is each procedure's (a failed execution stays a failure):
        ``outcome`` when given, else the ``workflow_outcome_evaluator`` run once over the whole conversation
        (:func:`skillflow.capture.conversation.conversation_outcome`). With an outcome to wait for,
        ``complete=False`` stores nothing yet: the rest of the conversation may still change it.
        """
        from skillflow.capture.conversation import conversation_outcome
        from skillflow.capture.outcome import given_outcome
        from skillflow.capture.record import normalize_conversation_id
        from skillflow.capture.segments import ConversationError, segment_conversation, too_long

        if not self.options.workflow_memory:
            return [CaptureResult("", False, error="workflow memory is disabled for this agent")]
        strict = _flag(strict) is True
        try:
            whole = _flag(complete)
            if whole is None:
                raise RunValidationError("complete must be True or False")
            agent = normalize_tenant("agent_id", self.agent_id)
            user = normalize_tenant("user_id", user_id)
            conversation = normalize_conversation_id(conversation_id)
            if conversation is None:
                raise RunValidationError("conversation_id must be a non-empty string")
            given = given_outcome(outcome)
            segments = segment_conversation(messages, self._declared_tools(), complete=whole)
            unread = too_long(messages)  # past the messages one call reads: named below, never dropped silently
            activated = _segment_skills(skills_activated)
        except Exception as exc:
            if strict:
                raise
            # Only the project's own refusals are quoted: another exception's text may carry a caller's value.
            error = str(exc) if isinstance(exc, InputError) else f"conversation could not be read: {type(exc).__name__}"
            log.warning("conversation rejected: %s", error)  # names a position or a field, never a value
            return [CaptureResult("", False, error=error)]
        if not whole and (given is not None or self.workflow_outcome_evaluator is not None):
            return []
        assert self.config is not None
        ids, evaluator = (agent, user, conversation), self.workflow_outcome_evaluator
        verdict = given or conversation_outcome(ids, messages, segments, metadata, evaluator, self.config)
        results = []
        for seg in segments:
            raw = {
                "query": seg.query,
                "agent_id": agent,
                "user_id": user,
                "steps": seg.steps,
                "skills_activated": activated.get(seg.index, ()),
                "run_id": segment_run_id(agent, user, conversation, seg.index),
                "created_at": created_at,
                "metadata": metadata,
                "conversation_id": conversation,
                "segment_index": seg.index,
            }
            results.append(self.record(raw, strict=strict, conversation=verdict))
        if unread is not None:
            log.warning("conversation cut: %s", unread)
            if strict:
                raise ConversationError(unread)
            results.append(CaptureResult("", False, error=unread))
        return results

    def _declared_tools(self, budget: Budget | None = None) -> dict[str, bool] | None:
        """The agent's declared state-changing flags; while the database is unreachable the last ones this handle
        read or registered (None before any: the verb rule). ``budget``: the bound shared with the caller's other
        units (``prepare``'s skill read); by default the capture bound."""
        from skillflow.storage.skills import declared_state_changes

        assert self.engine is not None
        if self._down() or not self._write_tools(budget=budget):  # a registration not written yet is what was declared
            return self._declared
        try:
            self._declared = self._unit(lambda conn, _: declared_state_changes(conn, self.agent_id), budget)
        except NOT_ANSWERING:
            self._went_down()
        return self._declared

    def _bound(self, budget: Budget | None = None) -> AbstractContextManager[Deadline]:
        """One unit of database work under the capture bound, or under what ``budget`` has left."""
        assert self.engine is not None
        return deadline(self.engine, self._timeout) if budget is None else budget.unit()

    def _unit(
        self, work: Callable[[Connection, Deadline], T], budget: Budget | None = None, *, transaction: bool = False
    ) -> T:
        """``work`` on a connection under :meth:`_bound` (in a transaction when ``transaction``), run once more
        on a new connection when the pooled one was stale: the server restarted, failed over or cut it while
        idle, so SQLAlchemy invalidated the pool (docs/RELIABILITY.md). A bound that fired is not retried."""
        assert self.engine is not None
        for attempt in (1, 2):
            with self._bound(budget) as bound:
                try:
                    with self.engine.begin() if transaction else self.engine.connect() as conn:
                        return work(conn, bound)
                except OperationalError as exc:
                    if attempt == 2 or not stale(exc, bound):
                        raise
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _own(self, run: RunInput) -> None:
        """Refuse a run this handle may not write: another agent's, or a conversation's run id (``conv-``) that is
        not the id :meth:`record_conversation` gives this run's own conversation and position (another caller would
        take a procedure's id before its conversation is recorded, which then never stores it)."""
        if run.agent_id != normalize_tenant("agent_id", self.agent_id):  # plain str on both sides
            raise RunValidationError("agent_id: this handle records the runs of its own agent only")
        if run.run_id is not None and str.startswith(run.run_id, CONVERSATION_RUN_PREFIX):
            own = (
                run.conversation_id is not None
                and run.segment_index is not None
                and run.run_id == segment_run_id(run.agent_id, run.user_id, run.conversation_id, run.segment_index)
            )
            if not own:
                raise RunValidationError(
                    f"run_id: the prefix {CONVERSATION_RUN_PREFIX!r} is reserved for record_conversation"
                )

    def record(
        self,
        run: RunInput | Mapping[str, Any],
        *,
        strict: bool = False,
        conversation: ConversationOutcome | None = None,
    ) -> CaptureResult:
        """Store a :class:`RunInput` (or its mapping form); see :meth:`record_run`.

        ``conversation`` is the outcome of the conversation the run is a procedure of (it replaces the
        evaluator, :func:`skillflow.capture.outcome.apply_conversation`; a spooled run keeps it)."""
        if not self.options.workflow_memory:
            return CaptureResult("", False, error="workflow memory is disabled for this agent")
        strict = _flag(strict) is True
        try:
            normalized = normalize_run(run)
            self._own(normalized)
        except RunValidationError as exc:
            if strict:
                raise
            log.warning("run rejected: %s", exc)  # the message names a field, never a value
            return CaptureResult("", False, error=str(exc))
        try:
            if not strict:  # a strict caller gets the database's own error
                self._check_up()
            if self._schema_unchecked:
                self._check_schema()
            if not self._write_tools() and not strict:
                self._check_up()  # the registration just met the outage: the run spools without a second wait
            result = self._store(normalized, conversation)
        except DatabaseDown as exc:
            path = self._spool(normalized, conversation)
            if path is not None:  # a run that could not be spooled was logged as such by _spool
                log.debug("database down; run %s spooled", normalized.run_id)
            return CaptureResult(normalized.run_id or "", False, error=type(exc).__name__, spooled=path is not None)
        except NOT_ANSWERING as exc:  # a statement aborted, or no pool slot, within the bound
            self._went_down()
            path = self._spool(normalized, conversation)
            log.warning("database unavailable (%s); run %s spooled", type(exc).__name__, normalized.run_id)
            if strict:
                raise
            return CaptureResult(normalized.run_id or "", False, error=type(exc).__name__, spooled=path is not None)
        except Exception as exc:  # learning must never break the user-facing run
            if strict:
                raise
            log.error("capture failed: %s", type(exc).__name__)
            return CaptureResult(normalized.run_id or "", False, error=f"capture failed: {type(exc).__name__}")
        self._came_up()
        return result

    def _write(self, run: RunInput, conversation: ConversationOutcome | None = None) -> CaptureResult:
        """One bounded write (docs/RELIABILITY.md): a stalled database raises ``OperationalError`` after the
        capture timeout; a stale pooled connection (the server restarted) is retried once on a new one."""
        config = self.config
        assert config is not None

        def work(conn: Connection, _: Deadline) -> CaptureResult:
            set_statement_timeout(conn, self._timeout)
            return write_run(conn, run, config, self.workflow_outcome_evaluator, conversation)

        return self._unit(work, transaction=True)

    def _spool(self, run: RunInput, conversation: ConversationOutcome | None = None) -> Path | None:
        assert self.spool_dir is not None
        extra = {CONVERSATION_OUTCOME: conversation.as_dict()} if conversation is not None else None
        try:
            return spool.write_spooled(self.spool_dir, run, extra)
        except Exception as exc:  # noqa: BLE001 - a full disk must not break the agent; the result says so
            log.error("run %s could not be spooled: %s", run.run_id, type(exc).__name__)
            return None

    def replay_spool(self) -> spool.ReplayResult:
        """Store this agent's spooled runs (idempotent on run id); returns how many runs this call stored (an
        ``int``, :class:`skillflow.capture.spool.ReplayResult`, with the other files counted beside).

        A run whose row is already there is not counted: another replay of the same spool (another agent
        process) stored it, or a replay killed after its write and before it removed the file. Its file is
        removed all the same. So the counts of concurrent replays sum to the runs they stored, and a replay
        of a spool whose runs are all stored returns 0 (docs/RELIABILITY.md).

        Never raises on a spool file: one that cannot be read, or whose run is refused, is moved to
        ``bad/`` in the spool folder and the replay goes on. While the database is still unreachable the
        replay stops and keeps the remaining files for the next one. It tries the database even while the
        breaker is open (an explicit call), and its result opens or closes the breaker.

        Runs spooled under one run id are replayed in the order they were spooled, as a direct write of the same
        calls would have stored them: the first is stored, a later one of the same user is ``already_stored``
        (counted as such, its file removed) and one of another user is refused (quarantined, logged). A file
        kept for the next replay holds back the later files of its run id. Temporary files of spool writes cut
        short (a process killed while writing) are removed once certainly abandoned (docs/guide/runtime.md,
        "The spool, and when the database does not answer").
        """
        assert self.spool_dir is not None
        stored = already = quarantined = 0
        removed = spool.remove_abandoned(self.spool_dir)
        if removed:
            log.warning(
                "spool replay: removed %d abandoned temporary file(s) of spool writes cut short (older than %.0f s)",
                removed,
                spool.ABANDONED_AFTER_SECONDS,
            )
        if self._schema_unchecked:
            try:
                self._check_schema()
            except (DatabaseDown, *NOT_ANSWERING):
                log.warning(
                    "spool replay: the database is not ready; %d run(s) kept", len(spool.pending(self.spool_dir))
                )
                return spool.ReplayResult(0, removed_temporary=removed)
        self._write_tools(always=True)
        held: set[str] = set()  # run ids with a file kept for the next replay: their later files wait behind it
        for path in spool.pending(self.spool_dir):
            if spool.group(path) in held:
                continue
            try:
                doc = spool.read_spooled(path)
            except FileNotFoundError:  # another process replayed it meanwhile
                continue
            except (OSError, ValueError) as exc:
                quarantined += spool.quarantine(path) is not None
                log.warning("spool file %s quarantined: %s", path.name, exc)
                continue
            if doc.get("agent_id") != self.agent_id:
                continue
            try:
                run = normalize_run(doc)
                result = self._store(run, ConversationOutcome.from_dict(doc.get(CONVERSATION_OUTCOME)))
            except RunValidationError as exc:
                quarantined += spool.quarantine(path) is not None
                log.warning("spool file %s quarantined: %s", path.name, exc)
                continue
            except NOT_ANSWERING:
                self._went_down()
                log.warning("database still unavailable: %d spooled run(s) kept", len(spool.pending(self.spool_dir)))
                break
            except Exception as exc:  # noqa: BLE001 - kept for the next replay (a retry converges on run id)
                held.add(spool.group(path))
                log.error("spool file %s not replayed: %s", path.name, type(exc).__name__)
                continue
            self._came_up()
            if result.stored:
                path.unlink(missing_ok=True)
                stored += not result.already_stored
                already += result.already_stored
            else:  # refused for good (a run id of another tenant): keep it for inspection, never retry
                quarantined += spool.quarantine(path) is not None
                log.warning("spool file %s quarantined: %s", path.name, result.error)
        if quarantined:
            log.warning(
                "spool replay: %d stored, %d already stored, %d quarantined in %s/",
                stored,
                already,
                quarantined,
                spool.QUARANTINE,
            )
        elif already:
            log.info("spool replay: %d stored, %d already stored (their run ids' rows were there)", stored, already)
        return spool.ReplayResult(stored, already_stored=already, quarantined=quarantined, removed_temporary=removed)

    def _store(self, run: RunInput, conversation: ConversationOutcome | None) -> CaptureResult:
        """:meth:`_write`, converging with a concurrent write of the same run id (another thread or process
        recording the same conversation, another replay of the same spool): that write's insert between this
        one's read and its insert makes this insert fail (``IntegrityError``); written again, the run finds
        that row (``already_stored``)."""
        try:
            return self._write(run, conversation)
        except IntegrityError:
            return self._write(run, conversation)

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
        """The skills ``prepare`` would render for ``query`` after ``conversation``, and why.

        Raises :class:`DatabaseDown` while the database breaker is open (``prepare`` then goes without skills)."""
        from skillflow.injection.selection import select_skills
        from skillflow.kernel.state import changes_state
        from skillflow.promotion.redact import redact_query

        assert self.engine is not None and self.config is not None
        engine = self.engine
        self._check_up()
        # One bound for the whole read, shared by its units (docs/guide/runtime.md, "When prepare degrades"): a
        # database that answers each unit in time but slowly costs the model call one bound, not one per unit.
        budget = Budget(engine, self._timeout)
        declared = self._declared_tools(budget) if conversation is not None and conversation.calls else None
        self._check_up()  # the declared flags' read may have found the database down
        for attempt in (1, 2):
            try:
                selection = select_skills(
                    engine,
                    self._embedder(),
                    self.agent_id,
                    user_id,
                    query,
                    self.config,
                    conversation=conversation,
                    form=redact_query,
                    changes_state=lambda tool: changes_state(tool, declared or None),
                    bound=budget.unit,
                )
                break
            except NOT_ANSWERING as exc:
                if attempt == 1 and stale(exc, budget):  # a connection the server closed: once more, same bound
                    continue
                self._went_down()
                raise
        self._came_up()
        return selection

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
        "Which skill, or none"). Workflow memory is never retrieved here. A disabled skillbox yields a request
        without skills; so does a retrieval failure, named in ``error``. It never raises into the agent: an argument it
        cannot use (a wrong type, an unknown provider) degrades the turn to a request without skills, the
        reason in ``error``; the request is always strict JSON (docs/guide/runtime.md, "When prepare degrades").
        """
        try:
            args = PrepareArgs.read(
                query,
                user_id,
                providers=PROVIDERS,
                provider=provider,
                system_prompt=system_prompt,
                conversation=conversation,
                history=history,
                memories=memories,
                workflows=workflows,
            )
        except Exception as exc:  # noqa: BLE001 - PrepareArgs.read never raises by design; this holds the promise
            args = PrepareArgs.unreadable(PROVIDERS, exc)
        problems = args.problems
        skills: list[ScoredSkill] = []
        reason = ""
        unread: list[str] = []  # the skills could not be read: the turn degrades, the reason names the error class
        if self.options.skillbox and not problems:
            try:
                selection = self.select_skills(args.query[:MAX_RETRIEVAL_CHARS], args.user_id, args.conversation)
                skills, reason = selection.skills, selection.reason
            except Exception as exc:  # noqa: BLE001 - injection is best-effort; the agent must still answer
                # While the breaker is open the one warning was logged when it opened: no line per model call.
                level = logging.DEBUG if isinstance(exc, DatabaseDown) else logging.WARNING
                # The class names the error; a missing model's own message (no caller's value) says how to install it.
                why = f"{type(exc).__name__}: {exc}" if isinstance(exc, WeightsNotInstalled) else type(exc).__name__
                log.log(level, "skill retrieval failed (%s); preparing without skills", why)
                unread.append(f"skills could not be read ({why})")
        try:
            assembled = assemble(
                args.query,
                skills=skills,
                history=args.history,
                memories=args.memories,
                workflows=args.workflows,
                system_prompt=args.system_prompt,
            )
            request = to_provider(assembled, args.provider)
            json.dumps(request, allow_nan=False)
        except Exception as exc:  # noqa: BLE001 - the agent still gets its query, without anything learned
            problems.append(f"request could not be assembled ({type(exc).__name__})")
            reason = ""  # no skill reached the request, whatever the rule chose
            assembled = assemble(args.query, skills=[], system_prompt=args.system_prompt)
            request = to_provider(assembled, args.provider)
        if problems:
            log.warning("prepare degraded: %d argument problem(s); no skill injected", len(problems))
        log.debug(
            "prepared request: %d skill(s), %d workflow item(s) dropped",
            len(assembled.skill_ids),
            assembled.dropped_workflows,
        )
        return Prepared(
            request,
            list(assembled.skills),
            assembled.skill_ids,
            assembled,
            error="; ".join(problems + unread) or None,
            reason=reason,
        )

    def skill_tool(self, tool_name: str, arguments: Mapping[str, Any] | str | None, user_id: str) -> Any:
        """Answer a model's call of a learned-skill tool (``list_skills`` / ``read_skill``) for this agent and
        ``user_id``: :func:`skillflow.injection.skill_tools.dispatch` with this handle's bound and breaker.

        Never raises into the agent for the call's arguments or a database problem: a missing skill, arguments it
        cannot use, and skills that cannot be read are ``{"error": ...}`` answers for the model, the latter
        ``skills could not be read (<ErrorClass>)`` as in ``Prepared.error``. The read is bounded like
        ``prepare``'s (``SKILLFLOW_CAPTURE_TIMEOUT_SECONDS``); a database that did not answer opens the breaker,
        and while it is open the answer is ``skills could not be read (DatabaseDown)`` at once, without a
        connection attempt (docs/guide/runtime.md, "Learned-skill tools"). Only a ``tool_name`` that is not a
        skill tool raises ``ValueError``."""
        from skillflow.injection.skill_tools import SkillNotAvailable, SkillsUnreadable, answer, tool_request

        assert self.engine is not None
        request = tool_request(tool_name, arguments)
        if isinstance(request, dict):
            return request
        if self._down():
            return {"error": str(SkillsUnreadable(DatabaseDown.__name__))}
        try:
            result = answer(request, self.engine, self.agent_id, user_id, self._timeout)
        except SkillsUnreadable as exc:
            if isinstance(exc.__cause__, NOT_ANSWERING):
                self._went_down()
            log.warning("skill tool %s could not read the skills (%s)", request[0], exc.error_class)
            return {"error": str(exc)}
        except SkillNotAvailable as exc:
            result = {"error": str(exc)}
        self._came_up()
        return result

    def retrieve_workflows_by_query(
        self, query: str, user_id: str, k: int = 5, *, exclude_promoted: bool = True, candidates: int = 200
    ) -> list[dict[str, Any]]:
        """Audit API: this tenant's recent runs most similar to ``query`` (never injected automatically).

        Runs stamped with a promoted skill are excluded unless ``exclude_promoted=False``; similarity is
        computed over the newest ``candidates`` runs' queries with the configured embedder. A ``query`` that is not
        text is a ``TypeError``, a ``user_id`` capture refuses a ``ValueError``.
        """
        assert self.engine is not None
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, not {type(query).__name__}")
        query = str.__str__(query)
        user_id = normalize_tenant("user_id", user_id)
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
    def register_tools(
        self,
        names: Iterable[str],
        state_changing: Mapping[str, bool] | None = None,
        hands_off: Iterable[str] = (),
    ) -> bool:
        """Replace this agent's registered tool list (what declared skill tools must resolve against).

        ``state_changing`` declares, per tool, whether it changes state (what segments a conversation,
        docs/guide/runtime.md); a tool left out follows the tool-name verb rule. ``hands_off`` names the tools
        that hand the conversation off (to a human, another agent): such a tool changes state, and a procedure
        that calls one is not promoted (the ``handoff`` gate, docs/guide/promotion.md). Naming a tool that is
        not registered, declaring a hand-off read-only, a name capture refuses in a step's ``tool`` (not a non-empty
        string of at most 255 characters, or one with a control character; named by its position), or an
        ``agent_id`` capture refuses is a ``ValueError``, and nothing is kept. A registration the database refuses
        otherwise is dropped (logged), never written first by every later capture.

        Returns whether the registration was written. While the database is unreachable (within the capture
        bounds, as a capture) it is kept instead: this handle segments with the flags at once, and its next
        capture, declared-tools read or ``replay_spool`` that reaches the database writes it
        (docs/guide/runtime.md, "The spool, and when the database does not answer"). A process that ends
        before then loses it; an agent registers its tools at every start.
        """
        assert self.engine is not None
        agent = normalize_tenant("agent_id", self.agent_id)  # as capture reads it: two tenants never share a key
        now = utcnow()
        # Each name as capture reads a step's tool (so a run's calls find it), refused naming its position.
        given = [names] if isinstance(names, str) else list(names)  # one name is one tool
        tools = sorted({tool_name(n, f"names[{i}]") for i, n in enumerate(given)})
        declared = {tool_name(n, "a state_changing key"): flag for n, flag in dict(state_changing or {}).items()}
        named = [hands_off] if isinstance(hands_off, str) else list(hands_off)  # one name is one tool
        handoffs = {tool_name(n, f"hands_off[{i}]") for i, n in enumerate(named)}
        unknown = sorted((set(declared) | handoffs) - set(tools))
        if unknown:
            raise ValueError(f"state_changing or hands_off names {len(unknown)} tool(s) that are not registered")
        if any(not declared.get(n, True) for n in handoffs):
            raise ValueError("a hand-off tool changes state: it cannot be declared read-only")
        declared.update({n: True for n in handoffs})
        rows = [
            {
                "agent_id": agent,
                "tool_name": n,
                "registered_at": now,
                "changes_state": None if n not in declared else int(bool(declared[n])),
                "hands_off": int(n in handoffs),
            }
            for n in tools
        ]
        self._declared = {n: bool(f) for n, f in declared.items()}  # what declared_state_changes now reads
        self._unwritten_tools = (agent, rows)
        return self._write_tools()

    def _write_tools(self, *, always: bool = False, budget: Budget | None = None) -> bool:
        """Write the registration :meth:`register_tools` kept; True when none is left unwritten.

        Bounded like a capture (or by ``budget``, shared with the caller's other units); while the breaker is open
        it is not tried unless ``always``."""
        if self._unwritten_tools is None:
            return True
        if self._down() and not always:
            return False
        from skillflow.storage.skills import replace_tools

        assert self.engine is not None
        agent, rows = self._unwritten_tools

        def work(conn: Connection, bound: Deadline) -> None:
            set_statement_timeout(conn, bound.remaining())
            replace_tools(conn, agent, rows)

        for attempt in (1, 2, 3):  # another process inserted a tool first: written again, it finds the row
            try:
                self._unit(work, budget, transaction=True)
                break
            except IntegrityError:
                if attempt == 3:
                    log.error("tool registration not written: IntegrityError; kept for the next capture")
                    return False
            except NOT_ANSWERING as exc:
                self._went_down()
                log.warning(
                    "database unavailable (%s): the tool registration is kept until it is back", type(exc).__name__
                )
                return False
            except Exception as exc:  # noqa: BLE001 - refused, not unreachable: never written first by every capture
                self._unwritten_tools = None
                log.error("tool registration refused by the database (%s): dropped", type(exc).__name__)
                return False
        self._unwritten_tools = None
        self._came_up()
        return True
