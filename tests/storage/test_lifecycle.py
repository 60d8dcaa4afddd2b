"""Reviewer decisions as plain functions: activate (role, tool re-check, stamps), reject, demote."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, delete, func, select, update

from skillflow.kernel.models import SkillStatus
from skillflow.lifecycle.decisions import ActivationRefused, activate_skill, demote_skill, reject_skill
from skillflow.lifecycle.review import apply_review_decision, gather_evidence, render_markdown
from skillflow.storage.schema import agent_tools, skill_events, skillbox, workflow_memory
from skillflow.storage.skills import InvalidTransition, get_skill, transition
from tests.support.lifecycle import AGENT, class_hash, config, earlier, make_skill, record


def _stamped(engine: Engine, skill_id: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(select(func.count()).where(workflow_memory.c.promoted_skill_id == skill_id)).scalar() or 0
        )


def _events(engine: Engine, skill_id: str) -> list[dict]:  # type: ignore[type-arg]
    with engine.connect() as conn:
        rows = conn.execute(
            select(skill_events).where(skill_events.c.skill_id == skill_id).order_by(skill_events.c.created_at)
        ).mappings()
        return [dict(r) for r in rows]


def _shadow(engine: Engine, status: SkillStatus = SkillStatus.SHADOW):  # type: ignore[no-untyped-def]
    runs = [record(engine, f"cancel my reservation {i}", at=earlier(2 - i * 0.1)) for i in range(3)]
    return runs, make_skill(engine, class_hash(engine, runs[0]), sources=runs[:2], status=status)


def test_activate_user_backfills_stamps_in_one_step(engine: Engine) -> None:
    runs, skill = _shadow(engine)
    assert _stamped(engine, skill.id) == 0  # SHADOW never suppresses workflow retrieval
    updated = activate_skill(engine, skill.id, actor="alice", flow_run_id="fr-9", config=config())
    assert updated.status == "active" and updated.injection_role == "user" and updated.activated_at is not None
    assert _stamped(engine, skill.id) == len(runs)
    event = _events(engine, skill.id)[-1]
    assert event["event"] == "activated" and event["actor"] == "alice" and event["flow_run_id"] == "fr-9"
    assert event["details"]["review"] is True and event["details"]["stamped"] == len(runs)
    assert event["details"]["decision"] == "activate_user"
    again = activate_skill(engine, skill.id, actor="alice", config=config())  # idempotent
    assert again.status == "active" and len(_events(engine, skill.id)) == 2
    # New runs of the class are stamped at write time once it is ACTIVE.
    assert _stamped(engine, skill.id) == len(runs)
    record(engine, "cancel my reservation again")
    assert _stamped(engine, skill.id) == len(runs) + 1


def test_activation_refuses_a_skill_whose_tool_was_declared_a_handoff(engine: Engine) -> None:
    from skillflow.promotion.gates import HANDOFF_CLASS

    _runs, skill = _shadow(engine)
    with engine.begin() as conn:
        conn.execute(update(agent_tools).where(agent_tools.c.tool_name == "cancel_reservation").values(hands_off=1))
    with pytest.raises(ActivationRefused) as err:
        activate_skill(engine, skill.id, actor="alice", config=config())
    assert err.value.reasons == [f"{HANDOFF_CLASS} (cancel_reservation)"]
    with engine.connect() as conn:
        assert get_skill(conn, skill.id).status == "shadow"
    allowed = config().model_copy(update={"promote_handoff_classes": True})
    assert activate_skill(engine, skill.id, actor="alice", config=allowed).status == "active"


def test_activation_rechecks_tools(engine: Engine) -> None:
    _runs, skill = _shadow(engine)
    with engine.begin() as conn:
        conn.execute(delete(agent_tools).where(agent_tools.c.tool_name == "cancel_reservation"))
    with pytest.raises(ActivationRefused) as err:
        activate_skill(engine, skill.id, actor="alice", config=config())
    assert err.value.reasons == ["tool removed: cancel_reservation"]
    with engine.connect() as conn:
        assert get_skill(conn, skill.id).status == "shadow"
    assert _stamped(engine, skill.id) == 0


def test_developer_authority_needs_shadow_review(engine: Engine) -> None:
    _runs, skill = _shadow(engine)
    with pytest.raises(ActivationRefused) as err:
        activate_skill(engine, skill.id, role="developer", actor="alice", config=config(require_shadow=False))
    assert err.value.reasons == ["developer authority requires require_shadow=True"]
    updated = activate_skill(engine, skill.id, role="developer", actor="alice", config=config())
    assert updated.injection_role == "developer" and updated.status == "active"
    assert _events(engine, skill.id)[-1]["details"]["role"] == "developer"


def test_candidate_never_shadowed_cannot_get_developer_authority(engine: Engine) -> None:
    _runs, skill = _shadow(engine, status=SkillStatus.CANDIDATE)
    with pytest.raises(ActivationRefused) as err:
        activate_skill(engine, skill.id, role="developer", actor="alice", config=config())
    assert "went through shadow" in str(err.value) or "gone through shadow" in str(err.value)
    assert activate_skill(engine, skill.id, role="user", actor="alice", config=config()).status == "active"


def test_a_refused_move_names_each_status_with_its_article(engine: Engine) -> None:
    """A refused transition said "cannot move a active skill"."""
    for status in SkillStatus:
        skill = make_skill(engine, f"class-{status}", status=status, name=f"skill-{status}")
        to = SkillStatus.DEMOTED if status is SkillStatus.CANDIDATE else SkillStatus.CANDIDATE  # refused from each
        with engine.begin() as conn, pytest.raises(InvalidTransition) as refused:
            transition(conn, skill.id, to, actor="bob")
        article = "an" if status is SkillStatus.ACTIVE else "a"
        assert str(refused.value) == f"cannot move {article} {status} skill to {to}"


def test_reject_and_demote(engine: Engine) -> None:
    runs, skill = _shadow(engine)
    with pytest.raises(ValueError):
        reject_skill(engine, skill.id, "  ", actor="bob")
    rejected = reject_skill(engine, skill.id, "procedure skips the refund check", actor="bob")
    assert rejected.status == "rejected" and rejected.demotion_reason == "procedure skips the refund check"
    with engine.connect() as conn:
        assert conn.execute(select(skillbox.c.live_key).where(skillbox.c.id == skill.id)).scalar() is None
    event = _events(engine, skill.id)[-1]
    assert event["actor"] == "bob" and event["to_status"] == "rejected" and event["details"]["review"] is True
    with pytest.raises(InvalidTransition):
        activate_skill(engine, skill.id, actor="bob", config=config())
    # A new version of the class can now be created and, once active, demoted by hand.
    active = make_skill(engine, skill.canonical_hash, status=SkillStatus.ACTIVE)
    assert active.version == 2 and _stamped(engine, active.id) == len(runs)
    with pytest.raises(InvalidTransition):
        demote_skill(engine, skill.id, "wrong state", actor="bob")
    demoted = demote_skill(engine, active.id, "customers complain", actor="carol")
    assert demoted.status == "demoted" and demoted.demotion_reason == "customers complain"
    assert _stamped(engine, active.id) == 0
    event = _events(engine, active.id)[-1]
    assert event["actor"] == "carol" and event["details"]["unstamped"] == len(runs) and event["details"]["review"]


@pytest.mark.parametrize(
    ("decision", "status", "role"),
    [
        ("activate_user", "active", "user"),
        ("activate_developer", "active", "developer"),
        ("reject", "rejected", "user"),
        ("keep_shadow", "shadow", "user"),
    ],
)
def test_review_decisions_as_plain_functions(engine: Engine, decision: str, status: str, role: str) -> None:
    runs, skill = _shadow(engine)
    evidence = gather_evidence(engine, skill.id, config())
    assert evidence.class_stats["executions"] == len(runs) and evidence.readiness["observations"] == 0
    page = render_markdown(evidence)
    assert "cancel my reservation 0" not in page and skill.id in page and evidence.content in page
    outcome = apply_review_decision(engine, skill.id, decision, "dana", reason="checked", config=config())
    assert (outcome.applied, outcome.status, outcome.injection_role) == (True, status, role)
    last = _events(engine, skill.id)[-1]
    assert last["actor"] == "dana" and last["details"]["review"] is True and last["details"]["decision"] == decision
    assert _stamped(engine, skill.id) == (len(runs) if status == "active" else 0)


def test_refused_review_decision_is_an_outcome(engine: Engine) -> None:
    _runs, skill = _shadow(engine)
    outcome = apply_review_decision(engine, skill.id, "activate_developer", "erin", config=config(require_shadow=False))
    assert outcome.applied is False and outcome.status == "shadow"
    assert outcome.reasons == ["developer authority requires require_shadow=True"]
    with pytest.raises(ValueError):
        apply_review_decision(engine, skill.id, "promote_anyway", "erin", config=config())


def _cli(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """A shadow skill of ``engine`` and a function that runs a CLI command against its database."""
    from typer.testing import CliRunner

    from skillflow.cli import app

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    _runs, skill = _shadow(engine)
    runner = CliRunner()
    return skill, lambda *args: runner.invoke(app, [*args, "--db", str(engine.url)])


def test_cli_commands(sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    skill, invoke = _cli(sqlite_engine, monkeypatch)

    def run(*args: str) -> tuple[int, str]:
        res = invoke(*args)
        return res.exit_code, res.output

    code, out = run("readiness", skill.id[:8], "--json")
    assert code == 0 and json.loads(out)["reasons"][0].startswith("observations 0 <")
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(restore_defaults={PREFECT_API_URL}):  # a session harness may have set it
        code, out = run("review", skill.id)
    assert code == 2 and "PREFECT_API_URL" in out.replace("\n", "")  # no review started: bad input, as serve says
    code, out = run("activate", skill.id, "--role", "developer", "--actor", "ops", "--json")
    assert code == 0 and json.loads(out) == {"skill_id": skill.id, "status": "active", "injection_role": "developer"}
    code, out = run("reject", skill.id, "--reason", "late")
    assert code == 1 and "cannot move" in out  # a refusal (docs/RELIABILITY.md)
    code, out = run("demote", skill.id, "--reason", "tool output changed", "--json")
    assert code == 0 and json.loads(out)["status"] == "demoted"
    code, out = run("activate", "0000000000")
    assert code == 1 and "not found" in out
    assert _events(sqlite_engine, skill.id)[-1]["actor"] != "ops"  # demote defaulted to cli:<login>
    assert _events(sqlite_engine, skill.id)[-1]["actor"].startswith("cli")


def test_a_repeated_activate_or_demote_says_already(sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new-user audit (2026-12-06): `skillflow activate` / `demote` of a skill already in that status printed
    "activated …" / "demoted …" again (exit 0, no second event). It says "already active" / "already demoted"."""
    skill, invoke = _cli(sqlite_engine, monkeypatch)

    def run(*args: str) -> tuple[int, str]:
        res = invoke(*args)
        return res.exit_code, " ".join(res.stdout.split())

    code, out = run("activate", skill.id)
    assert code == 0 and out.startswith("activated ") and "already" not in out, out
    events = len(_events(sqlite_engine, skill.id))
    code, out = run("activate", skill.id)
    assert code == 0 and out.startswith("already active: ") and skill.id in out, out
    code, out = run("demote", skill.id, "--reason", "tool output changed")
    assert code == 0 and out.startswith("demoted ") and "already" not in out, out
    code, out = run("demote", skill.id, "--reason", "again")
    assert code == 0 and out.startswith("already demoted: ") and skill.id in out, out
    assert len(_events(sqlite_engine, skill.id)) == events + 1  # the first demotion's only


def test_requalification_after_drift_demotion(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """active → failing runs → drift demotion → stamps released → new successes → cycle → v2 with the reason."""
    from skillflow.lifecycle.drift import run_drift
    from skillflow.promotion import cycle as promotion
    from tests.support.lifecycle import later

    cfg = config(min_executions=5, min_distinct_queries=2, shadow_evaluation_enabled=False)
    queries = [
        "cancel my reservation",
        "please cancel my booking",
        "cancel the trip",
        "I need to cancel",
        "drop my booking",
    ]
    for i in range(6):
        record(engine, queries[i % len(queries)] + f" {i}", at=earlier(1 - i * 0.01), cfg=cfg)
    first = promotion.run_partition(engine, AGENT, "u1", cfg, force=True)
    assert len(first.promoted) == 1, first
    v1 = activate_skill(engine, first.promoted[0], actor="alice", config=cfg)
    assert v1.version == 1 and _stamped(engine, v1.id) == 6
    for i in range(10):  # the tool starts failing the business outcome
        record(engine, f"cancel booking {i}", skills=(v1.id,), ok=i < 4, cfg=cfg)
    drift = run_drift(engine, cfg)
    assert [d.skill_id for d in drift.demoted] == [v1.id]
    reason = "drift: rolling 0.40 vs baseline 1.00"
    with engine.connect() as conn:
        assert get_skill(conn, v1.id).demotion_reason == reason
    assert _stamped(engine, v1.id) == 0  # raw runs are retrievable again
    # Only post-demotion runs count toward the gates: right after the demotion the class is not eligible.
    early = promotion.run_partition(engine, AGENT, "u1", cfg, force=True)
    assert early.promoted == []
    seen: list[str | None] = []
    original = promotion.gather_evidence

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        evidence = original(*args, **kwargs)
        seen.append(evidence.previous_demotion_reason)
        return evidence

    monkeypatch.setattr(promotion, "gather_evidence", spy)
    for i in range(6):  # the tool is fixed
        record(engine, queries[i % len(queries)] + f" again {i}", at=later(60 + i), cfg=cfg)
    again = promotion.run_partition(engine, AGENT, "u1", cfg, force=True)
    assert len(again.promoted) == 1 and seen == [reason]
    with engine.connect() as conn:
        v2 = get_skill(conn, again.promoted[0])
        old = get_skill(conn, v1.id)
    assert v2.version == 2 and v2.status == "shadow" and v2.canonical_hash == v1.canonical_hash
    assert "was demoted" in v2.content and "rolling" in v2.content
    assert old.status == "demoted"  # the old version stays for history
