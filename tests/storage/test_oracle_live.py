"""Opt-in checks against a live Oracle 23ai (``SKILLFLOW_TEST_ORACLE_DSN``, e.g.
``oracle+oracledb://app:secret@127.0.0.1:1521/?service_name=FREEPDB1``). The schema user must be
disposable: the tests drop every skillflow table first."""

from __future__ import annotations

import array
import os
from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import Engine, inspect, select, text

from skillflow.injection.embeddings import HashingEmbedder
from skillflow.kernel.models import SkillStatus
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import MIGRATIONS, migrate
from skillflow.storage.schema import metadata, skill_vectors, skillbox, workflow_memory
from skillflow.storage.skills import insert_skill
from tests.support.oracle.checks import load_query

DSN = os.environ.get("SKILLFLOW_TEST_ORACLE_DSN")
pytestmark = [
    pytest.mark.oracle,
    pytest.mark.skipif(
        not DSN,
        reason="SKILLFLOW_TEST_ORACLE_DSN is not set (opt-in: point it at a disposable Oracle 23ai schema, "
        "e.g. oracle+oracledb://app:secret@127.0.0.1:1521/?service_name=FREEPDB1)",
    ),
]


@pytest.fixture(scope="module")
def oracle() -> Iterator[Engine]:
    assert DSN
    engine = make_engine(DSN)
    metadata.drop_all(engine, checkfirst=True)
    yield engine
    engine.dispose()


def test_migrate_on_oracle_is_idempotent_and_matches_the_schema(oracle: Engine) -> None:
    assert migrate(oracle) == [m.name for m in MIGRATIONS]
    assert migrate(oracle) == []
    insp = inspect(oracle)
    cols = {c["name"]: c for c in insp.get_columns("skillbox")}
    assert cols["injection_role"]["nullable"] is False
    checks = {c["name"] for c in insp.get_check_constraints("workflow_memory")}
    assert "ck_workflow_memory_shadow_evaluations_is_json" in checks
    assert "ck_skillbox_injection_role" in {c["name"] for c in insp.get_check_constraints("skillbox")}


def test_record_run_and_search_on_oracle(oracle: Engine) -> None:
    migrate(oracle)
    sf = Skillflow(agent_id="agent-live", engine=oracle, continual_learning=True)
    steps = [
        {"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {"ok": True}},
        {"tool": "issue_refund", "arguments": {"order_id": "A1", "amount": 5}, "result": {"accepted": True}},
    ]
    result = sf.record_run("refund my order A1", user_id="user-live", steps=steps, strict=True)
    assert result.stored
    with oracle.connect() as conn:
        row = conn.execute(
            select(workflow_memory.c.canonical_hash, workflow_memory.c.steps).where(
                workflow_memory.c.id == result.run_id
            )
        ).one()
    assert row.canonical_hash == "5e6b70e86ec21732b51dd93e2ddd9627b12c43186d3d048e7a8d356b41c37e12"
    assert [s["tool"] for s in row.steps] == ["lookup_order", "issue_refund"]  # CLOB JSON round-trips

    embedder = HashingEmbedder()
    texts = ["refund an order", "cancel a reservation"]
    matrix = embedder.embed(texts)
    with oracle.begin() as conn:
        ids = []
        for i, (name, tenant) in enumerate([("refund-order", "user-live"), ("cancel-reservation", "user-live")]):
            skill = insert_skill(
                conn,
                agent_id="agent-live",
                user_id=tenant,
                canonical_hash=f"{i:064x}",
                name=name,
                description=texts[i],
                content="---\nname: x\n---\n",
                status=SkillStatus.ACTIVE,
            )
            ids.append(skill.id)
            conn.execute(
                skill_vectors.insert().values(
                    skill_id=skill.id,
                    ordinal=0,
                    agent_id="agent-live",
                    user_id=tenant,
                    kind="profile",
                    model_id=embedder.model_id,
                    embedding=matrix[i],
                )
            )
    query = embedder.embed(["please refund an order"])[0]
    params = {
        "query_vec": array.array("f", np.asarray(query, dtype=np.float32).tolist()),
        "agent_id": "agent-live",
        "user_id": "user-live",
        "status": "active",
        "model_id": embedder.model_id,
        "min_score": -1.0,
        "k": 2,
    }
    with oracle.connect() as conn:
        found = conn.execute(text(load_query("search_skills")), params).all()
        other_tenant = conn.execute(text(load_query("search_skills")), {**params, "user_id": "nobody"}).all()
        approx = conn.execute(text(load_query("search_skills_approx")), {**params, "candidates": 8}).all()
        roles = conn.execute(select(skillbox.c.injection_role).where(skillbox.c.id.in_(ids))).scalars().all()
    assert [r[0] for r in found] == ids  # the refund skill first; both ACTIVE skills of the tenant
    assert [r[0] for r in approx] == [r[0] for r in found]
    assert other_tenant == []
    assert roles == ["user", "user"]
