"""``register_tools`` from many agent processes at once: every registration lands, the rows are the toolbox.

A fleet of agent processes of one agent registers its tools at start-up, at about the same time. Before, a
registration deleted the agent's rows and inserted them all again, so one whose insert met a row another
process had just committed raised ``IntegrityError`` into the agent (on PostgreSQL 151 of 240 registrations of
four threads; the test below has threads of one process, which are what the agent's handles are to the server).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import select

from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.schema import agent_handoffs, agent_tools

TOOLS = [f"tool_{i}" for i in range(8)]


@pytest.mark.parametrize("handoffs", [[], ["tool_1"]])
def test_concurrent_registrations_of_one_toolbox_all_land(
    db_url: str, engine: object, tmp_path: Path, handoffs: list[str]
) -> None:
    """Four processes of one agent register at once, 15 times each: every registration lands, and the toolbox (its
    hand-off declarations in ``agent_handoffs`` too) is the one registered."""
    outcomes: list[object] = []
    barrier = threading.Barrier(4)

    def agent_process(i: int) -> None:
        sf = Skillflow(agent_id="fleet", database_url=db_url, spool_dir=tmp_path / f"spool{i}")
        barrier.wait()
        for _ in range(15):
            try:
                outcomes.append(sf.register_tools(TOOLS, state_changing={"tool_0": True}, hands_off=handoffs))
            except Exception as exc:  # noqa: BLE001 - the assertion names it
                outcomes.append(type(exc).__name__)
        assert sf.engine is not None
        sf.engine.dispose()

    threads = [threading.Thread(target=agent_process, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert outcomes == [True] * 60
    check = make_engine(db_url)
    with check.connect() as conn:
        rows = conn.execute(
            select(agent_tools.c.tool_name, agent_tools.c.changes_state).order_by(agent_tools.c.tool_name)
        ).all()
        kept = conn.execute(select(agent_handoffs.c.agent_id, agent_handoffs.c.tool_name)).all()
    check.dispose()
    declared = {"tool_0": 1, **{t: 1 for t in handoffs}}  # a hand-off changes state
    assert [tuple(r) for r in rows] == [(t, declared.get(t)) for t in TOOLS]
    assert [tuple(r) for r in kept] == [("fleet", t) for t in handoffs]


@pytest.mark.parametrize("second", [["tool_1", "tool_9"], []])
def test_a_registration_replaces_the_toolbox(db_url: str, engine: object, tmp_path: Path, second: list[str]) -> None:
    sf = Skillflow(agent_id="a", database_url=db_url, spool_dir=tmp_path / "spool")
    other = Skillflow(agent_id="b", database_url=db_url, spool_dir=tmp_path / "spool")
    assert other.register_tools(["tool_1"], hands_off=["tool_1"])
    assert sf.register_tools(TOOLS, hands_off=["tool_1"])
    assert sf.register_tools(second, state_changing={n: False for n in second})
    check = make_engine(db_url)
    with check.connect() as conn:
        rows = conn.execute(
            select(
                agent_tools.c.agent_id, agent_tools.c.tool_name, agent_tools.c.changes_state, agent_tools.c.hands_off
            ).order_by(agent_tools.c.agent_id, agent_tools.c.tool_name)
        ).all()
    check.dispose()
    assert [tuple(r) for r in rows] == [("a", n, 0, 0) for n in second] + [("b", "tool_1", 1, 1)]
