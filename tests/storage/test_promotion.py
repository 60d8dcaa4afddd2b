"""The promotion pipeline on SQLite and PostgreSQL: gates, store and stamp, dry run, backoff, sweep, cadence."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.kernel.models import InjectionRole, SkillStatus, utcnow
from skillflow.promotion import backends, distill
from skillflow.promotion.cycle import promote_class, run_partition
from skillflow.promotion.gates import COVERED, INSUFFICIENT, UNKNOWN_CLASS
from skillflow.promotion.landing import ACTOR
from skillflow.storage.schema import class_state, partition_state, reports, skill_events, skill_vectors, workflow_memory
from skillflow.storage.skills import get_skill, insert_skill, list_skills, transition
from tests.support.promotion import (
    AGENT,
    agent,
    config,
    counts,
    payment_accepted,
    record_cancel,
    record_payment,
)

pytestmark = pytest.mark.usefixtures("offline_providers")


def seed_cancel(sf: Any, user: str = "u1", n: int = 6, fail: int = 0) -> str:
    h = ""
    for i in range(n):
        h = record_cancel(sf, user, i, ok=i >= fail)
    return h


def rows(engine: Engine, table: Any, *where: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(table).where(*where)).mappings())


def test_cycle_promotes_and_stamps_an_eligible_class(engine: Engine) -> None:
    sf = agent(engine)
    h = seed_cancel(sf, n=6)
    few = record_payment(sf, "u1", 0, accepted=True)  # one run: below every count gate
    report = run_partition(engine, AGENT, "u1", sf.config, flow_run_id="run-1")

    assert report.candidates_considered == 2 and report.rejected == []
    [skill_id] = report.promoted
    assert (few, "executions 1 < 5") in report.skipped
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
    assert (skill.status, skill.version, skill.injection_role) == ("active", 1, "user")
    assert (
        skill.canonical_hash == h
        and skill.tools
        and set(skill.tools)
        <= set(sf.config.noop_tools)
        | {
            "get_reservation_details",
            "cancel_reservation",
        }
    )
    assert skill.baseline is not None and skill.baseline["executions"] == 6 and skill.baseline["success_rate"] == 1.0
    assert {"window_start", "window_end"} <= set(skill.baseline)
    assert skill.validation and all(skill.validation.values())
    assert sorted(skill.source_workflow_ids or []) == sorted(f"cancel-u1-{i}" for i in range(1, 6))
    assert skill.trigger_queries and len(skill.trigger_queries) <= 8
    for q in skill.trigger_queries:  # redacted: no reservation id of any source run reaches the skill
        assert "ZQ73" not in q
    assert "ZQ73" not in skill.content and "card_9" not in skill.content
    # every run of the class is stamped, the other class is not
    stamped = rows(engine, workflow_memory, workflow_memory.c.canonical_hash == h)
    assert len(stamped) == 6 and {r["promoted_skill_id"] for r in stamped} == {skill_id}
    assert rows(engine, workflow_memory, workflow_memory.c.canonical_hash == few)[0]["promoted_skill_id"] is None
    assert len(rows(engine, skill_vectors, skill_vectors.c.skill_id == skill_id)) == 1 + len(skill.trigger_queries)
    [event] = rows(engine, skill_events, skill_events.c.skill_id == skill_id)
    assert (event["actor"], event["flow_run_id"], event["to_status"]) == (ACTOR, "run-1", "active")
    [stored] = rows(engine, reports)
    assert stored["kind"] == "promotion" and stored["body"]["promoted"] == [skill_id]
    assert rows(engine, partition_state)[0]["cycle_count"] == 1
    gate = {g.canonical_hash: g for g in report.gates}
    assert gate[h].decision == "promoted" and gate[h].score and gate[few].decision == "ineligible"

    # A second cycle sees the class covered and promotes nothing new.
    again = run_partition(engine, AGENT, "u1", sf.config)
    assert again.promoted == [] and (h, COVERED) in again.skipped
    assert rows(engine, partition_state)[0]["cycle_count"] == 2


def test_shadow_with_developer_role_lands_shadow_unstamped(engine: Engine) -> None:
    sf = agent(engine, require_shadow=True, skill_injection_role="developer")
    h = seed_cancel(sf)
    report = run_partition(engine, AGENT, "u1", sf.config)
    [skill_id] = report.promoted
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
    assert (skill.status, skill.injection_role) == (SkillStatus.SHADOW.value, InjectionRole.DEVELOPER.value)
    assert {r["promoted_skill_id"] for r in rows(engine, workflow_memory, workflow_memory.c.canonical_hash == h)} == {
        None
    }
    assert any(skill_id in flag and "SHADOW" in flag for flag in report.review_flags)


def test_business_outcome_contrast_declined_payment(engine: Engine) -> None:
    """Execution-only outcomes promote the declined-payment procedure; the business evaluator stops it."""
    plain = agent(engine)
    for i in range(6):
        h = record_payment(plain, "exec", i, accepted=i % 3 == 0)
    report = run_partition(engine, AGENT, "exec", plain.config)
    assert len(report.promoted) == 1

    business = agent(engine, evaluator=payment_accepted)
    for i in range(6):
        record_payment(business, "biz", i, accepted=i % 3 == 0)
    report = run_partition(engine, AGENT, "biz", business.config)
    assert report.promoted == [] and report.skipped == [(h, "success_rate 0.33 < 0.8")]
    assert report.gates[0].checks["success_rate"] is False


def test_dry_run_writes_nothing(engine: Engine) -> None:
    sf = agent(engine)
    h = seed_cancel(sf)
    before = counts(engine)
    report = run_partition(engine, AGENT, "u1", sf.config, dry_run=True)
    assert report.dry_run and report.promoted == [] and report.would_promote == [h]
    assert counts(engine) == before


def insufficient(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []

    class Refuses:
        name, prompt_version = "refuses", "test-v1"

        def distill(self, evidence: Any, max_chars: int) -> Any:
            seen.append(evidence)
            return distill.DistillOutcome(None, True, self.name, self.prompt_version, ["contradictory runs"])

    monkeypatch.setattr(backends, "get_distiller", lambda settings=None: Refuses())
    return seen


def test_rejection_backoff_then_retry_then_cleared(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    sf = agent(engine, rejection_backoff_cycles=2)
    h = seed_cancel(sf)
    original = backends.get_distiller
    seen = insufficient(monkeypatch)
    r1 = run_partition(engine, AGENT, "u1", sf.config)
    assert r1.rejected == [(h, [INSUFFICIENT, "contradictory runs"])] and len(seen) == 1
    [state] = rows(engine, class_state)
    assert (state["rejections"], state["last_rejected_cycle"], state["retry_after_cycle"]) == (1, 1, 3)
    for cycle in (2, 3):
        r = run_partition(engine, AGENT, "u1", sf.config)
        assert r.cycle == cycle and r.skipped == [(h, "backoff: retry after cycle 3")] and len(seen) == 1
        assert r.gates[0].decision == "backoff"
    r4 = run_partition(engine, AGENT, "u1", sf.config)
    assert r4.rejected and len(seen) == 2 and rows(engine, class_state)[0]["rejections"] == 2
    monkeypatch.setattr(backends, "get_distiller", original)
    # Backoff until cycle 6; a "Distill now" is not held back by it, and a promotion clears it.
    report = promote_class(engine, AGENT, "u1", h[:10], sf.config)
    assert len(report.promoted) == 1 and rows(engine, class_state) == []


def test_staleness_sweep_deprecates_skills_with_removed_tools(engine: Engine) -> None:
    sf = agent(engine)
    h = seed_cancel(sf)
    report = run_partition(engine, AGENT, "u1", sf.config)
    [skill_id] = report.promoted
    sf.register_tools(["get_reservation_details", "lookup_order"])  # cancel_reservation removed
    swept = run_partition(engine, AGENT, "u1", sf.config, flow_run_id="sweep-run")
    assert swept.deprecated == [(skill_id, "tool removed: cancel_reservation")]
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
    assert skill.status == "deprecated" and skill.demotion_reason == "tool removed: cancel_reservation"
    assert {r["promoted_skill_id"] for r in rows(engine, workflow_memory, workflow_memory.c.canonical_hash == h)} == {
        None
    }
    event = rows(engine, skill_events, skill_events.c.skill_id == skill_id, skill_events.c.to_status == "deprecated")
    assert event[0]["actor"] == ACTOR and event[0]["flow_run_id"] == "sweep-run"
    # Deprecation resets the class: old runs no longer count, so it is not re-promoted at once.
    assert swept.promoted == []


def test_redistillation_after_demotion_is_a_new_version_with_the_reason(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sf = agent(engine)
    seed_cancel(sf)
    first = run_partition(engine, AGENT, "u1", sf.config)
    with engine.begin() as conn:
        transition(
            conn, first.promoted[0], SkillStatus.DEMOTED, actor="test", reason="drift: rolling 0.40 vs baseline 1.00"
        )
    for i in range(10, 16):  # post-demotion evidence
        record_cancel(sf, "u1", i, when=utcnow() + timedelta(seconds=i))
    second = run_partition(engine, AGENT, "u1", sf.config)
    with engine.connect() as conn:
        skills = list_skills(conn, AGENT, "u1")
    assert [(s.version, s.status) for s in skills] == [(1, "demoted"), (2, "active")]
    assert second.promoted == [skills[1].id]
    assert sorted(skills[1].source_workflow_ids or []) == sorted(f"cancel-u1-{i}" for i in range(11, 16))
    seen = insufficient(monkeypatch)
    with engine.begin() as conn:
        transition(conn, skills[1].id, SkillStatus.DEMOTED, actor="test", reason="drift again")
    for i in range(20, 26):
        record_cancel(sf, "u1", i, when=utcnow() + timedelta(seconds=i))
    run_partition(engine, AGENT, "u1", sf.config)
    assert seen[0].previous_demotion_reason == "drift again" and seen[0].version == 3


def test_cadence(engine: Engine) -> None:
    sf = agent(engine, promotion_every_n_runs=10)
    seed_cancel(sf, n=9)
    r = run_partition(engine, AGENT, "u1", sf.config, force=False)
    assert r.partition_skipped == "cadence: 9 runs since last cycle < 10" and r.promoted == []
    record_cancel(sf, "u1", 9)
    r = run_partition(engine, AGENT, "u1", sf.config, force=False)
    assert r.partition_skipped is None and len(r.promoted) == 1
    r = run_partition(engine, AGENT, "u1", sf.config, force=False)
    assert r.partition_skipped == "cadence: 0 runs since last cycle < 10"
    manual = config(promotion_every_n_runs=0)
    r = run_partition(engine, AGENT, "u1", manual, force=False)
    assert r.partition_skipped == "manual only: promotion_every_n_runs = 0"
    r = run_partition(engine, AGENT, "u1", manual, force=True)
    assert r.partition_skipped is None


def test_promote_class_runs_the_same_gates(engine: Engine) -> None:
    sf = agent(engine)
    h = seed_cancel(sf, n=4)  # below min_executions
    assert promote_class(engine, AGENT, "u1", "ffff0000", sf.config).skipped == [("ffff0000", UNKNOWN_CLASS)]
    report = promote_class(engine, AGENT, "u1", h[:8], sf.config)
    assert report.promoted == [] and report.skipped == [(h, "executions 4 < 5")]
    record_cancel(sf, "u1", 4)
    report = promote_class(engine, AGENT, "u1", h, sf.config, flow_run_id="distill-1")
    assert len(report.promoted) == 1 and report.mode == "distill"
    stored = rows(engine, reports)
    marks = [(r["cycle_count"], r["last_cycle_at"]) for r in rows(engine, partition_state)]
    assert len(stored) == 3 and set(marks) <= {(0, None)}  # a "Distill now" is not a cycle (the fold counts runs)


def test_partitions_are_isolated(engine: Engine) -> None:
    sf = agent(engine)
    seed_cancel(sf, user="u1")
    seed_cancel(sf, user="u2", n=3)
    reports_ = {(AGENT, u): run_partition(engine, AGENT, u, sf.config) for u in ("u1", "u2")}
    assert len(reports_[(AGENT, "u1")].promoted) == 1 and reports_[(AGENT, "u2")].promoted == []
    u2 = rows(engine, workflow_memory, workflow_memory.c.user_id == "u2")
    assert {r["promoted_skill_id"] for r in u2} == {None}


def test_live_key_blocks_a_second_live_skill(engine: Engine) -> None:
    sf = agent(engine)
    h = seed_cancel(sf)
    with engine.begin() as conn:
        insert_skill(
            conn,
            agent_id=AGENT,
            user_id="u1",
            canonical_hash=h,
            name="hand-made",
            description="x",
            content="---\nname: hand-made\n---\n",
            status=SkillStatus.CANDIDATE,
        )
    r = run_partition(engine, AGENT, "u1", sf.config)
    assert r.promoted == [] and (h, COVERED) in r.skipped


@pytest.mark.parametrize("outcome", ["execution", "reward"])
def test_tau_bench_reward_outcomes_promote_no_class_below_a_gate(
    sqlite_engine: Engine, tau_bench_path: Any, outcome: str
) -> None:
    from skillflow.lab.ingest.tau_bench import ingest_tau_bench
    from skillflow.runtime import Skillflow

    cfg = config(require_shadow=True, max_promotions_per_cycle=20)
    sf = Skillflow(agent_id="tau-bench-airline", engine=sqlite_engine, config=cfg)
    ingest_tau_bench(tau_bench_path, sf, outcome=outcome, unit="turn")  # type: ignore[arg-type]
    report = run_partition(sqlite_engine, "tau-bench-airline", "shared", cfg, dry_run=True)
    with sqlite_engine.connect() as conn:
        cancel = conn.execute(
            select(workflow_memory.c.canonical_hash).where(workflow_memory.c.tool_sequence == "cancel_reservation")
        ).scalar()
    gate = {g.canonical_hash: g for g in report.gates}
    assert gate[cancel].executions >= 30  # the frequent per-turn cancel-reservation procedure
    would = set(report.would_promote)
    assert all(gate[h].checks and all(gate[h].checks.values()) for h in would)  # nothing below a gate
    if outcome == "execution":  # tools never raised: the cancel procedure looks perfect
        assert gate[cancel].success_rate == 1.0 and cancel in would
    else:  # the task reward tells the truth
        assert report.would_promote == [] and report.promoted == []
        rate = gate[cancel].success_rate
        assert rate < 0.5 and (cancel, f"success_rate {rate:.2f} < 0.8") in report.skipped


def test_staleness_sweep_deprecates_a_live_skill_whose_tool_was_declared_a_handoff(engine: Engine) -> None:
    """A skill promoted before its tool was declared a hand-off: the next cycle's sweep deprecates it, unless
    ``promote_handoff_classes``."""
    from skillflow.promotion.gates import HANDOFF_CLASS

    sf = agent(engine)
    seed_cancel(sf)
    [skill_id] = run_partition(engine, AGENT, "u1", sf.config).promoted
    tools = ["get_reservation_details", "cancel_reservation"]
    sf.register_tools(tools, hands_off=["cancel_reservation"])
    allowed = sf.config.model_copy(update={"promote_handoff_classes": True})
    assert run_partition(engine, AGENT, "u1", allowed, dry_run=True).deprecated == []
    reason = f"{HANDOFF_CLASS} (cancel_reservation)"
    swept = run_partition(engine, AGENT, "u1", sf.config, flow_run_id="sweep-run")
    assert swept.deprecated == [(skill_id, reason)]
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
    assert (skill.status, skill.demotion_reason) == ("deprecated", reason)


def _three_skills_losing_tools(engine: Engine) -> list[str]:
    """Three ACTIVE skills of one tenant, in the sweep's order (class, version), each calling a removed tool."""
    sf = agent(engine)
    sf.register_tools(["lookup_order"])
    ids = []
    with engine.begin() as conn:
        for i, tool in enumerate(("cancel_a", "cancel_b", "cancel_c")):
            skill = insert_skill(
                conn, agent_id=AGENT, user_id="u1", canonical_hash=f"{i}" * 64, name=f"skill-{i}",
                description="d", content="x", status=SkillStatus.ACTIVE, tools=["lookup_order", tool],
            )  # fmt: skip
            ids.append(skill.id)
    return ids


def test_a_retried_sweep_reports_its_earlier_deprecations_in_the_clean_order(engine: Engine) -> None:
    """A sweep whose earlier attempt deprecated the last skill in its order before it was killed, retried under
    the same flow-run id, reports what a sweep without the crash reports, in its order, the earlier one with its
    stored reason; a skill another flow run deprecated is not reported."""
    from skillflow.promotion.staleness import sweep

    a, b, c = _three_skills_losing_tools(engine)
    with engine.begin() as conn:
        transition(conn, c, SkillStatus.DEPRECATED, actor=ACTOR, reason="tool removed: cancel_c", flow_run_id="run")
        transition(conn, a, SkillStatus.DEPRECATED, actor=ACTOR, reason="tool removed: cancel_a", flow_run_id="old")
    got = sweep(engine, AGENT, "u1", actor=ACTOR, flow_run_id="run").deprecated
    assert got == [(b, "tool removed: cancel_b"), (c, "tool removed: cancel_c")]
    assert sweep(engine, AGENT, "u1", actor=ACTOR, flow_run_id="run").deprecated == got  # asked again: the same
    assert sweep(engine, AGENT, "u1", actor=ACTOR, flow_run_id="next").deprecated == []  # a new run: nothing


def test_a_procedure_served_one_request_is_not_promoted_for_failing_another(engine: Engine) -> None:
    """Five successes of one request and a declined payment for another: the procedure succeeded on one request,
    so the distinct-queries gate holds it back (an outside audit found the failed request counted)."""
    sf = agent(engine, evaluator=payment_accepted)
    for i in range(6):
        accepted = i < 5
        steps = [
            {"tool": "lookup_order", "arguments": {"order_id": "OR5120Z"}, "result": {"total": 120}},
            {"tool": "charge_payment", "arguments": {"order_id": "OR5120Z"}, "result": {"accepted": accepted}},
        ]
        query = "Please pay for my order" if accepted else "Charge the other order now"
        result = sf.record_run(query, "one", steps, run_id=f"one-{i}", created_at=utcnow() - timedelta(minutes=9 - i))
        assert result.stored, result.error
    report = run_partition(engine, AGENT, "one", sf.config)
    [gate] = report.gates
    assert (gate.executions, gate.success_rate, gate.distinct_queries) == (6, 0.8333, 1)
    assert report.promoted == [] and report.skipped == [(gate.canonical_hash, "distinct_queries 1 < 2")]
