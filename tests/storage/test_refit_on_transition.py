"""The applicability rule is refit right after the live skills change, on SQLite and PostgreSQL.

Activation, demotion, rejection, deprecation (staleness), drift demotion and rollback each refit the
tenant's stored rule after their own transaction: an activated skill is injected by the very next
``prepare``; a refit failure never fails or undoes the transition and leaves the stale rule (inject nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import Engine, select

from skillflow.injection.applicability import CURRENT, RULES, STALE, UNCALIBRATED
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import InjectionRole, SkillStatus, Step, utcnow
from skillflow.lifecycle.decisions import activate_skill, demote_skill, reject_skill
from skillflow.lifecycle.drift import run_drift
from skillflow.lifecycle.rollback import rollback_skill
from skillflow.promotion.calibrate import calibrate
from skillflow.promotion.refit import refresh_rule
from skillflow.promotion.staleness import sweep
from skillflow.runtime import Skillflow
from skillflow.storage.schema import applicability_rules
from skillflow.storage.skills import get_skill, insert_skill, transition

EMB = HashingEmbedder()
A, U = "air", "u1"
CANCEL = ["please cancel my reservation", "cancel my booking please", "I want to cancel my reservation now"]
BOOK = ["book me a flight to paris", "I need to book a new flight", "please book a one way flight"]
OTHER = ["what is the baggage allowance", "how many bags can I check", "what does the baggage policy say"]
TAILS = ["", "thanks", "today", "for my trip", "right away", "if possible", "soon", "asap", "for tomorrow", "kindly"]
CANCEL_TOOLS = ["get_reservation_details", "cancel_reservation"]
BOOK_TOOLS = ["get_user_details", "search_direct_flight", "book_reservation"]
CONFIG = PromotionConfig(retrieval_min_similarity=0.3, require_shadow=False)


def _steps(tools: Sequence[str]) -> list[Step]:
    return [Step(t, {"id": "x"}) for t in tools]


def _history(sf: Skillflow) -> dict[str, str]:
    """24 cancels, 12 bookings, 24 look-ups no skill answers; class hash by name."""
    hashes: dict[str, str] = {}
    for i in range(24):
        q = f"{CANCEL[i % 3]} {TAILS[i % 10]} {TAILS[(i * 7 + 3) % 10]}"
        hashes["cancel"] = sf.record_run(q, U, _steps(CANCEL_TOOLS), strict=True).canonical_hash or ""
        q = f"{OTHER[i % 3]} {TAILS[i % 10]} {TAILS[(i * 3 + 1) % 10]}"
        sf.record_run(q, U, _steps(["get_user_details"]), strict=True)
    for i in range(12):
        q = f"{BOOK[i % 3]} {TAILS[i % 10]} {TAILS[(i * 7 + 5) % 10]}"
        hashes["book"] = sf.record_run(q, U, _steps(BOOK_TOOLS), strict=True).canonical_hash or ""
    return hashes


def _skill(engine: Engine, chash: str, name: str, status: SkillStatus, tools: list[str], version: int = 1) -> str:
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id=A,
            user_id=U,
            canonical_hash=chash,
            name=name,
            description=f"{name} procedure",
            # Canonical SKILL.md text: a rollback re-checks the text it reinstates.
            content=f'---\nname: {name}\ndescription: "{name} procedure"\n---\n\nFollow the {name} procedure.\n',
            status=SkillStatus.SHADOW,
            injection_role=InjectionRole.USER,
            tools=tools,
            trigger_queries=[CANCEL[0] if "cancel" in name else BOOK[0]],
            source_workflow_ids=[],
            baseline={"success_rate": 0.95, "executions": 12},
            version=version,
        )
        if status != SkillStatus.SHADOW:
            transition(conn, skill.id, status, actor="test", injection_role=InjectionRole.USER)
    return skill.id


@pytest.fixture
def tenant(engine: Engine) -> tuple[Skillflow, dict[str, str]]:
    """Bookings live and a fitted rule; the cancel skill waits in SHADOW for review."""
    RULES.clear()
    sf = Skillflow(agent_id=A, engine=engine, config=CONFIG, embedder=EMB, continual_learning=True)
    sf.register_tools(sorted({*CANCEL_TOOLS, *BOOK_TOOLS, "get_user_details"}))
    hashes = _history(sf)
    ids = {
        "book": _skill(engine, hashes["book"], "book-flight", SkillStatus.ACTIVE, BOOK_TOOLS),
        "cancel": _skill(engine, hashes["cancel"], "cancel-reservation", SkillStatus.SHADOW, CANCEL_TOOLS),
        "cancel_hash": hashes["cancel"],
    }
    assert calibrate(engine, A, U, CONFIG, 1, embedder=EMB)["injects"]
    return sf, ids


def _cancel(sf: Skillflow) -> tuple[str, ...]:
    return sf.prepare("please cancel my reservation", U).skill_ids


def _stored_cycle(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return [int(c) for c in conn.execute(select(applicability_rules.c.cycle)).scalars()]


def test_activation_is_injected_at_once_and_demotion_withdraws_it(
    engine: Engine, tenant: tuple[Skillflow, dict[str, str]]
) -> None:
    sf, ids = tenant
    assert _cancel(sf) == ()  # the cancel skill is not live: its requests are the tenant's own NONE
    activate_skill(engine, ids["cancel"], "user", actor="reviewer", config=CONFIG, embedder=EMB)
    sel = sf.select_skills("please cancel my reservation", U)
    assert sel.state == CURRENT and [s.skill_id for s in sel.skills] == [ids["cancel"]], sel
    assert _cancel(sf) == (ids["cancel"],)
    assert sf.prepare("what is the baggage allowance", U).skill_ids == ()
    assert _stored_cycle(engine) == [1]  # a refit replaces the row and keeps the cycle it was fitted in
    demote_skill(engine, ids["cancel"], "wrong advice", actor="reviewer", embedder=EMB)
    sel = sf.select_skills("please cancel my reservation", U)
    assert sel.state == CURRENT and sel.skills == []
    assert sf.prepare("book me a flight to paris", U).skill_ids == (ids["book"],)


def test_a_refit_failure_never_fails_the_transition_and_the_stale_rule_fails_safe(
    engine: Engine, tenant: tuple[Skillflow, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    sf, ids = tenant

    class Broken(HashingEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            raise RuntimeError("please cancel my reservation ZQ7310K")  # a payload in the error text

    caplog.set_level(logging.DEBUG)
    skill = activate_skill(engine, ids["cancel"], "user", actor="reviewer", config=CONFIG, embedder=Broken())
    with engine.connect() as conn:
        assert skill.status == get_skill(conn, ids["cancel"]).status == SkillStatus.ACTIVE.value
    sel = sf.select_skills("please cancel my reservation", U)
    assert sel.state == STALE and sel.skills == []
    assert _cancel(sf) == ()
    assert "refit failed (RuntimeError)" in caplog.text
    assert "ZQ7310K" not in caplog.text and "cancel my reservation" not in caplog.text
    assert refresh_rule(engine, A, U, embedder=EMB, config=CONFIG) == "refit"  # the next refit recovers
    assert _cancel(sf) == (ids["cancel"],)
    assert refresh_rule(engine, A, U, embedder=EMB, config=CONFIG) == "current"


def test_rejection_keeps_the_rule_and_staleness_deprecation_refits(
    engine: Engine, tenant: tuple[Skillflow, dict[str, str]]
) -> None:
    sf, ids = tenant
    with engine.connect() as conn:
        before = conn.execute(select(applicability_rules.c.fitted_at)).scalar()
    reject_skill(engine, ids["cancel"], "not needed", actor="reviewer", embedder=EMB)
    with engine.connect() as conn:  # the live set did not change: the rule is still current, not refit
        assert conn.execute(select(applicability_rules.c.fitted_at)).scalar() == before
    assert sf.select_skills("book me a flight to paris", U).state == CURRENT
    sf.register_tools(["get_user_details", *CANCEL_TOOLS])  # the booking tools are removed
    result = sweep(engine, A, U, actor="sweep", embedder=EMB)
    assert [sid for sid, _ in result.deprecated] == [ids["book"]]
    sel = sf.select_skills("book me a flight to paris", U)
    assert sel.state == CURRENT and sel.skills == [] and sel.reason == "no live skills"


def test_drift_demotion_refits(engine: Engine, tenant: tuple[Skillflow, dict[str, str]]) -> None:
    sf, ids = tenant
    activate_skill(engine, ids["cancel"], "user", actor="reviewer", config=CONFIG, embedder=EMB)
    assert _cancel(sf) == (ids["cancel"],)
    for i in range(10):  # 6 of 10 activations succeed against a 0.95 baseline
        sf.record_run(
            f"cancel reservation number {i}",
            U,
            _steps(CANCEL_TOOLS),
            skills_activated=(ids["cancel"],),
            execution_error="Timeout" if i < 4 else None,
            created_at=utcnow() + timedelta(seconds=i + 1),
            strict=True,
        )
    report = run_drift(engine, CONFIG, agent_id=A, user_id=U, embedder=EMB)
    assert [d.skill_id for d in report.demoted] == [ids["cancel"]]
    sel = sf.select_skills("please cancel my reservation", U)
    assert sel.state == CURRENT and sel.skills == []


def test_rollback_refits(engine: Engine, tenant: tuple[Skillflow, dict[str, str]]) -> None:
    sf, ids = tenant
    activate_skill(engine, ids["cancel"], "user", actor="reviewer", config=CONFIG, embedder=EMB)
    demote_skill(engine, ids["cancel"], "superseded", actor="reviewer", embedder=EMB)
    v2 = _skill(engine, ids["cancel_hash"], "cancel-reservation", SkillStatus.ACTIVE, CANCEL_TOOLS, version=2)
    refresh_rule(engine, A, U, embedder=EMB, config=CONFIG)
    assert _cancel(sf) == (v2,)
    rollback_skill(engine, v2, 1, actor="reviewer", reason="v2 regressed", config=CONFIG, embedder=EMB)
    assert sf.select_skills("please cancel my reservation", U).state == CURRENT
    assert _cancel(sf) == (ids["cancel"],)


def test_an_uncalibrated_tenant_stays_uncalibrated_until_its_first_cycle(engine: Engine) -> None:
    RULES.clear()
    sf = Skillflow(agent_id=A, engine=engine, config=CONFIG, embedder=EMB, continual_learning=True)
    sf.register_tools(CANCEL_TOOLS)
    hashes = _history(sf)
    sid = _skill(engine, hashes["cancel"], "cancel-reservation", SkillStatus.SHADOW, CANCEL_TOOLS)
    activate_skill(engine, sid, "user", actor="reviewer", config=CONFIG, embedder=EMB)
    with engine.connect() as conn:
        assert conn.execute(select(applicability_rules.c.agent_id)).first() is None
    assert sf.select_skills("please cancel my reservation", U).state == UNCALIBRATED
