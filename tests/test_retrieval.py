"""Skill retrieval: applicability vectors, filters before top-k, model isolation, cache, MiniLM calibration."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, func, select, update

from skillflow.embeddings import HashingEmbedder
from skillflow.models import InjectionRole, SkillStatus
from skillflow.retrieval import applicability_texts, search_skills, write_skill_vectors
from skillflow.storage.schema import skill_vectors, skillbox
from skillflow.storage.skills import SkillRecord, insert_skill, transition

EMB = HashingEmbedder()
QUERY = "please refund my damaged order"


def make_skill(
    engine: Engine,
    *,
    agent: str = "a",
    user: str = "u",
    chash: str = "h1",
    status: SkillStatus = SkillStatus.ACTIVE,
    triggers: list[str] | None = None,
    name: str = "refund-damaged-order",
    role: InjectionRole = InjectionRole.USER,
    embedder: Any = EMB,
    description: str = "Refund a customer's damaged order after checking it",
    **extra: Any,
) -> SkillRecord:
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id=agent,
            user_id=user,
            canonical_hash=chash,
            name=name,
            description=description,
            content=f"---\nname: {name}\n---\nSECRET-PROCEDURE-{agent}-{user}-{chash}",
            status=SkillStatus.SHADOW if role == InjectionRole.DEVELOPER else status,
            injection_role=role,
            preconditions=["the order id is known"],
            tools=["lookup_order", "issue_refund"],
            trigger_queries=triggers if triggers is not None else [QUERY, "my parcel arrived broken, refund it"],
            **extra,
        )
        if role == InjectionRole.DEVELOPER and status == SkillStatus.ACTIVE:
            skill = transition(conn, skill.id, SkillStatus.ACTIVE, actor="reviewer", injection_role=role)
        write_skill_vectors(conn, skill, embedder)
    return skill


def search(engine: Engine, query: str = QUERY, agent: str = "a", user: str = "u", **kw: Any) -> list[Any]:
    kw.setdefault("k", 2)
    kw.setdefault("min_score", 0.7)
    with engine.connect() as conn:
        return search_skills(conn, EMB.embed([query])[0], EMB.model_id, agent, user, kw.pop("status", "active"), **kw)


def test_applicability_texts_never_include_procedure_or_tools() -> None:
    texts = applicability_texts(
        "cancel-reservation", "Cancel a booking", ["id known"], ["cancel it", "Cancel  it", "drop my trip"], 8
    )
    assert texts[0] == ("profile", "cancel reservation. Cancel a booking. Preconditions: id known")
    assert texts[1:] == [("trigger", "cancel it"), ("trigger", "drop my trip")]
    assert len(applicability_texts("n", "d", None, [f"q{i}" for i in range(20)], max_triggers=3)) == 4


def test_write_skill_vectors_replaces_rows_and_records_model(engine: Engine) -> None:
    skill = make_skill(engine)
    with engine.begin() as conn:
        assert write_skill_vectors(conn, skill, EMB) == 3
        n = conn.execute(select(func.count()).select_from(skill_vectors).where(skill_vectors.c.skill_id == skill.id))
        assert n.scalar() == 3
        kinds = conn.execute(select(skill_vectors.c.kind).order_by(skill_vectors.c.ordinal)).scalars().all()
        assert kinds == ["profile", "trigger", "trigger"]
        model = conn.execute(select(skillbox.c.embedding_model).where(skillbox.c.id == skill.id)).scalar()
    assert model == EMB.model_id


def test_filters_apply_before_top_k(engine: Engine) -> None:
    # Perfect matches in other tenants and other statuses must not crowd out the tenant's one active skill.
    for i in range(3):
        make_skill(engine, agent="other", chash=f"o{i}")
        make_skill(engine, user="someone-else", chash=f"x{i}")
        make_skill(engine, chash=f"s{i}", status=SkillStatus.SHADOW)
    mine = make_skill(engine, chash="mine", triggers=["refund my damaged order please"])
    found = search(engine, k=1, min_score=0.3)
    assert [s.skill_id for s in found] == [mine.id]
    assert found[0].status == "active" and found[0].content.endswith("SECRET-PROCEDURE-a-u-mine")
    assert search(engine, agent="nobody", min_score=-1) == []


def test_score_is_max_over_vectors_and_threshold_applies(engine: Engine) -> None:
    skill = make_skill(engine)
    found = search(engine)
    assert len(found) == 1 and found[0].score == pytest.approx(1.0, abs=1e-5)
    assert search(engine, query="what is the weather in paris") == []
    with engine.connect() as conn:
        stmt = select(skill_vectors.c.embedding).where(skill_vectors.c.skill_id == skill.id)
        vec = conn.execute(stmt).scalars().all()
    expected = max(float(np.dot(v, EMB.embed(["broken parcel refund"])[0])) for v in vec)
    assert search(engine, query="broken parcel refund", min_score=-1)[0].score == pytest.approx(expected, abs=1e-5)


def test_only_vectors_of_the_configured_model_are_compared(engine: Engine) -> None:
    make_skill(engine)
    with engine.begin() as conn:
        conn.execute(update(skill_vectors).values(model_id="some-other-model"))
    assert search(engine, min_score=-1) == []


def test_top_k_orders_by_score(engine: Engine) -> None:
    a = make_skill(engine, chash="h1", triggers=[QUERY], name="a", description="first")
    b = make_skill(engine, chash="h2", triggers=["refund my order"], name="b", description="second")
    make_skill(engine, chash="h3", triggers=["book a hotel room"], name="c", description="third")
    found = search(engine, k=2, min_score=0.2)
    assert [s.skill_id for s in found] == [a.id, b.id]
    assert found[0].score > found[1].score
    assert search(engine, k=0) == []


def test_cache_follows_lifecycle_and_new_vectors(engine: Engine) -> None:
    skill = make_skill(engine)
    assert [s.skill_id for s in search(engine)] == [skill.id]
    with engine.begin() as conn:
        transition(conn, skill.id, SkillStatus.DEMOTED, actor="test", reason="drift")
    assert search(engine) == []
    newer = make_skill(engine, chash="h2", triggers=["something unrelated entirely"])
    assert search(engine) == []
    with engine.begin() as conn:
        record = SkillRecord(**{**newer.__dict__, "trigger_queries": [QUERY]})
        write_skill_vectors(conn, record, EMB)
    assert [s.skill_id for s in search(engine)] == [newer.id]


@pytest.fixture(scope="module")
def minilm() -> Any:
    from skillflow.embeddings import MiniLMEmbedder

    return MiniLMEmbedder()


CANCEL_TRIGGERS = [
    "I need to cancel my reservation",
    "Please cancel my flight booking",
    "Can you cancel reservation ABC123 for me?",
    "I want to cancel my trip and get a refund",
    "Cancel my upcoming flight please",
    "I won't be traveling, please cancel my booking",
]


def test_minilm_calibration_separates_paraphrases_from_near_misses(sqlite_engine: Engine, minilm: Any) -> None:
    with sqlite_engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id="a",
            user_id="u",
            canonical_hash="cancel",
            name="cancel-reservation",
            description="Cancel an existing flight reservation for the customer and confirm any refund.",
            content="procedure text that is never embedded",
            status=SkillStatus.ACTIVE,
            preconditions=["The customer gives a reservation id", "The reservation has not already been flown"],
            trigger_queries=CANCEL_TRIGGERS,
        )
        write_skill_vectors(conn, skill, minilm)

    def score(query: str) -> float:
        with sqlite_engine.connect() as conn:
            hits = search_skills(conn, minilm.embed([query])[0], minilm.model_id, "a", "u", "active", 2, -1.0)
        return hits[0].score

    for paraphrase in (
        "I'd like to cancel my flight reservation",
        "please cancel the booking I made for next week",
        "cancel my reservation XYZ789",
        "I have to cancel my flight to Boston",
    ):
        assert score(paraphrase) >= 0.70, paraphrase
    for near_miss in ("change my flight", "modify my reservation dates", "add a checked bag to my booking"):
        assert score(near_miss) < 0.70, near_miss
    for unrelated in ("what's the weather in Paris", "reset my password"):
        assert score(unrelated) < 0.40, unrelated


def test_bench_retrieval_runs_the_real_search_path() -> None:
    from skillflow.bench.retrieval import run

    result = run(sizes=(40,), pool_sizes=(5,), embedder_name="hashing", vectors_per_skill=3, repeats=20, rounds=1)
    (row,) = result.latency
    assert row.skills == 40 and row.vectors == 25 * 6 + 15 * 3 and row.queries == 20
    assert row.floor_p50_ms > 0 and 0 < row.p50_ms <= row.p95_ms
    (prec,) = result.precision
    assert prec.queries == 5 * 3 and prec.out_of_pool_queries == 20 * 3
    assert prec.hit_at_1 + prec.wrong_skill_rate + prec.miss_rate == pytest.approx(1.0)
