"""Flows emit an event for every skill they move: the sweep's deprecations, a "Distill now" promotion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import skillbox
from tasks import events
from tests.support.promotion import AGENT, TOOLS, agent, record_cancel


@pytest.mark.prefect
@pytest.mark.usefixtures("offline_providers")
def test_a_swept_skill_emits_deprecated_with_its_tenant(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.promotion_cycle import PromotionCycleParams, promotion_cycle

    url = f"sqlite:///{tmp_path / 'sweep.db'}"
    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine)
    for i in range(6):
        record_cancel(sf, "u1", i)
    sent: list[tuple[str, str, dict[str, str] | None, Any]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    params = PromotionCycleParams(
        database_url=url, force=True, fan_out="local", config_overrides={"require_shadow": False}
    )
    promotion_cycle(params)
    with engine.connect() as conn:
        [skill_id] = conn.execute(select(skillbox.c.id)).scalars()
    assert [e for e, *_ in sent] == ["skillflow.skill.promoted"]

    sf.register_tools([t for t in TOOLS if t != "cancel_reservation"])  # the skill's tool is gone
    sent.clear()
    [report] = promotion_cycle(params)
    assert [sid for sid, _ in report.deprecated] == [skill_id]
    assert sent == [
        (
            "skillflow.skill.deprecated",
            f"skillflow.skill.{skill_id}",
            {"skillflow.agent_id": AGENT, "skillflow.user_id": "u1"},
            {"cycle": report.cycle},
            events.stable_id(events.DEPRECATED, skill_id, str(report.cycle)),  # a retried cycle sends the same
        )
    ]
    with engine.connect() as conn:
        assert conn.execute(select(skillbox.c.status)).scalar() == "deprecated"
    engine.dispose()


@pytest.mark.prefect
@pytest.mark.usefixtures("offline_providers")
def test_distill_now_emits_promoted(prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.distill_class import DistillClassParams, distill_class

    url = f"sqlite:///{tmp_path / 'distill.db'}"
    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine)
    [chash] = {record_cancel(sf, "u2", i) for i in range(6)}  # one class
    sent: list[tuple[str, str, dict[str, str] | None, Any]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    report = distill_class(DistillClassParams(database_url=url, agent_id=AGENT, user_id="u2", canonical_hash=chash[:8]))
    [skill_id] = report.promoted
    labels = {"skillflow.agent_id": AGENT, "skillflow.user_id": "u2"}
    key = events.stable_id(events.PROMOTED, skill_id)  # a skill is promoted once: its id is the event's key
    assert sent == [("skillflow.skill.promoted", f"skillflow.skill.{skill_id}", labels, {"cycle": report.cycle}, key)]
    sent.clear()
    dry = distill_class(
        DistillClassParams(database_url=url, agent_id=AGENT, user_id="u2", canonical_hash=chash, dry_run=True)
    )
    assert dry.promoted == [] and sent == []
    engine.dispose()
