"""Edit before activation, history, diff and rollback — on SQLite and PostgreSQL, with real distilled skills."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.lifecycle.decisions import ActivationRefused, activate_skill, demote_skill
from skillflow.lifecycle.history import diff_refs, history
from skillflow.lifecycle.revisions import EditRefused, current_revision, edit_skill, list_revisions
from skillflow.lifecycle.rollback import rollback_skill
from skillflow.promotion.cycle import run_partition
from skillflow.storage.schema import agent_tools, skill_events, skill_revisions, skill_vectors, workflow_memory
from skillflow.storage.skills import get_skill, list_skills
from tests.support.promotion import AGENT, agent, record_cancel

pytestmark = pytest.mark.usefixtures("offline_providers")


def shadow_skill(engine: Engine, user: str = "u1", start: int = 0) -> tuple[Any, str]:
    sf = agent(engine, require_shadow=True)
    for i in range(start, start + 6):
        record_cancel(sf, user, i, when=utcnow() - timedelta(minutes=60) + timedelta(seconds=i))
    report = run_partition(engine, AGENT, user, sf.config)
    assert report.promoted, report.rejected
    return sf, report.promoted[0]


def skill(engine: Engine, skill_id: str) -> Any:
    with engine.connect() as conn:
        return get_skill(conn, skill_id)


def events(engine: Engine, skill_id: str, event: str) -> list[Any]:
    with engine.connect() as conn:
        q = select(skill_events).where(skill_events.c.skill_id == skill_id, skill_events.c.event == event)
        return list(conn.execute(q).mappings())


def profile_vector(engine: Engine, skill_id: str) -> list[float]:
    with engine.connect() as conn:
        q = select(skill_vectors.c.embedding).where(skill_vectors.c.skill_id == skill_id, skill_vectors.c.ordinal == 0)
        return [float(x) for x in conn.execute(q).scalar_one()]


BETTER = "Use when the customer wants an existing booking cancelled and has named it; not for changes or refunds."


def edited(content: str) -> str:
    old = content.split("description: ", 1)[1].split("\n", 1)[0]
    return content.replace(old, f'"{BETTER}"').replace("Check each result", "Confirm each result")


def test_an_edit_that_introduces_a_source_literal_is_refused_and_not_stored(engine: Engine) -> None:
    sf, sid = shadow_skill(engine)
    before = skill(engine, sid)
    with engine.connect() as conn:
        rid = conn.execute(select(workflow_memory.c.id).where(workflow_memory.c.id == "cancel-u1-3")).scalar()
    assert rid
    leaky = before.content.replace("<id>.", "ZQ7313K.", 1)  # the reservation id of source run cancel-u1-3
    assert leaky != before.content
    with pytest.raises(EditRefused) as refused:
        edit_skill(engine, sid, leaky, editor="alice", config=sf.config)
    assert any("literal" in r for r in refused.value.reasons)
    assert not any("ZQ7313K" in r for r in refused.value.reasons)  # reasons never quote the value
    after = skill(engine, sid)
    assert after.content == before.content and after.updated_at == before.updated_at
    [event] = events(engine, sid, "edit_refused")
    assert event["actor"] == "alice" and "ZQ7313K" not in str(event["details"]) + str(event["reason"])
    with engine.connect() as conn:
        assert conn.execute(select(skill_revisions)).first() is None  # the refused text is stored nowhere


def test_an_edit_that_passes_is_a_new_revision_and_only_it_can_be_activated(engine: Engine) -> None:
    sf, sid = shadow_skill(engine)
    original = skill(engine, sid)
    vector_before = profile_vector(engine, sid)
    result = edit_skill(engine, sid, edited(original.content), editor="alice", config=sf.config, reason="clearer")
    assert (result.revision, result.changed) == (2, True) and result.checks["judge"] is True
    now = skill(engine, sid)
    assert now.description == BETTER and now.content == edited(original.content) and now.status == "shadow"
    assert profile_vector(engine, sid) != vector_before  # applicability rebuilt from the edited description
    with engine.connect() as conn:
        revs = list_revisions(conn, now)
    assert [(r.revision, r.editor) for r in revs] == [(1, "flow:promotion-cycle"), (2, "alice")]
    assert revs[0].content == original.content
    [event] = events(engine, sid, "edited")
    assert event["actor"] == "alice" and event["reason"] == "clearer"
    assert event["details"]["revision"] == 2 and "+description" in event["details"]["diff"]
    # the same text again is a no-op; an edit on a stale revision is refused
    assert edit_skill(engine, sid, now.content, editor="bob", config=sf.config).changed is False
    with pytest.raises(EditRefused):
        edit_skill(engine, sid, original.content, editor="bob", config=sf.config, expected_revision=1)
    # the reviewer saw revision 1: refused; revision 2: activated, and the event names it
    with pytest.raises(ActivationRefused) as refused:
        activate_skill(engine, sid, actor="carol", config=sf.config, revision=1)
    assert "revision 1 was reviewed" in refused.value.reasons[-1]
    active = activate_skill(engine, sid, actor="carol", config=sf.config, revision=2)
    assert active.status == "active" and active.content == edited(original.content)
    [activated] = events(engine, sid, "activated")
    assert activated["details"]["revision"] == 2
    with pytest.raises(EditRefused, match="cannot edit an active"):
        edit_skill(engine, sid, original.content, editor="bob", config=sf.config)


def test_an_edit_that_breaks_the_procedure_is_refused_by_the_judge(engine: Engine) -> None:
    sf, sid = shadow_skill(engine)
    content = skill(engine, sid).content
    swapped = content.replace("1. Call `get_reservation_details`", "1. Call `cancel_reservation`", 1).replace(
        "2. Call `cancel_reservation`", "2. Call `get_reservation_details`", 1
    )
    with pytest.raises(EditRefused) as refused:
        edit_skill(engine, sid, swapped, editor="alice", config=sf.config)
    assert any(r.startswith("judge:") for r in refused.value.reasons)
    with engine.connect() as conn:
        assert current_revision(conn, sid) == 1


def test_diff_and_history(engine: Engine) -> None:
    sf, sid = shadow_skill(engine)
    original = skill(engine, sid).content
    edit_skill(engine, sid, edited(original), editor="alice", config=sf.config)
    diff = diff_refs(engine, sid)
    assert diff.startswith("--- v1.1") and "\n+++ v1.2" in diff
    assert "-Check each result" in diff and "+Confirm each result" in diff
    assert diff_refs(engine, sid, "2", "1").count("+Check each result") == 1
    assert diff_refs(engine, sid, "v1.1", "v1.1") == ""
    with pytest.raises(ValueError, match="no revision 7"):
        diff_refs(engine, sid, "7")
    [version] = history(engine, sid)
    assert version["version"] == 1 and [r["editor"] for r in version["revisions"]] == ["flow:promotion-cycle", "alice"]
    assert [e["event"] for e in version["events"]] == ["created", "edited"]


def _demote_and_redistill(engine: Engine, sf: Any, first: str) -> str:
    demote_skill(engine, first, "drift: rolling 0.40 vs baseline 1.00", actor="test")
    for i in range(10, 16):
        record_cancel(sf, "u1", i, when=utcnow() + timedelta(seconds=i))
    report = run_partition(engine, AGENT, "u1", sf.config)
    [second] = report.promoted
    return str(second)


def _two_versions(engine: Engine) -> tuple[Any, str, str]:
    """v1 distilled and ACTIVE, demoted, then v2 distilled from new runs and ACTIVE (no shadow): (agent, v1, v2)."""
    sf = agent(engine)  # no shadow: versions land ACTIVE
    for i in range(6):
        record_cancel(sf, "u1", i)
    [first] = run_partition(engine, AGENT, "u1", sf.config).promoted
    return sf, first, _demote_and_redistill(engine, sf, first)


def test_rollback_reinstates_an_earlier_version_and_moves_the_stamps(engine: Engine) -> None:
    sf, first, second = _two_versions(engine)
    assert skill(engine, second).status == "active"
    restored = rollback_skill(engine, second, 1, actor="carol", reason="v2 regressed on refunds", config=sf.config)
    assert (restored.id, restored.status, restored.demotion_reason) == (first, "active", None)
    v2 = skill(engine, second)
    assert v2.status == "demoted" and v2.demotion_reason == "rolled back to v1: v2 regressed on refunds"
    with engine.connect() as conn:
        stamps = set(conn.execute(select(workflow_memory.c.promoted_skill_id)).scalars())
    assert stamps == {first}  # every run of the class now points at v1
    [event] = events(engine, first, "rolled_back")
    assert event["actor"] == "carol" and event["details"]["replaced"] == second and event["details"]["stamped"] == 12
    assert rollback_skill(engine, first, 1, actor="carol", reason="again", config=sf.config).id == first  # no-op
    with engine.connect() as conn:
        assert [s.status for s in list_skills(conn, AGENT, "u1")] == ["active", "demoted"]
    assert [v["version"] for v in history(engine, first)] == [1, 2]


def test_rollback_refuses_never_active_versions_and_removed_tools(engine: Engine) -> None:
    sf, first, second = _two_versions(engine)
    with engine.begin() as conn:
        conn.execute(agent_tools.delete().where(agent_tools.c.tool_name == "cancel_reservation"))
    with pytest.raises(ActivationRefused, match="tool removed: cancel_reservation"):
        rollback_skill(engine, second, 1, actor="carol", reason="try", config=sf.config)
    assert skill(engine, second).status == "active" and skill(engine, first).status == "demoted"  # nothing moved
    with pytest.raises(ValueError, match="reason is required"):
        rollback_skill(engine, second, 1, actor="carol", reason=" ", config=sf.config)


def test_rollback_to_a_rejected_version_is_refused(engine: Engine) -> None:
    sf, sid = shadow_skill(engine)
    from skillflow.lifecycle.decisions import reject_skill

    reject_skill(engine, sid, "wrong procedure", actor="carol")
    with pytest.raises(ActivationRefused, match="never active"):
        rollback_skill(engine, sid, 1, actor="carol", reason="undo", config=sf.config)
    assert skill(engine, sid).status == SkillStatus.REJECTED.value


def test_two_rollbacks_to_one_version_at_once_record_one_transition(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a concurrency audit (2026-12-05): four ``skillflow rollback V2 --to 1`` at once each reinstated v1
    (3 of 5 and 8 of 10 rounds on PostgreSQL): 2–4 ``rolled_back`` events for one transition, each but the first
    with a false ``from_status``, each resetting ``activated_at`` and restamping. The target is now written as a
    compare-and-set, so the rollback that lost the race changes nothing, as a rollback to the ACTIVE version does."""
    import skillflow.lifecycle.rollback as rollback
    from skillflow.storage.engine import make_engine

    sf, first, second = _two_versions(engine)
    checks = rollback.rollback_problems
    other = make_engine(db_url)

    def racing(conn: object, target: object, config: object) -> list[str]:
        monkeypatch.setattr(rollback, "rollback_problems", checks)
        # The other rollback commits between this one's read of the versions and its write.
        rollback_skill(other, second, 1, actor="dave", reason="v2 regressed", config=sf.config)
        return checks(conn, target, config)  # type: ignore[arg-type]

    monkeypatch.setattr(rollback, "rollback_problems", racing)
    restored = rollback_skill(engine, second, 1, actor="carol", reason="v2 regressed", config=sf.config)
    other.dispose()
    assert (restored.id, restored.status) == (first, "active")
    assert [e["actor"] for e in events(engine, first, "rolled_back")] == ["dave"]
    assert len(events(engine, second, "demoted")) == 1


def test_runs_captured_while_a_decision_committed_take_its_stamp_at_the_next_cycle(engine: Engine) -> None:
    """Found by a concurrency audit (2026-12-05): a run whose capture read its class's skill before a decision and
    committed after it kept the old stamp: 7-15 of about 700 runs unstamped under an ACTIVE skill (their raw runs
    retrieved beside it), 4-45 of about 1 400 still stamped with a DEMOTED one (hidden from retrieval for good).
    The set-based stamp cannot see such a run; the next promotion cycle repairs it."""
    from sqlalchemy import update

    sf, first, second = _two_versions(engine)
    wm = workflow_memory.c
    with engine.begin() as conn:  # what the races left: one run unstamped, one still behind the demoted v1
        ids = list(conn.execute(select(wm.id).order_by(wm.created_at.desc(), wm.id)).scalars())  # newest first
        conn.execute(update(workflow_memory).where(wm.id == ids[0]).values(promoted_skill_id=None))
        conn.execute(update(workflow_memory).where(wm.id == ids[1]).values(promoted_skill_id=first))
    run_partition(engine, AGENT, "u1", sf.config, force=True)
    with engine.connect() as conn:
        stamps = set(conn.execute(select(wm.promoted_skill_id)).scalars())
    assert stamps == {second}
