"""The fitted applicability rule on SQLite and PostgreSQL: stored, applied by prepare, fail-safe when stale."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.injection.applicability import RULES, STALE, UNCALIBRATED, UNREADABLE
from skillflow.injection.conversation import Conversation, ToolCall
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.retrieval import write_skill_vectors
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import InjectionRole, SkillStatus, Step
from skillflow.promotion.calibrate import calibrate
from skillflow.runtime import Skillflow
from skillflow.storage.schema import applicability_rules, workflow_memory
from skillflow.storage.skills import insert_skill, transition

EMB = HashingEmbedder()
A, U = "air", "u1"
CANCEL = ["please cancel my reservation", "cancel my booking please", "I want to cancel my reservation now"]
BOOK = ["book me a flight to paris", "I need to book a new flight", "please book a one way flight"]
OTHER = ["what is the baggage allowance", "how many bags can I check", "what does the baggage policy say"]
TAILS = ["", "thanks", "today", "for my trip", "right away", "if possible", "soon", "asap", "for tomorrow", "kindly"]
PRE_A = ["get_user_details", "get_reservation_details"]
PRE_B = ["get_user_details", "search_direct_flight"]


def steps(tools: list[str]) -> list[Step]:
    return [Step(t, {"id": "x"}) for t in tools]


def history(sf: Skillflow) -> dict[str, str]:
    """24 cancels (two classes, the same requests), 12 bookings, 24 unanswered look-ups; class hash by name."""
    hashes: dict[str, str] = {}
    for i in range(24):
        q = f"{CANCEL[i % 3]} {TAILS[i % 10]} {TAILS[(i * 7 + 3) % 10]}"
        name, pre = ("cancel-a", PRE_A) if i % 2 else ("cancel-b", PRE_B)
        hashes[name] = sf.record_run(q, U, steps([*pre, "cancel_reservation"]), strict=True).canonical_hash or ""
        hashes["lookup"] = (
            sf.record_run(
                f"{OTHER[i % 3]} {TAILS[i % 10]} {TAILS[(i * 3 + 1) % 10]}", U, steps(["get_user_details"]), strict=True
            ).canonical_hash
            or ""
        )
    for i in range(12):
        tools = ["get_user_details", "search_direct_flight", "book_reservation"]
        hashes["book"] = (
            sf.record_run(
                f"{BOOK[i % 3]} {TAILS[i % 10]} {TAILS[(i * 7 + 5) % 10]}", U, steps(tools), strict=True
            ).canonical_hash
            or ""
        )
    return hashes


def activate(engine: Engine, chash: str, name: str, success: float) -> str:
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id=A,
            user_id=U,
            canonical_hash=chash,
            name=name,
            description=f"{name} procedure",
            content=f"BODY[{name}]",
            status=SkillStatus.SHADOW,
            injection_role=InjectionRole.USER,
            trigger_queries=[CANCEL[0] if "cancel" in name else BOOK[0]],
            source_workflow_ids=[],
            baseline={"success_rate": success, "executions": 12},
        )
        transition(conn, skill.id, SkillStatus.ACTIVE, actor="test", injection_role=InjectionRole.USER)
        write_skill_vectors(conn, skill, EMB)
    return skill.id


def setup(engine: Engine) -> tuple[Skillflow, dict[str, str]]:
    RULES.clear()
    config = PromotionConfig(retrieval_min_similarity=0.3)
    sf = Skillflow(agent_id=A, engine=engine, config=config, embedder=EMB, continual_learning=True)
    hashes = history(sf)
    ids = {
        "cancel-a": activate(engine, hashes["cancel-a"], "cancel-a", 0.95),
        "cancel-b": activate(engine, hashes["cancel-b"], "cancel-b", 0.90),
        "book": activate(engine, hashes["book"], "book", 1.0),
    }
    return sf, ids


def fit_now(engine: Engine, sf: Skillflow, cycle: int = 1) -> dict[str, Any]:
    assert sf.config is not None
    return calibrate(engine, A, U, sf.config, cycle, embedder=EMB)


def test_the_rule_is_stored_with_its_fingerprint_and_applied(engine: Engine) -> None:
    sf, ids = setup(engine)
    # Before any fit: the fixed threshold applies (uncalibrated), over the skills' own vectors.
    assert sf.select_skills("please cancel my reservation", U).state == UNCALIBRATED
    summary = fit_now(engine, sf)
    assert summary["injects"], summary
    assert summary["intents"] == ["book_reservation", "cancel_reservation"]
    with engine.connect() as conn:
        row = conn.execute(select(applicability_rules).where(applicability_rules.c.agent_id == A)).mappings().one()
    assert row["user_id"] == U and row["cycle"] == 1 and len(row["fingerprint"]) == 64
    assert row["rule_view"] == summary["view"] and row["rule"]["floors"]
    # Openings' floors are stored and reported (only those raised above the intent's floor), their counts too.
    # Every standalone run is an opening (its request before any call: what prepare(query) sees), so the
    # openings are its 36 writes and 24 look-ups.
    assert set(row["rule"]["opening_floors"]) == set(summary["opening_floors"]) <= set(row["rule"]["floors"])
    assert (summary["inner"]["opening_positives"], summary["inner"]["opening_negatives"]) == (36, 24)
    # Same requests, two classes: the champion (higher success) for a fresh conversation.
    assert sf.prepare("please cancel my reservation", U).skill_ids == (ids["cancel-a"],)
    # The calls already made continue only cancel-b's procedure: that one is preferred.
    conv = Conversation(("hi",), (ToolCall("get_user_details"), ToolCall("search_direct_flight")))
    assert sf.prepare("please cancel my reservation", U, conversation=conv).skill_ids == (ids["cancel-b"],)
    # Calls no cancel procedure ever made before the write: contradiction, nothing injected.
    conv = Conversation((), (ToolCall("list_all_airports"),))
    assert sf.prepare("please cancel my reservation", U, conversation=conv).skill_ids == ()
    # The agent's attempt at the cancel errored: it retries, still before the write, and gets the skill of the
    # procedure its reads follow (the failed attempt is not a step of it).
    messages = [
        {"role": "user", "content": "please cancel my reservation"},
        {"role": "assistant", "tool_calls": [
            {"id": "1", "function": {"name": "get_user_details", "arguments": "{}"}},
            {"id": "2", "function": {"name": "search_direct_flight", "arguments": "{}"}},
            {"id": "3", "function": {"name": "cancel_reservation", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "3", "content": "Error: reservation not found"},
    ]  # fmt: skip
    conv = Conversation.from_messages(messages)
    assert sf.prepare("please cancel my reservation", U, conversation=conv).skill_ids == (ids["cancel-b"],)
    # A request the tenant's history answers without a skill gets none.
    assert sf.prepare("what is the baggage allowance", U).skill_ids == ()
    assert sf.prepare("book me a flight to paris", U).skill_ids == (ids["book"],)
    # Another tenant never sees this rule or these skills.
    assert sf.prepare("please cancel my reservation", "someone-else").skill_ids == ()


def test_a_rule_replaced_by_an_overlapping_cycle_is_saved_again(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: two cycles past the lease both replaced the rule; one insert failed the whole partition."""
    from sqlalchemy.exc import IntegrityError

    from skillflow.promotion import calibrate as stage

    sf, _ = setup(engine)
    real, calls = stage.save_rule, []

    def loses_the_race_once(conn: Any, *args: Any) -> None:
        calls.append(1)
        if len(calls) == 1:  # the other cycle's insert committed between our delete and our insert
            raise IntegrityError("INSERT INTO applicability_rules", {}, Exception("duplicate key"))
        real(conn, *args)

    monkeypatch.setattr(stage, "save_rule", loses_the_race_once)
    assert fit_now(engine, sf)["injects"]
    assert len(calls) == 2
    with engine.connect() as conn:
        assert conn.execute(select(applicability_rules.c.cycle).where(applicability_rules.c.agent_id == A)).all()


def test_a_stale_rule_fails_safe_until_the_next_fit(engine: Engine) -> None:
    sf, ids = setup(engine)
    fit_now(engine, sf)
    assert sf.prepare("please cancel my reservation", U).skill_ids == (ids["cancel-a"],)
    with engine.begin() as conn:  # the live skills change (a reviewer retires one)
        transition(conn, ids["cancel-b"], SkillStatus.DEPRECATED, actor="test")
    sel = sf.select_skills("please cancel my reservation", U)
    assert sel.state == STALE and sel.skills == []
    assert sf.prepare("please cancel my reservation", U).skill_ids == ()
    fit_now(engine, sf, cycle=2)  # refit for the new live set
    assert sf.prepare("please cancel my reservation", U).skill_ids == (ids["cancel-a"],)


def test_a_rule_that_cannot_meet_the_budget_injects_nothing(engine: Engine) -> None:
    sf, _ = setup(engine)
    assert sf.config is not None
    strict = sf.config.merged({"applicability_min_negatives": 10_000})
    summary = calibrate(engine, A, U, strict, 1, embedder=EMB)
    assert not summary["injects"] and "needed" in summary["reason"]
    assert sf.select_skills("please cancel my reservation", U).skills == []


def test_one_representation_with_conversations_in_the_per_call_loop(engine: Engine) -> None:
    sf, ids = setup(engine)
    fit_now(engine, sf)
    with engine.connect() as conn:
        src = conn.execute(
            select(workflow_memory.c.id, workflow_memory.c.canonical_hash).where(workflow_memory.c.agent_id == A)
        ).all()
    skill_hash = {h for _, h in src}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "please cancel my reservation"}]
    workflows = [{"id": wid, "canonical_hash": h, "query": "q"} for wid, h in src[:6]]
    for turn in range(3):  # the agent calls prepare before every model call
        conv = Conversation.from_messages(messages)
        prepared = sf.prepare(messages[-1]["content"], U, conversation=conv, history=messages[:-1], workflows=workflows)
        wire = json.dumps(prepared.request)
        for sid in prepared.skill_ids:
            name = next(n for n, i in ids.items() if i == sid)
            assert wire.count(f"BODY[{name}]") == 1
        rendered = {s.canonical_hash for s in prepared.skills}
        assert not any(w["canonical_hash"] in rendered for w in prepared.assembled.workflows)
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"t{turn}", "type": "function", "function": {"name": "get_user_details", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": f"t{turn}", "content": "{}"},
            {"role": "user", "content": "yes, please proceed"},
        ]
    assert skill_hash


def test_every_cycle_refits_and_reports_the_rule(engine: Engine) -> None:
    from skillflow.kernel.config import Settings
    from skillflow.promotion.cycle import run_partition

    sf, ids = setup(engine)
    assert sf.config is not None
    report = run_partition(engine, A, U, sf.config, dry_run=True, settings=Settings(embedder="hashing"))
    assert report.applicability is not None and report.applicability["injects"]
    with engine.connect() as conn:  # a dry run stores nothing
        assert conn.execute(select(applicability_rules.c.agent_id)).first() is None
    report = run_partition(engine, A, U, sf.config, settings=Settings(embedder="hashing"))
    assert report.applicability is not None and report.applicability["live_skills"] == 3
    with engine.connect() as conn:
        assert conn.execute(select(applicability_rules.c.cycle)).scalar() == report.cycle
    assert sf.prepare("please cancel my reservation", U).skill_ids == (ids["cancel-a"],)


@pytest.mark.parametrize(
    "damage",
    [
        {"weights": "not base64!"},
        {"exemplar_labels": [99]},
        {"floors": {"cancel_reservation": "NaN"}},  # float("NaN"): every comparison with a score is False
        {"skills": [{"intent": "cancel_reservation"}]},
        {"labels": "cancel_reservation"},
        {"dim": -3},
    ],
)
def test_an_unreadable_stored_rule_injects_nothing_once_and_the_next_cycle_refits(
    engine: Engine, damage: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A stored rule document damaged in the database (by hand, by a bad restore): ``prepare`` injects nothing
    with a clear reason, warns once rather than at every model call, and the next cycle fits it again even
    though the document still carries the key of the inputs it was fitted on."""
    sf, ids = setup(engine)
    fit_now(engine, sf)
    with engine.begin() as conn:
        doc = dict(conn.execute(select(applicability_rules.c.rule).where(applicability_rules.c.agent_id == A)).one()[0])
        conn.execute(applicability_rules.update().where(applicability_rules.c.agent_id == A).values(rule=doc | damage))
    RULES.clear()
    for _ in range(3):
        sel = sf.select_skills("please cancel my reservation", U)
        assert sel.state == UNREADABLE and sel.skills == [] and "refit" in sel.reason
        assert sf.prepare("please cancel my reservation", U).skill_ids == ()
    assert sum("unreadable" in r.getMessage() for r in caplog.records) == 1
    assert fit_now(engine, sf, cycle=2)["injects"]
    assert sf.prepare("please cancel my reservation", U).skill_ids == (ids["cancel-a"],)
