"""Provider mappings checked on the wire: the real OpenAI and Anthropic SDK clients against a local server."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import anthropic
import openai
import pytest
from sqlalchemy import Engine, select

from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.prompting import SYSTEM_CONTRACT
from skillflow.injection.retrieval import write_skill_vectors
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import InjectionRole, SkillStatus
from skillflow.runtime import Skillflow
from skillflow.storage.schema import workflow_memory
from skillflow.storage.skills import insert_skill, transition
from tests.support.fake_provider_server import FakeProvider, fake_provider

EMB = HashingEmbedder()
QUERY = "where is my order A1"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_agent.py"


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with fake_provider() as srv:
        yield srv


def add_skill(engine: Engine, chash: str, role: InjectionRole, body: str) -> str:
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id="support-agent",
            user_id="alice",
            canonical_hash=chash,
            name=f"track-order-{chash}",
            description="Find where a customer's order is",
            content=body,
            status=SkillStatus.SHADOW,
            trigger_queries=[QUERY],
        )
        skill = transition(conn, skill.id, SkillStatus.ACTIVE, actor="reviewer", injection_role=role)
        write_skill_vectors(conn, skill, EMB)
    return skill.id


def skillflow(engine: Engine) -> Skillflow:
    config = PromotionConfig(require_shadow=True, retrieval_min_similarity=0.7)
    return Skillflow(agent_id="support-agent", engine=engine, config=config, embedder=EMB, continual_learning=True)


@pytest.fixture
def both_roles(sqlite_engine: Engine) -> Skillflow:
    add_skill(sqlite_engine, "h1", InjectionRole.USER, "USER-SKILL-BODY")
    add_skill(sqlite_engine, "h2", InjectionRole.DEVELOPER, "DEV-SKILL-BODY")
    return skillflow(sqlite_engine)


def test_openai_official_gets_native_developer_role(server: FakeProvider, both_roles: Skillflow) -> None:
    prepared = both_roles.prepare(QUERY, "alice", provider="openai", history=[{"role": "user", "content": "hi"}])
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="test-key", max_retries=0)
    client.chat.completions.create(model="gpt-test", **prepared.request)
    (body,) = server.bodies("/chat/completions")
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "developer", "user"]
    assert body["messages"][0]["content"] == SYSTEM_CONTRACT
    assert (
        "DEV-SKILL-BODY" in body["messages"][2]["content"] and "USER-SKILL-BODY" not in body["messages"][2]["content"]
    )
    assert "USER-SKILL-BODY" in body["messages"][3]["content"] and body["messages"][3]["content"].endswith(QUERY)
    assert len(prepared.skill_ids) == 2


def test_anthropic_gets_top_level_system(server: FakeProvider, both_roles: Skillflow) -> None:
    prepared = both_roles.prepare(QUERY, "alice", provider="anthropic", system_prompt="APP")
    client = anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="test-key", max_retries=0)
    client.messages.create(model="claude-test", max_tokens=64, **prepared.request)
    (body,) = server.bodies("/v1/messages")
    assert body["system"].startswith("APP\n\n" + SYSTEM_CONTRACT) and "DEV-SKILL-BODY" in body["system"]
    assert "USER-SKILL-BODY" not in body["system"]
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert (
        "USER-SKILL-BODY" in body["messages"][0]["content"] and "DEV-SKILL-BODY" not in body["messages"][0]["content"]
    )


@pytest.mark.parametrize("provider", ["ollama", "openai-compatible"])
def test_compatible_endpoints_get_system_instructions(
    server: FakeProvider, both_roles: Skillflow, provider: str
) -> None:
    prepared = both_roles.prepare(QUERY, "alice", provider=provider)
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="ollama", max_retries=0)
    client.chat.completions.create(model="llama3", **prepared.request)
    (body,) = server.bodies("/chat/completions")
    assert [m["role"] for m in body["messages"]] == ["system", "system", "user"]
    assert body["messages"][0]["content"] == SYSTEM_CONTRACT and "DEV-SKILL-BODY" in body["messages"][1]["content"]


def test_no_developer_message_without_developer_skills(server: FakeProvider, sqlite_engine: Engine) -> None:
    add_skill(sqlite_engine, "h1", InjectionRole.USER, "USER-SKILL-BODY")
    prepared = skillflow(sqlite_engine).prepare(QUERY, "alice")
    openai.OpenAI(base_url=server.openai_base_url, api_key="k", max_retries=0).chat.completions.create(
        model="m", **prepared.request
    )
    (body,) = server.bodies("/chat/completions")
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("openai_agent_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_agent_records_the_rendered_skill(
    server: FakeProvider, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    skill_id = add_skill(engine, "h1", InjectionRole.USER, "USER-SKILL-BODY")
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id": "A1"}'}}
    read = {"id": "call_2", "type": "function", "function": {"name": "read_skill", "arguments": '{"name": "nope"}'}}
    server.openai_script += [{"content": None, "tool_calls": [call, read]}, {"content": "It has shipped."}]
    example = load_example()
    answer = example.run_agent(skillflow(engine), openai.OpenAI(max_retries=0), QUERY, "alice")
    assert answer == "It has shipped."
    first, second = server.bodies("/chat/completions")
    assert {t["function"]["name"] for t in first["tools"]} == {"lookup_order", "list_skills", "read_skill"}
    assert "USER-SKILL-BODY" in first["messages"][-1]["content"]
    tool_msgs = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_1", "call_2"] and "shipped" in tool_msgs[0]["content"]
    with engine.connect() as conn:
        row = (
            conn.execute(select(workflow_memory).where(workflow_memory.c.agent_id == "support-agent")).mappings().one()
        )
    assert row["skills_activated"] == [skill_id]
    assert row["tool_sequence"] and "lookup_order" in row["tool_sequence"] and "read_skill" not in row["tool_sequence"]
    assert row["outcome"] == "success" and row["user_id"] == "alice"


def _lookup(cid: str) -> dict[str, object]:
    return {"id": cid, "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id": "A1"}'}}


def test_example_agent_records_what_ran_when_the_provider_fails_mid_loop(
    server: FakeProvider, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool ran, then the provider answered 500: the error reaches the caller and the call that ran is recorded.
    Before, ``record_conversation`` was reached on the success path only: nothing was recorded."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    server.openai_script += [{"content": None, "tool_calls": [_lookup("call_1")]}, {"status": 500}]
    example = load_example()
    with pytest.raises(openai.InternalServerError):
        example.run_agent(skillflow(engine), openai.OpenAI(max_retries=0), QUERY, "alice")
    assert len(server.bodies("/chat/completions")) == 2  # the tool ran between the two model calls
    with engine.connect() as conn:
        rows = conn.execute(select(workflow_memory).where(workflow_memory.c.agent_id == "support-agent")).mappings()
        [row] = list(rows)
    assert (row["tool_sequence"], row["user_id"], row["outcome"]) == ("lookup_order", "alice", "success")
    assert row["conversation_id"] and row["steps"][0]["result"] == {"order_id": "A1", "status": "shipped"}


def test_example_agent_answers_a_skill_tool_call_while_the_database_is_down(
    server: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model calls ``list_skills`` while the database is down: the tool call answers the error's class and the
    agent's run goes on (its procedure spools). Before, ``OperationalError`` was raised out of the agent loop."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    down = tmp_path / "down.db"
    down.mkdir()  # a folder where the database file belongs: every connection fails
    sf = Skillflow(
        agent_id="support-agent",
        database_url=f"sqlite:///{down}",
        spool_dir=tmp_path / "spool",
        continual_learning=True,
        embedder=EMB,
    )
    listing = {"id": "call_2", "type": "function", "function": {"name": "list_skills", "arguments": "{}"}}
    server.openai_script += [
        {"content": None, "tool_calls": [_lookup("call_1"), listing]},
        {"content": "It has shipped."},
    ]
    example = load_example()
    assert example.run_agent(sf, openai.OpenAI(max_retries=0), QUERY, "alice") == "It has shipped."
    _, second = server.bodies("/chat/completions")
    replies = {m["tool_call_id"]: json.loads(m["content"]) for m in second["messages"] if m["role"] == "tool"}
    assert replies["call_2"] in (
        {"error": "skills could not be read (DatabaseDown)"},
        {"error": "skills could not be read (OperationalError)"},
    )
    assert replies["call_1"] == {"order_id": "A1", "status": "shipped"}
    assert len(list((tmp_path / "spool").glob("*.json"))) == 1  # the procedure that ran, kept for the replay
