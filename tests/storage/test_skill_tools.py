"""Learned-skill tools: tenant-scoped list/read, ACTIVE only, tool schemas, dispatch."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine

from skillflow.injection.skill_tools import (
    ANTHROPIC_TOOLS,
    OPENAI_TOOLS,
    SkillNotAvailable,
    dispatch,
    list_skills,
    read_skill,
)
from skillflow.kernel.models import SkillStatus
from skillflow.storage.skills import insert_skill, transition


def _skill(engine: Engine, agent: str, user: str, chash: str, name: str, status: SkillStatus) -> str:
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id=agent,
            user_id=user,
            canonical_hash=chash,
            name=name,
            description=f"when to use {name}",
            content=f"SKILL.md of {name} for {agent}/{user}",
            status=SkillStatus.SHADOW if status != SkillStatus.ACTIVE else status,
        )
        if status not in (SkillStatus.ACTIVE, SkillStatus.SHADOW):
            transition(conn, skill.id, status, actor="test", reason="test")
    return skill.id


@pytest.fixture
def populated(engine: Engine) -> dict[str, str]:
    return {
        "active": _skill(engine, "a", "u", "h1", "refund-order", SkillStatus.ACTIVE),
        "shadow": _skill(engine, "a", "u", "h2", "cancel-order", SkillStatus.SHADOW),
        "rejected": _skill(engine, "a", "u", "h3", "rebook-flight", SkillStatus.REJECTED),
        "other_user": _skill(engine, "a", "v", "h1", "refund-order", SkillStatus.ACTIVE),
        "other_agent": _skill(engine, "b", "u", "h4", "track-parcel", SkillStatus.ACTIVE),
    }


def test_list_skills_is_tenant_scoped_and_active_only(engine: Engine, populated: dict[str, str]) -> None:
    listed = list_skills(engine, "a", "u")
    assert listed == [
        {
            "id": populated["active"],
            "name": "refund-order",
            "description": "when to use refund-order",
            "status": "active",
            "version": 1,
            "source": "learned",
        }
    ]
    audit = list_skills(engine, "a", "u", statuses=list(SkillStatus))
    assert {s["id"] for s in audit} == {populated["active"], populated["shadow"], populated["rejected"]}


def test_read_skill_returns_only_this_tenants_active_skill(engine: Engine, populated: dict[str, str]) -> None:
    by_name = read_skill(engine, "a", "u", "refund-order")
    assert by_name["content"] == "SKILL.md of refund-order for a/u" and by_name["source"] == "learned"
    assert read_skill(engine, "a", "u", populated["active"]) == by_name
    for name_or_id in ("cancel-order", populated["shadow"], "rebook-flight", "track-parcel", populated["other_user"]):
        with pytest.raises(SkillNotAvailable):
            read_skill(engine, "a", "u", name_or_id)


def test_dispatch(engine: Engine, populated: dict[str, str]) -> None:
    kw = {"engine": engine, "agent_id": "a", "user_id": "u"}
    assert [s["name"] for s in dispatch("list_skills", "{}", **kw)] == ["refund-order"]
    assert dispatch("read_skill", json.dumps({"name": "refund-order"}), **kw)["id"] == populated["active"]
    assert dispatch("read_skill", {"name": "cancel-order"}, **kw) == {"error": "no active learned skill with that name"}
    assert "error" in dispatch("read_skill", "{not json", **kw)
    assert "error" in dispatch("read_skill", {}, **kw)
    with pytest.raises(ValueError):
        dispatch("drop_tables", {}, **kw)


def test_tool_schemas_match_each_provider_format() -> None:
    assert [t["function"]["name"] for t in OPENAI_TOOLS] == ["list_skills", "read_skill"]
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in OPENAI_TOOLS)
    assert [t["name"] for t in ANTHROPIC_TOOLS] == ["list_skills", "read_skill"]
    assert ANTHROPIC_TOOLS[1]["input_schema"]["required"] == ["name"]
