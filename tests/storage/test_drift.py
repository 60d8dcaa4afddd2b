"""Drift: figures from skill_activations, the strict demotion rule, grace, deviation flag, stamps released.

A skill whose check fails is recorded and never hides the others' demotions; a retried partition converges.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import OperationalError

from skillflow.kernel.models import SkillStatus
from skillflow.lifecycle import drift, rollback
from skillflow.lifecycle.drift import ActiveFigures, decide, render_markdown, run_drift
from skillflow.promotion.calibrate import calibrate
from skillflow.storage.schema import reports, skill_activations, skill_events, workflow_memory
from skillflow.storage.skills import get_skill
from tests.support.drift import corrupted, drifting, rule_fingerprint
from tests.support.lifecycle import (
    AGENT,
    EMBEDDER,
    USER,
    class_hash,
    config,
    earlier,
    later,
    make_skill,
    other_steps,
    record,
)


def _figures(ok: int, n: int, activations: int | None = None, deviations: int = 0) -> ActiveFigures:
    total = activations if activations is not None else n
    return ActiveFigures(total, ok, total - ok, 0, deviations, n, ok, ok / n if n else None, None)


def test_rule_is_strict_and_exact() -> None:
    assert decide(_figures(7, 10), 0.9, config(demotion_success_delta=0.2)).demote is False  # 0.70 is not < 0.70
    got = decide(_figures(6, 10), 0.9, config(demotion_success_delta=0.25))
    assert got.demote is True and got.reason == "drift: rolling 0.60 vs baseline 0.90"
    assert decide(_figures(0, 4), 0.9, config()).grace is True  # 4 < min_activations_before_drift_check
    assert decide(_figures(0, 4), 0.9, config()).demote is False
    assert decide(_figures(0, 10), None, config()).demote is False  # no frozen baseline, no verdict
    flagged = decide(_figures(10, 10, deviations=6), 0.9, config())
    assert flagged.deviation_flag is True and flagged.demote is False  # a review flag never demotes


def _active(engine: Engine):  # type: ignore[no-untyped-def]
    source = record(engine, "cancel my reservation", at=earlier(2))
    skill = make_skill(engine, class_hash(engine, source), sources=[source], status=SkillStatus.ACTIVE, baseline=0.9)
    return source, skill


def _activate_runs(engine: Engine, skill_id: str, outcomes: list[bool], start: float = 1.0) -> list[str]:
    return [
        record(engine, f"cancel reservation {i}", skills=(skill_id,), ok=ok, at=later(start + i))
        for i, ok in enumerate(outcomes)
    ]


def test_six_of_ten_demotes_and_releases_stamps(engine: Engine) -> None:
    source, skill = _active(engine)
    runs = _activate_runs(engine, skill.id, [True] * 6 + [False] * 4)
    with engine.connect() as conn:
        stamped = conn.execute(select(func.count()).where(workflow_memory.c.promoted_skill_id == skill.id)).scalar()
    assert stamped == len(runs) + 1
    dry = run_drift(engine, config(), dry_run=True)
    assert [d.skill_id for d in dry.demoted] == [skill.id]
    with engine.connect() as conn:
        assert get_skill(conn, skill.id).status == "active"  # dry run changes nothing
    report = run_drift(engine, config(demotion_success_delta=0.25), flow_run_id="fr-1")
    assert [d.skill_id for d in report.demoted] == [skill.id]
    with engine.connect() as conn:
        after = get_skill(conn, skill.id)
        stamped = conn.execute(select(func.count()).where(workflow_memory.c.promoted_skill_id == skill.id)).scalar()
        event = (
            conn.execute(
                select(skill_events).where(skill_events.c.skill_id == skill.id, skill_events.c.to_status == "demoted")
            )
            .mappings()
            .one()
        )
    assert after.status == "demoted" and after.demotion_reason == "drift: rolling 0.60 vs baseline 0.90"
    assert after.demoted_at is not None and stamped == 0
    assert event["actor"] == "flow:drift-demotion" and event["flow_run_id"] == "fr-1"
    active = (after.stats or {})["active"]
    assert (active["activations"], active["successes"], active["failures"], active["window"]) == (10, 6, 4, 10)
    assert active["rolling_success_rate"] == 0.6 and active["baseline_success_rate"] == 0.9
    with engine.connect() as conn:  # the source run is released too
        released = conn.execute(select(workflow_memory.c.promoted_skill_id).where(workflow_memory.c.id == source))
        assert released.scalar_one() is None
    assert run_drift(engine, config()).checked == 0  # demoted skills are no longer monitored


def test_seven_of_ten_against_delta_point_two_keeps(engine: Engine) -> None:
    _source, skill = _active(engine)
    _activate_runs(engine, skill.id, [False, False, False] + [True] * 7)
    report = run_drift(engine, config(demotion_success_delta=0.2))
    assert report.demoted == [] and report.skills[0].decision == "keep"
    with engine.connect() as conn:
        after = get_skill(conn, skill.id)
    assert after.status == "active" and (after.stats or {})["active"]["rolling_success_rate"] == 0.7


def test_window_grace_and_shadow_ids(engine: Engine) -> None:
    _source, skill = _active(engine)
    # Old failures fall out of the rolling window: only the last 10 outcomes count.
    _activate_runs(engine, skill.id, [False] * 6 + [True] * 10)
    report = run_drift(engine, config())
    assert report.skills[0].rolling_success_rate == 1.0 and report.demoted == []
    # A SHADOW skill named in skills_activated is never recorded, so it can never count.
    other = record(engine, "refund please", steps=other_steps())
    shadow = make_skill(engine, class_hash(engine, other), status=SkillStatus.SHADOW, name="refund-order")
    record(engine, "refund please", steps=other_steps(), skills=(shadow.id,), ok=False)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).where(skill_activations.c.skill_id == shadow.id)).scalar() == 0
    assert shadow.id not in {s.skill_id for s in run_drift(engine, config()).skills}


def test_grace_period_and_deviation_flag(engine: Engine) -> None:
    _source, skill = _active(engine)
    _activate_runs(engine, skill.id, [False] * 4)
    report = run_drift(engine, config())
    assert report.demoted == [] and report.skills[0].decision == "grace"
    for i in range(6):
        record(engine, f"cancel differently {i}", steps=other_steps(), skills=(skill.id,), ok=True, at=later(10 + i))
    report = run_drift(engine, config(drift_window_activations=6))
    assert report.flagged == [skill.id] and report.demoted == []  # 6/10 deviations: flagged, rolling 6/6
    with engine.connect() as conn:
        active = (get_skill(conn, skill.id).stats or {})["active"]
    assert active["deviations"] == 6 and active["deviation_flag"] is True and active["deviation_rate"] == 0.6


def test_counts_advance_from_the_watermark(engine: Engine) -> None:
    _source, skill = _active(engine)
    _activate_runs(engine, skill.id, [True] * 5)
    run_drift(engine, config())
    with engine.connect() as conn:
        first = (get_skill(conn, skill.id).stats or {})["active"]
    assert first["activations"] == 5 and first["watermark"] and first["watermark_run"]
    run_drift(engine, config())  # nothing new: same figures, same watermark
    _activate_runs(engine, skill.id, [False, True], start=20)
    run_drift(engine, config())
    with engine.connect() as conn:
        active = (get_skill(conn, skill.id).stats or {})["active"]
    assert (active["activations"], active["successes"], active["failures"]) == (7, 6, 1)
    assert active["watermark"] > first["watermark"] and active["window"] == 7


def test_a_failing_skill_check_hides_no_demotion(engine: Engine) -> None:
    drifted, broken = drifting(engine), corrupted(engine)
    calibrate(engine, AGENT, USER, config(), 1, embedder=EMBEDDER)
    cfg = config(demotion_success_delta=0.25)
    report = run_drift(engine, cfg, agent_id=AGENT, user_id=USER, flow_run_id="fr-1", embedder=EMBEDDER)
    assert [d.skill_id for d in report.demoted] == [drifted.id] and report.checked == 1
    assert report.failed == [(broken.id, "check failed: ValueError")]  # the error class, never its message
    with engine.connect() as conn:
        assert get_skill(conn, drifted.id).status == "demoted" and get_skill(conn, broken.id).status == "active"
        body = conn.execute(select(reports.c.body).where(reports.c.id == report.report_id)).scalar_one()
    assert [d["skill_id"] for d in body["demoted"]] == [drifted.id]
    assert body["failed"] == [[broken.id, "check failed: ValueError"]]
    stored, live = rule_fingerprint(engine)
    assert stored == live  # the rule was refit to the live set without the demoted skill
    assert "check failed: ValueError" in render_markdown(report)


def test_a_retried_partition_reports_the_earlier_attempts_demotions(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    drifted = drifting(engine)
    cfg = config(demotion_success_delta=0.25)

    def lost(*_args: object) -> str:
        raise OperationalError("INSERT INTO reports", {}, ConnectionError("connection lost"))

    monkeypatch.setattr(drift, "store_report", lost)
    with pytest.raises(OperationalError):  # transient: the task would retry the partition
        run_drift(engine, cfg, agent_id=AGENT, user_id=USER, flow_run_id="fr-2", embedder=EMBEDDER)
    monkeypatch.undo()
    retry = run_drift(engine, cfg, agent_id=AGENT, user_id=USER, flow_run_id="fr-2", embedder=EMBEDDER)
    again = run_drift(engine, cfg, agent_id=AGENT, user_id=USER, flow_run_id="fr-2", embedder=EMBEDDER)
    assert [d.skill_id for d in retry.demoted] == [drifted.id] and retry.checked == 1
    assert retry.demoted[0].reason == "drift: rolling 0.60 vs baseline 0.90"
    assert retry.demoted[0].rolling_success_rate == 0.6 and retry.demoted[0].activations == 10
    assert again.model_dump() == retry.model_dump()  # converged
    with engine.connect() as conn:
        stored = conn.execute(select(reports.c.body).where(reports.c.kind == "drift")).scalars().all()
    assert len(stored) == 1 and [d["skill_id"] for d in stored[0]["demoted"]] == [drifted.id]
    other = run_drift(engine, cfg, agent_id=AGENT, user_id=USER, flow_run_id="fr-3")
    assert other.demoted == [] and other.checked == 0  # another flow run does not re-list it


def test_a_skill_demoted_twice_by_one_drift_run_is_listed_once(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Drift run fr-4 demotes the skill; an operator rolls it back; a retried chunk of fr-4 demotes it again.
    A further retry reads the run's demotions back: the skill once, not once per lifecycle row."""
    drifted = drifting(engine)
    cfg = config(demotion_success_delta=0.25)
    first = run_drift(engine, cfg, agent_id=AGENT, user_id=USER, flow_run_id="fr-4", embedder=EMBEDDER)
    assert [d.skill_id for d in first.demoted] == [drifted.id]
    monkeypatch.setattr(rollback, "rollback_problems", lambda *_: [])  # the fixture's short text: not at stake here
    rollback.rollback_skill(engine, drifted.id, drifted.version, actor="alice", reason="false alarm", config=cfg)
    for i in range(10):
        record(engine, f"cancel reservation again {i}", skills=(drifted.id,), ok=i < 6, at=later(20 + i))
    again = run_drift(engine, cfg, agent_id=AGENT, user_id=USER, flow_run_id="fr-4", embedder=EMBEDDER)
    with engine.connect() as conn:
        rows = conn.execute(
            select(func.count()).where(skill_events.c.skill_id == drifted.id, skill_events.c.to_status == "demoted")
        ).scalar_one()
    assert rows == 2 and [d.skill_id for d in again.demoted] == [drifted.id]
    retry = run_drift(engine, cfg, agent_id=AGENT, user_id=USER, flow_run_id="fr-4", embedder=EMBEDDER)
    assert [d.skill_id for d in retry.demoted] == [drifted.id] and retry.checked == 1


def test_an_activation_committed_behind_the_watermark_is_counted_by_the_daily_recount(engine: Engine) -> None:
    """Found by a concurrency audit (2026-12-05): a run's ``created_at`` is set when its capture starts and its
    activation commits later (after the evaluator), so a check that moved the watermark past it meanwhile never
    counted it (4 of 5 and 6 of 10 rounds); a spooled run replayed later is behind the watermark too. The
    cumulative counts are now rebuilt from the rows once a day."""
    import json
    from datetime import timedelta

    from sqlalchemy import update

    from skillflow.kernel.models import utcnow
    from skillflow.storage.schema import skillbox

    _source, skill = _active(engine)
    _activate_runs(engine, skill.id, [True] * 5, start=5)
    run_drift(engine, config())
    _activate_runs(engine, skill.id, [True], start=1)  # committed now, created before the watermark
    run_drift(engine, config())
    with engine.connect() as conn:
        active = (get_skill(conn, skill.id).stats or {})["active"]
    assert active["activations"] == 5 and active["recounted_at"]  # incremental: behind the watermark
    aged = {**active, "recounted_at": (utcnow() - timedelta(hours=25)).isoformat()}
    with engine.connect() as conn:
        stats = {**(get_skill(conn, skill.id).stats or {}), "active": aged}
    with engine.begin() as conn:
        conn.execute(update(skillbox).where(skillbox.c.id == skill.id).values(stats=json.loads(json.dumps(stats))))
    run_drift(engine, config())
    with engine.connect() as conn:
        active = (get_skill(conn, skill.id).stats or {})["active"]
    assert active["activations"] == 6 and active["recounted_at"] > aged["recounted_at"]


def test_a_skill_whose_activations_end_unknown_is_flagged_for_review(engine: Engine) -> None:
    """A gate-integrity audit (2026-12-06): a business evaluator that raises once the tool's answer changes shape
    turns every outcome into ``unknown``; drift judged known outcomes only, so after 40 such activations the skill
    stayed in ``grace`` with no flag, where the promotion gate refuses the same class (unknown share over 0.2). It
    is now a review flag (never a demotion: an unknown outcome says nothing of the skill)."""
    from skillflow.runtime import Skillflow
    from tests.support import patient_capture
    from tests.support.lifecycle import cancel_steps

    def broken(_: object) -> bool:
        raise KeyError("accepted")

    _source, skill = _active(engine)
    with patient_capture():
        sf = Skillflow(agent_id=AGENT, engine=engine, config=config(), workflow_outcome_evaluator=broken)
    for i in range(12):
        run = sf.record_run(f"cancel reservation {i}", USER, cancel_steps(), skills_activated=[skill.id],
                            created_at=later(1 + i))  # fmt: skip
        assert run.outcome == "unknown"
    report = run_drift(engine, config())
    assert report.demoted == [] and report.skills[0].decision == "grace"
    assert report.unknown_flagged == [skill.id] and report.skills[0].unknown_flag is True
    with engine.connect() as conn:
        active = (get_skill(conn, skill.id).stats or {})["active"]
    assert active["unknown"] == 12 and active["unknown_flag"] is True
    assert "unknown-outcome review flags" in render_markdown(report)
    assert decide(_figures(10, 10), 0.9, config()).unknown_flag is False


def test_no_grace_and_no_activation_is_no_unknown_flag() -> None:
    """Found reviewing the unknown-outcome flag: with ``min_activations_before_drift_check = 0`` (allowed) a skill
    without an activation divided by zero, failing its drift check."""
    got = decide(_figures(0, 0), 0.9, config(min_activations_before_drift_check=0))
    assert got.unknown_flag is False and got.demote is False


def test_a_rolled_back_skill_starts_its_activation_stats_afresh(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new-user audit (2026-12-06): `skillflow rollback ID --to 1` brought back the v1 drift had demoted, and
    `skillflow skills` listed it "6/10 ok, rolling 0.60", its figures from before the demotion, while drift counted
    0 activations since (decision "grace"). A (re-)activation starts with empty activation stats
    (docs/guide/lifecycle.md, "Rollback")."""
    import json

    from typer.testing import CliRunner

    from skillflow.cli import app
    from skillflow.cli.commands.promotion import _activation

    drifted = drifting(engine)
    cfg = config(demotion_success_delta=0.25)
    assert [d.skill_id for d in run_drift(engine, cfg, embedder=EMBEDDER).demoted] == [drifted.id]
    url = engine.url.render_as_string(hide_password=False)
    monkeypatch.setattr(rollback, "rollback_problems", lambda *_: [])  # the fixture's short text: not at stake here
    monkeypatch.setattr(rollback, "utcnow", lambda: later(15))  # after the fixture's activations (1-10 s ahead)
    runner = CliRunner()
    done = runner.invoke(app, ["rollback", drifted.id, "--to", "1", "--reason", "false alarm", "--db", url])
    assert done.exit_code == 0, (done.output, done.exception)
    with engine.connect() as conn:
        restored = get_skill(conn, drifted.id)
    assert restored.status == "active" and "active" not in (restored.stats or {}), restored.stats
    assert "6/10 ok" not in _activation(restored) and "rolling 0.60" not in _activation(restored)
    listed = runner.invoke(app, ["skills", "--db", url, "--json"])  # what `skillflow skills` lists, any width
    assert listed.exit_code == 0, listed.output
    [row] = [s for s in json.loads(listed.stdout)["skills"] if s["id"] == drifted.id]
    assert "active" not in (row["stats"] or {}), row["stats"]
    check = run_drift(engine, cfg, embedder=EMBEDDER).skills
    assert [(s.skill_id, s.activations, s.rolling_success_rate, s.decision) for s in check] == [
        (drifted.id, 0, None, "grace")
    ]
    record(engine, "cancel reservation after the rollback", skills=(drifted.id,), ok=True, at=later(30))
    run_drift(engine, cfg, embedder=EMBEDDER)
    with engine.connect() as conn:  # the current activation's own figures, as the table shows them
        assert _activation(get_skill(conn, drifted.id)).startswith("1/1 ok, rolling 1.00")
