"""The applicability fit is kept when its inputs are unchanged and redone when they change (SQLite, PostgreSQL).

A cycle or status change whose tenant history, live skills, declared tools, model and configuration are those
of the stored rule keeps that rule: same row, same cycle, same ``fitted_at``. A new run, another live set or a
changed budget refits (docs/guide/runtime.md, "When the rule is refitted").
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select, update

from skillflow.injection.applicability import RULES
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import InjectionRole, SkillStatus, Step
from skillflow.lifecycle.decisions import demote_skill
from skillflow.promotion import calibrate as calibrate_module
from skillflow.promotion.calibrate import FIT_KEY, calibrate
from skillflow.runtime import Skillflow
from skillflow.storage.schema import applicability_rules, workflow_memory
from skillflow.storage.skills import insert_skill, transition

EMB = HashingEmbedder()
A, U = "air", "u1"
CONFIG = PromotionConfig(retrieval_min_similarity=0.3, require_shadow=False)
CANCEL = ["please cancel my reservation", "cancel my booking please", "I want to cancel my reservation now"]
OTHER = ["what is the baggage allowance", "how many bags can I check", "what does the baggage policy say"]
TAILS = ["", "thanks", "today", "for my trip", "right away", "if possible", "soon", "asap", "for tomorrow", "kindly"]
CANCEL_TOOLS = ["get_reservation_details", "cancel_reservation"]


def _record(sf: Skillflow, i: int) -> str:
    """One cancel and one look-up no skill answers; the cancel's class hash."""
    q = f"{OTHER[i % 3]} {TAILS[i % 10]} {TAILS[(i * 3 + 1) % 10]}"
    sf.record_run(q, U, [Step("get_user_details", {"id": "x"})], strict=True)
    q = f"{CANCEL[i % 3]} {TAILS[i % 10]} {TAILS[(i * 7 + 3) % 10]}"
    steps = [Step(t, {"id": "x"}) for t in CANCEL_TOOLS]
    return sf.record_run(q, U, steps, strict=True).canonical_hash or ""


def _tenant(engine: Engine) -> tuple[Skillflow, str]:
    """16 cancels and 16 look-ups; the cancel skill live."""
    RULES.clear()
    sf = Skillflow(agent_id=A, engine=engine, config=CONFIG, embedder=EMB, continual_learning=True)
    chash = [_record(sf, i) for i in range(16)][-1]
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id=A,
            user_id=U,
            canonical_hash=chash,
            name="cancel-reservation",
            description="cancel procedure",
            content="BODY[cancel]",
            status=SkillStatus.SHADOW,
            injection_role=InjectionRole.USER,
            tools=CANCEL_TOOLS,
            trigger_queries=[CANCEL[0]],
            source_workflow_ids=[],
            baseline={"success_rate": 0.95, "executions": 12},
        )
        transition(conn, skill.id, SkillStatus.ACTIVE, actor="test", injection_role=InjectionRole.USER)
    return sf, skill.id


def _row(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(select(applicability_rules)).mappings().one())


def test_unchanged_inputs_keep_the_stored_rule(engine: Engine) -> None:
    sf, _ = _tenant(engine)
    first = calibrate(engine, A, U, CONFIG, 1, embedder=EMB)
    fitted = _row(engine)
    assert first["injects"] and fitted["cycle"] == 1 and len(fitted["rule"][FIT_KEY]) == 64
    # The next cycle sees the same history, skills and configuration: the row is the one fitted in cycle 1.
    again = calibrate(engine, A, U, CONFIG, 2, embedder=EMB)
    assert _row(engine) == fitted
    assert again == first  # the report shows the kept rule exactly as the fit reported it
    assert sf.prepare("please cancel my reservation", U).skill_ids != ()


def test_a_new_run_refits(engine: Engine) -> None:
    sf, _ = _tenant(engine)
    calibrate(engine, A, U, CONFIG, 1, embedder=EMB)
    fitted = _row(engine)
    _record(sf, 16)
    calibrate(engine, A, U, CONFIG, 2, embedder=EMB)
    refit = _row(engine)
    assert refit["cycle"] == 2 and refit["fitted_at"] >= fitted["fitted_at"]
    assert refit["rule"][FIT_KEY] != fitted["rule"][FIT_KEY]


def test_a_changed_outcome_refits_and_a_failed_run_of_the_skill_is_a_negative(engine: Engine) -> None:
    """A conversation outcome given later (or a re-evaluation) turns a run failed: the fit reads outcomes, so the
    key changes, and the run (the live skill's own procedure) becomes a negative (docs/guide/runtime.md,
    "Which skill, or none")."""
    _tenant(engine)
    calibrate(engine, A, U, CONFIG, 1, embedder=EMB)
    fitted = _row(engine)
    with engine.begin() as conn:
        newest = conn.execute(
            select(workflow_memory.c.id)
            .where(workflow_memory.c.tool_sequence.contains("cancel_reservation"))
            .order_by(workflow_memory.c.created_at.desc())
            .limit(1)
        ).scalar_one()
        conn.execute(update(workflow_memory).where(workflow_memory.c.id == newest).values(outcome="failure"))
    runs = calibrate_module.history_runs(engine, A, U, CONFIG)
    assert {r.outcome for r in runs if r.run_id == newest} == {"failure"}
    calibrate(engine, A, U, CONFIG, 2, embedder=EMB)
    refit = _row(engine)
    assert refit["cycle"] == 2 and refit["rule"][FIT_KEY] != fitted["rule"][FIT_KEY]
    # Each of the run's call points (its request before any call, then before each of its calls but the write).
    calls = len(next(r for r in runs if r.run_id == newest).tool_sequence.split(" > "))
    assert calls >= 2 and refit["rule"]["inner"]["negatives"] == fitted["rule"]["inner"]["negatives"] + calls


def test_a_changed_budget_refits(engine: Engine) -> None:
    _tenant(engine)
    calibrate(engine, A, U, CONFIG, 1, embedder=EMB)
    strict = CONFIG.merged({"applicability_min_negatives": 10_000})
    summary = calibrate(engine, A, U, strict, 2, embedder=EMB)
    assert not summary["injects"] and "needed" in summary["reason"]
    assert _row(engine)["cycle"] == 2 and not _row(engine)["rule"]["floors"]


def test_a_status_change_refits_for_the_new_live_set(engine: Engine) -> None:
    _, skill_id = _tenant(engine)
    calibrate(engine, A, U, CONFIG, 1, embedder=EMB)
    fitted = _row(engine)
    demote_skill(engine, skill_id, "wrong advice", actor="reviewer", embedder=EMB)  # refits after its commit
    refit = _row(engine)
    assert refit["fingerprint"] != fitted["fingerprint"] and refit["rule"]["skills"] == []
    assert refit["rule"][FIT_KEY] != fitted["rule"][FIT_KEY] and refit["cycle"] == 1


def test_changed_fitting_code_refits(engine: Engine, monkeypatch: Any) -> None:
    """An upgrade whose fit differs refits an unchanged tenant once, even at the same package version."""
    _tenant(engine)
    calibrate(engine, A, U, CONFIG, 1, embedder=EMB)
    fitted = _row(engine)
    monkeypatch.setattr(calibrate_module, "fit_code", lambda: "another fit")
    calibrate(engine, A, U, CONFIG, 2, embedder=EMB)
    refit = _row(engine)
    assert refit["cycle"] == 2 and refit["rule"][FIT_KEY] != fitted["rule"][FIT_KEY]


def test_fit_code_digests_the_fitting_modules() -> None:
    assert len(calibrate_module.fit_code()) == 64 and calibrate_module.fit_code() == calibrate_module.fit_code()
