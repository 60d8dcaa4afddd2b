"""Learned-skill tools for agents: ``list_skills`` and ``read_skill``, with OpenAI/Anthropic tool schemas.

Both are tenant-scoped (exactly one agent and user) and, by default, see ACTIVE skills only: a SHADOW,
demoted or retired skill is never offered to a model.

A model calls them in the middle of the agent's run, so they are bounded like a capture: each read runs under
``SKILLFLOW_CAPTURE_TIMEOUT_SECONDS`` (a PostgreSQL statement timeout and the watchdog of
:func:`skillflow.storage.engine.deadline`), and a database that is down, stalls or fails is
:class:`SkillsUnreadable` (a :class:`SkillNotAvailable`, named by the error's class only), which :func:`dispatch`
answers as ``{"error": ...}``, never raising into the agent (docs/guide/runtime.md, "Learned-skill tools").
``Skillflow.skill_tool`` adds the handle's breaker.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, Select, or_, select
from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import OperationalError

from skillflow.kernel.config import Settings, get_settings
from skillflow.kernel.models import SkillStatus
from skillflow.storage.engine import Budget, set_statement_timeout, stale
from skillflow.storage.schema import skillbox

SOURCE = "learned"

_LIST_DESCRIPTION = (
    "List the learned skills available to you: procedures distilled from earlier successful runs. "
    "Returns name, description, status, version and source for each."
)
_READ_DESCRIPTION = (
    "Read the full SKILL.md of one learned skill by name (or id). Follow it only if its preconditions "
    "hold for the current request."
)
_LIST_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
_READ_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "The skill's name (or id) as given by list_skills."}},
    "required": ["name"],
    "additionalProperties": False,
}

OPENAI_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {"name": "list_skills", "description": _LIST_DESCRIPTION, "parameters": _LIST_SCHEMA},
    },
    {
        "type": "function",
        "function": {"name": "read_skill", "description": _READ_DESCRIPTION, "parameters": _READ_SCHEMA},
    },
]
ANTHROPIC_TOOLS: list[dict[str, Any]] = [
    {"name": "list_skills", "description": _LIST_DESCRIPTION, "input_schema": _LIST_SCHEMA},
    {"name": "read_skill", "description": _READ_DESCRIPTION, "input_schema": _READ_SCHEMA},
]
TOOL_NAMES = frozenset({"list_skills", "read_skill"})


# SKILLFLOW_CAPTURE_TIMEOUT_SECONDS' default, when the settings cannot be read (the handle's construction fails then)
DEFAULT_TIMEOUT_SECONDS = float(Settings.model_fields["capture_timeout_seconds"].default)


class SkillNotAvailable(LookupError):
    """No skill of that name or id is available to this tenant."""


class SkillsUnreadable(SkillNotAvailable):
    """The skills could not be read: the database is unreachable, did not answer within the bound, or failed.

    The message names the error's class only, as ``Prepared.error`` does (``skills could not be read
    (OperationalError)``); the error itself is the ``__cause__``. A :class:`SkillNotAvailable`, so a caller that
    answers a missing skill to the model answers this too."""

    def __init__(self, error_class: str) -> None:
        self.error_class = error_class
        super().__init__(f"skills could not be read ({error_class})")


def _statuses(statuses: Iterable[SkillStatus | str] | None) -> list[str]:
    return [str(s.value if isinstance(s, SkillStatus) else s) for s in (statuses or (SkillStatus.ACTIVE,))]


def _seconds(timeout: float | None) -> float:
    """The bound of one read: ``timeout``, else ``SKILLFLOW_CAPTURE_TIMEOUT_SECONDS``."""
    if timeout is not None:
        return float(timeout)
    try:
        return float(get_settings().capture_timeout_seconds)
    except Exception:  # noqa: BLE001 - an unreadable setting fails the handle's construction, not a tool call
        return DEFAULT_TIMEOUT_SECONDS


def _read(engine: Engine, stmt: Select[Any], timeout: float | None) -> Sequence[RowMapping]:
    """The rows of ``stmt``, read under the capture bound; :class:`SkillsUnreadable` for any database failure."""
    budget = Budget(engine, _seconds(timeout))  # one bound, a stale pooled connection's retry included
    try:
        for attempt in (1, 2):
            with budget.unit() as bound:
                try:
                    with engine.begin() as conn:
                        set_statement_timeout(conn, bound.remaining())
                        return conn.execute(stmt).mappings().all()
                except OperationalError as exc:  # a connection the server closed is tried once more
                    if attempt == 2 or not stale(exc, bound):
                        raise
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
    except Exception as exc:  # down, stalled past the bound, or failed: named by its class only
        raise SkillsUnreadable(type(exc).__name__) from exc


def list_skills(
    engine: Engine,
    agent_id: str,
    user_id: str,
    statuses: Iterable[SkillStatus | str] | None = None,
    *,
    timeout: float | None = None,
) -> list[dict[str, Any]]:
    """This tenant's learned skills (ACTIVE only unless ``statuses`` says otherwise), by name.

    Read within ``timeout`` seconds (default ``SKILLFLOW_CAPTURE_TIMEOUT_SECONDS``); raises
    :class:`SkillsUnreadable` when the database cannot answer."""
    stmt = (
        select(skillbox.c.id, skillbox.c.name, skillbox.c.description, skillbox.c.status, skillbox.c.version)
        .where(
            skillbox.c.agent_id == agent_id,
            skillbox.c.user_id == user_id,
            skillbox.c.status.in_(_statuses(statuses)),
        )
        .order_by(skillbox.c.name, skillbox.c.version.desc())
    )
    rows = _read(engine, stmt, timeout)
    return [
        {
            "id": r["id"],
            "name": r["name"],
            "description": r["description"],
            "status": r["status"],
            "version": int(r["version"]),
            "source": SOURCE,
        }
        for r in rows
    ]


def read_skill(
    engine: Engine, agent_id: str, user_id: str, name_or_id: str, *, timeout: float | None = None
) -> dict[str, Any]:
    """The SKILL.md of this tenant's ACTIVE skill called ``name_or_id`` (newest version wins).

    Raises :class:`SkillNotAvailable` when there is none, :class:`SkillsUnreadable` (one of them) when the database
    cannot answer within ``timeout`` seconds (default ``SKILLFLOW_CAPTURE_TIMEOUT_SECONDS``)."""
    stmt = (
        select(skillbox.c.id, skillbox.c.name, skillbox.c.version, skillbox.c.status, skillbox.c.content)
        .where(
            skillbox.c.agent_id == agent_id,
            skillbox.c.user_id == user_id,
            skillbox.c.status == SkillStatus.ACTIVE.value,
            or_(skillbox.c.name == name_or_id, skillbox.c.id == name_or_id),
        )
        .order_by(skillbox.c.version.desc(), skillbox.c.activated_at.desc())
        .limit(1)
    )
    rows = _read(engine, stmt, timeout)
    if not rows:
        raise SkillNotAvailable("no active learned skill with that name")
    row = rows[0]
    return {
        "id": row["id"],
        "name": row["name"],
        "version": int(row["version"]),
        "status": row["status"],
        "source": SOURCE,
        "content": row["content"],
    }


Request = tuple[str, str]  # (tool name, the skill's name or id; "" for list_skills)


def tool_request(tool_name: str, arguments: Mapping[str, Any] | str | None) -> Request | dict[str, str]:
    """What a model's skill tool call asks for, or the ``{"error": ...}`` answer to arguments it cannot use.

    Raises ``ValueError`` for a tool that is not a skill tool (the agent routes only :data:`TOOL_NAMES` here)."""
    if not isinstance(tool_name, str):  # a model's whole tool call passed by mistake: named by its type
        raise ValueError(f"not a skill tool: a {type(tool_name).__name__}, not a tool name")
    if str.__str__(tool_name) not in TOOL_NAMES:
        raise ValueError(f"not a skill tool: {str.__str__(tool_name)!r}")
    tool_name = str.__str__(tool_name)
    try:
        args: Any = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else (arguments or {})
        if not isinstance(args, Mapping):
            return {"error": "arguments must be a JSON object"}
        if tool_name == "list_skills":
            return tool_name, ""
        name = args.get("name") or args.get("name_or_id")
    except Exception:  # noqa: BLE001 - a model's (or a caller's) value that cannot be read is an answer, not a raise
        return {"error": "arguments must be a JSON object"}
    if not isinstance(name, str) or not name.strip():
        return {"error": "read_skill needs a skill name"}
    return tool_name, name.strip()


def answer(request: Request, engine: Engine, agent_id: str, user_id: str, timeout: float | None = None) -> Any:
    """Run a :func:`tool_request`'s request; raises :class:`SkillNotAvailable` (:class:`SkillsUnreadable` for the
    database)."""
    tool_name, name = request
    if tool_name == "list_skills":
        return list_skills(engine, agent_id, user_id, timeout=timeout)
    return read_skill(engine, agent_id, user_id, name, timeout=timeout)


def dispatch(
    tool_name: str,
    arguments: Mapping[str, Any] | str | None,
    *,
    engine: Engine,
    agent_id: str,
    user_id: str,
    timeout: float | None = None,
) -> Any:
    """Run a skill tool call from a model: the tool's answer, or ``{"error": ...}`` for the model.

    A missing skill, arguments it cannot use, and a database that is down, stalls past ``timeout`` (default
    ``SKILLFLOW_CAPTURE_TIMEOUT_SECONDS``) or fails (``skills could not be read (<ErrorClass>)``) are answers,
    never raised into the agent; only a ``tool_name`` that is not a skill tool raises ``ValueError``. Without a
    handle there is no breaker: ``Skillflow.skill_tool`` answers at once while the handle's breaker is open.
    """
    request = tool_request(tool_name, arguments)
    if isinstance(request, dict):
        return request
    try:
        return answer(request, engine, agent_id, user_id, timeout)
    except SkillNotAvailable as exc:
        return {"error": str(exc)}
