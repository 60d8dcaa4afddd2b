"""Real runs of the ``promotion-cycle`` and ``distill-class`` flows under the Prefect test harness."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from skillflow.promotion.gates import COVERED, UNKNOWN_CLASS
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import partition_state, reports, skill_events, skillbox, workflow_memory
from tests.support.promotion import AGENT, agent, record_cancel, record_payment, seed_cancels

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("offline_providers")]


def test_promotion_cycle_and_distill_class_flows(prefect_harness: None, tmp_path: Path) -> None:
    from prefect.artifacts import Artifact

    from flows.distill_class import DistillClassParams, distill_class
    from flows.promotion_cycle import PromotionCycleParams, promotion_cycle

    url = f"sqlite:///{tmp_path / 'flows.db'}"
    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine)
    cancel = ""
    for i in range(6):
        cancel = record_cancel(sf, "u1", i)
    pay = ""
    for i in range(4):  # one short of min_executions
        pay = record_payment(sf, "u1", i, accepted=True)

    overrides: dict[str, Any] = {"require_shadow": True, "promotion_every_n_runs": 25}
    # Scheduled (not forced): 10 runs < 25 → the partition waits.
    [waiting] = promotion_cycle(PromotionCycleParams(database_url=url, config_overrides=overrides))
    assert waiting.partition_skipped == "cadence: 10 runs since last cycle < 25"

    [report] = promotion_cycle(PromotionCycleParams(database_url=url, config_overrides=overrides, force=True))
    [skill_id] = report.promoted
    assert report.flow_run_id and (pay, "executions 4 < 5") in report.skipped
    with engine.connect() as conn:
        skill = conn.execute(select(skillbox).where(skillbox.c.id == skill_id)).mappings().one()
        assert (skill["status"], skill["canonical_hash"]) == ("shadow", cancel)
        event = conn.execute(select(skill_events).where(skill_events.c.skill_id == skill_id)).mappings().one()
        assert (event["actor"], event["flow_run_id"]) == ("flow:promotion-cycle", report.flow_run_id)
        stored = conn.execute(select(reports)).mappings().all()
        assert [r["body"]["promoted"] for r in stored] == [[skill_id]]
        assert conn.execute(select(partition_state.c.cycle_count)).scalar() == 1
        assert set(conn.execute(select(workflow_memory.c.promoted_skill_id)).scalars()) == {None}  # shadow: unstamped
    markdown = Artifact.get("promotion-report")
    assert markdown is not None and cancel[:12] in str(markdown.data) and skill_id in str(markdown.data)
    assert Artifact.get("promotion-gates") is not None

    # "Distill now": unknown → reason; below a gate → reason; covered → reason. Hand-picking bypasses nothing.
    unknown = distill_class(DistillClassParams(database_url=url, agent_id=AGENT, user_id="u1", canonical_hash="abcd"))
    assert unknown.skipped == [("abcd", UNKNOWN_CLASS)]
    short = distill_class(DistillClassParams(database_url=url, agent_id=AGENT, user_id="u1", canonical_hash=pay[:8]))
    assert short.promoted == [] and short.skipped == [(pay, "executions 4 < 5")]
    record_payment(sf, "u1", 4, accepted=True)
    now_ok = distill_class(DistillClassParams(database_url=url, agent_id=AGENT, user_id="u1", canonical_hash=pay[:8]))
    assert len(now_ok.promoted) == 1 and now_ok.mode == "distill"
    again = distill_class(DistillClassParams(database_url=url, agent_id=AGENT, user_id="u1", canonical_hash=cancel))
    assert again.skipped == [(cancel, COVERED)]
    with engine.connect() as conn:
        assert len(conn.execute(select(skillbox)).all()) == 2
        assert conn.execute(select(partition_state.c.cycle_count)).scalar() == 1  # distill-class is not a cycle
    engine.dispose()


def test_cli_cycle_skills_show(prefect_harness: None, tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from skillflow.cli import app

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    seed_cancels(url, "u1")
    runner = CliRunner()
    bad = runner.invoke(app, ["cycle", "--db", url, "--set", "min_executionz=3"])
    assert bad.exit_code == 2 and "min_executionz" in bad.output
    dry = runner.invoke(app, ["cycle", "--db", url, "--json", "--dry-run", "--set", "require_shadow=false"])
    assert dry.exit_code == 0, dry.output
    [report] = json.loads(dry.stdout[dry.stdout.index("{") :])["reports"]
    assert report["dry_run"] and len(report["would_promote"]) == 1 and report["promoted"] == []
    real = runner.invoke(app, ["cycle", "--db", url, "--json", "--set", "require_shadow=false"])
    [report] = json.loads(real.stdout[real.stdout.index("{") :])["reports"]
    [skill_id] = report["promoted"]
    listed = json.loads(runner.invoke(app, ["skills", "--db", url, "--status", "active", "--json"]).stdout)
    assert [s["id"] for s in listed["skills"]] == [skill_id]
    shown = runner.invoke(app, ["show", skill_id[:10], "--db", url, "--json"])
    body = json.loads(shown.stdout)
    assert body["skill"]["content"].startswith("---") and body["events"][0]["event"] == "created"
    assert body["class_now"]["executions"] == 6
    assert runner.invoke(app, ["show", "nope00", "--db", url]).exit_code == 1  # unknown id: a refusal, not usage
