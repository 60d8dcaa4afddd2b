"""Learned-skill tools for agents: ``list_skills`` and ``read_skill``, with OpenAI/Anthropic tool schemas.

Both are tenant-scoped (exactly one agent and user) and, by default, see ACTIVE skills only: a SHADOW,
demoted or retired skill is never offered to a model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Engine, or_, select

from skillflow.kernel.models import SkillStatus
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


class SkillNotAvailable(LookupError):
    """No skill of that name or id is available to this tenant."""


def _statuses(statuses: Iterable[SkillStatus | str] | None) -> list[str]:
    return [str(s.value if isinstance(s, SkillStatus) else s) for s in (statuses or (SkillStatus.ACTIVE,))]


def list_skills(
    engine: Engine, agent_id: str, user_id: str, statuses: Iterable[SkillStatus | str] | None = None
) -> list[dict[str, Any]]:
    """This tenant's learned skills (ACTIVE only unless ``statuses`` says otherwise), by name."""
    stmt = (
        select(skillbox.c.id, skillbox.c.name, skillbox.c.description, skillbox.c.status, skillbox.c.version)
        .where(
            skillbox.c.agent_id == agent_id,
            skillbox.c.user_id == user_id,
            skillbox.c.status.in_(_statuses(statuses)),
        )
        .order_by(skillbox.c.name, skillbox.c.version.desc())
    )
    with engine.connect() as conn:
        rows = conn.execute(stmt).mappings().all()
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


def read_skill(engine: Engine, agent_id: str, user_id: str, name_or_id: str) -> dict[str, Any]:
    """The SKILL.md of this tenant's ACTIVE skill called ``name_or_id`` (newest version wins)."""
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
    with engine.connect() as conn:
        row = conn.execute(stmt).mappings().first()
    if row is None:
        raise SkillNotAvailable("no active learned skill with that name")
    return {
        "id": row["id"],
        "name": row["name"],
        "version": int(row["version"]),
        "status": row["status"],
        "source": SOURCE,
        "content": row["content"],
    }


def dispatch(
    tool_name: str, arguments: Mapping[str, Any] | str | None, *, engine: Engine, agent_id: str, user_id: str
) -> Any:
    """Run a skill tool call from a model; a missing skill comes back as ``{"error": ...}`` for the model."""
    if tool_name not in TOOL_NAMES:
        raise ValueError(f"not a skill tool: {tool_name!r}")
    try:
        args: Any = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else (arguments or {})
    except json.JSONDecodeError:
        return {"error": "arguments must be a JSON object"}
    if not isinstance(args, Mapping):
        return {"error": "arguments must be a JSON object"}
    if tool_name == "list_skills":
        return list_skills(engine, agent_id, user_id)
    name = args.get("name") or args.get("name_or_id")
    if not isinstance(name, str) or not name.strip():
        return {"error": "read_skill needs a skill name"}
    try:
        return read_skill(engine, agent_id, user_id, name.strip())
    except SkillNotAvailable as exc:
        return {"error": str(exc)}
