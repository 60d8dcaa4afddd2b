"""``skillflow context`` shows the skills ``prepare`` injects: the same fitted rule, the same conversation handling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.injection.conversation import Conversation
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.runtime import Skillflow
from tests.storage.test_applicability import A, U, fit_now, setup

CALLS = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": tool, "arguments": "{}"}}
            for i, tool in enumerate(("get_user_details", "search_direct_flight"))
        ],
    },
]


def context(db_url: str, query: str, *extra: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        app, ["context", query, "--agent-id", A, "--user-id", U, "--db", db_url, "--json", *extra]
    )
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_context_shows_what_prepare_injects(
    db_url: str, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "hashing")
    sf, ids = setup(engine)
    fit_now(engine, sf)
    agent = Skillflow(agent_id=A, engine=engine, embedder=HashingEmbedder(), continual_learning=True)  # as deployed
    conversation = tmp_path / "conversation.json"
    conversation.write_text(json.dumps(CALLS))
    for query in ("please cancel my reservation", "book me a flight to paris", "what is the baggage allowance"):
        expected = list(agent.prepare(query, U).skill_ids)
        doc = context(db_url, query)
        assert doc["skill_ids"] == expected, query
        assert doc["selection"]["state"] == "current"
        with_calls = list(agent.prepare(query, U, conversation=Conversation.from_messages(CALLS)).skill_ids)
        assert context(db_url, query, "--conversation", str(conversation))["skill_ids"] == with_calls, query
    assert context(db_url, "please cancel my reservation")["skill_ids"] == [ids["cancel-a"]]
    assert context(db_url, "please cancel my reservation", "--conversation", str(conversation))["skill_ids"] == [
        ids["cancel-b"]
    ]  # the calls made continue only cancel-b's procedure
