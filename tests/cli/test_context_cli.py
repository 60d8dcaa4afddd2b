"""``skillflow context``: the assembled request and activated ids, per provider, tenant-scoped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.retrieval import write_skill_vectors
from skillflow.kernel.models import InjectionRole, SkillStatus
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.skills import insert_skill, transition

QUERY = "please cancel my flight reservation"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "hashing")
    url = f"sqlite:///{tmp_path / 'ctx.db'}"
    engine: Engine = make_engine(url)
    migrate(engine)
    with engine.begin() as conn:
        for user, role, body in (
            ("u", InjectionRole.DEVELOPER, "DEV-BODY [bold]x[/bold]"),
            ("v", InjectionRole.USER, "OTHER-USER-BODY"),
        ):
            skill = insert_skill(
                conn,
                agent_id="a",
                user_id=user,
                canonical_hash="h",
                name="cancel-reservation",
                description="Cancel a reservation",
                content=body,
                status=SkillStatus.SHADOW,
                trigger_queries=[QUERY],
            )
            skill = transition(conn, skill.id, SkillStatus.ACTIVE, actor="reviewer", injection_role=role)
            write_skill_vectors(conn, skill, HashingEmbedder())
    engine.dispose()
    return url


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["context", *args])
    return result.exit_code, result.output


def test_context_json_per_provider(db: str) -> None:
    code, out = run(QUERY, "--agent-id", "a", "--user-id", "u", "--db", db, "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert len(doc["skill_ids"]) == 1 and doc["skills"][0]["role"] == "developer"
    assert [m["role"] for m in doc["request"]["messages"]] == ["system", "developer", "user"]
    assert "OTHER-USER-BODY" not in out
    code, out = run(QUERY, "--agent-id", "a", "--user-id", "u", "--db", db, "--json", "--provider", "anthropic")
    doc = json.loads(out)
    assert (
        code == 0
        and "DEV-BODY" in doc["request"]["system"]
        and [m["role"] for m in doc["request"]["messages"]] == ["user"]
    )
    code, out = run(QUERY, "--agent-id", "a", "--user-id", "nobody", "--db", db, "--json", "--provider", "ollama")
    assert code == 0 and json.loads(out)["skill_ids"] == []


def test_context_human_output_and_bad_provider(db: str) -> None:
    code, out = run(QUERY, "--agent-id", "a", "--user-id", "u", "--db", db, "--system-prompt", "APP")
    assert code == 0, out
    assert "developer" in out and "DEV-BODY [bold]x[/bold]" in out and "cancel-reservation v1" in out
    code, out = run(QUERY, "--agent-id", "a", "--user-id", "u", "--db", db, "--provider", "gemini")
    assert code == 2 and "--provider must be one of" in out
