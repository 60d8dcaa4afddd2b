"""No hand-off skills by default: a class calling a tool the agent declared a hand-off is not promoted, through
the cycle over stored runs; registering declares the flag and a hand-off is a state-changing tool."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import Step
from skillflow.promotion.cycle import run_partition
from skillflow.promotion.gates import HANDOFF_CLASS
from skillflow.runtime import Skillflow
from skillflow.storage.schema import agent_tools, workflow_memory

CONFIG = PromotionConfig(min_executions=3, promotion_every_n_runs=0)
TOOLS = ["get_user_details", "cancel_reservation", "transfer_to_human_agents"]
LOOKUP = Step("get_user_details", {"user_id": "mia_1"}, {"name": "Mia"})
HANDOFF = [LOOKUP, Step("transfer_to_human_agents", {"summary": "wants a refund"}, "Transfer successful")]
CANCEL = [LOOKUP, Step("cancel_reservation", {"reservation_id": "ZQ1"}, {"status": "cancelled"})]


def _seed(engine: Engine, hands_off: list[str]) -> None:
    sf = Skillflow(agent_id="a1", engine=engine, config=CONFIG)
    sf.register_tools(TOOLS, hands_off=hands_off)
    for i in range(3):
        assert sf.record_run(f"I need a person about booking {i}", "u1", HANDOFF, strict=True).stored
        assert sf.record_run(f"cancel my booking {i}", "u1", CANCEL, strict=True).stored


def _table(engine: Engine, config: PromotionConfig = CONFIG) -> dict[str, tuple[bool, str | None]]:
    """ "handoff"/"cancel" → (handoff gate passed, reported reason) from a dry-run cycle's class table."""
    with engine.connect() as conn:
        rows = conn.execute(select(workflow_memory.c.canonical_hash, workflow_memory.c.tool_sequence)).all()
    kind = {h: "handoff" if "transfer" in seq else "cancel" for h, seq in rows}
    report = run_partition(engine, "a1", "u1", config, dry_run=True)
    return {kind[row.canonical_hash]: (row.checks["handoff"], row.reason) for row in report.gates}


def test_a_class_calling_a_declared_handoff_is_not_promoted(engine: Engine) -> None:
    _seed(engine, ["transfer_to_human_agents"])
    assert _table(engine) == {"handoff": (False, HANDOFF_CLASS), "cancel": (True, None)}
    report = run_partition(engine, "a1", "u1", CONFIG, dry_run=True)
    assert len(report.would_promote) == 1
    assert sum(1 for _, reason in report.skipped if reason == HANDOFF_CLASS) == 1
    with engine.connect() as conn:
        flags = dict(conn.execute(select(agent_tools.c.tool_name, agent_tools.c.hands_off)).all())
        writes = dict(conn.execute(select(agent_tools.c.tool_name, agent_tools.c.changes_state)).all())
    assert flags == {"get_user_details": 0, "cancel_reservation": 0, "transfer_to_human_agents": 1}
    assert writes["transfer_to_human_agents"] == 1  # a hand-off is declared state-changing


def test_without_a_declaration_or_with_the_opt_out_the_handoff_class_is_eligible(engine: Engine) -> None:
    _seed(engine, [])
    assert _table(engine)["handoff"] == (True, None)
    Skillflow(agent_id="a1", engine=engine, config=CONFIG).register_tools(TOOLS, hands_off=["transfer_to_human_agents"])
    assert _table(engine)["handoff"] == (False, HANDOFF_CLASS)
    assert _table(engine, CONFIG.model_copy(update={"promote_handoff_classes": True}))["handoff"] == (True, None)


def test_a_handoff_must_be_registered_and_cannot_be_declared_read_only(engine: Engine) -> None:
    sf = Skillflow(agent_id="a1", engine=engine, config=CONFIG)
    sf.register_tools(TOOLS, hands_off="transfer_to_human_agents")  # one name, not its letters
    with engine.connect() as conn:
        assert conn.execute(select(agent_tools.c.tool_name).where(agent_tools.c.hands_off == 1)).scalars().all() == [
            "transfer_to_human_agents"
        ]
    with pytest.raises(ValueError, match="not registered"):
        sf.register_tools(["get_user_details"], hands_off=["transfer_to_human_agents"])
    with pytest.raises(ValueError, match="cannot be declared read-only"):
        sf.register_tools(
            TOOLS, state_changing={"transfer_to_human_agents": False}, hands_off=["transfer_to_human_agents"]
        )


def _register_as_a_release_before_013(engine: Engine) -> None:
    """What an agent process of a release before migration 013 writes when it registers its tools: every row of
    the agent deleted and inserted again, without ``hands_off`` (its schema has no such column)."""
    from datetime import UTC, datetime

    from sqlalchemy import delete, insert

    with engine.begin() as conn:
        conn.execute(delete(agent_tools).where(agent_tools.c.agent_id == "a1"))
        now = datetime.now(UTC)
        conn.execute(insert(agent_tools), [{"agent_id": "a1", "tool_name": t, "registered_at": now} for t in TOOLS])


def test_an_older_agent_registering_its_tools_again_keeps_the_handoff_gate(engine: Engine) -> None:
    """During a rolling upgrade an agent process still on a release before 013 registers its tools at start-up;
    before, that cleared the declaration and the next cycle promoted the hand-off class."""
    _seed(engine, ["transfer_to_human_agents"])
    _register_as_a_release_before_013(engine)
    assert _table(engine) == {"handoff": (False, HANDOFF_CLASS), "cancel": (True, None)}
    # A current registration without the declaration is the agent's own choice: the gate follows it.
    Skillflow(agent_id="a1", engine=engine, config=CONFIG).register_tools(TOOLS)
    assert _table(engine)["handoff"] == (True, None)
    Skillflow(agent_id="a1", engine=engine, config=CONFIG).register_tools(TOOLS, hands_off=["transfer_to_human_agents"])
    _register_as_a_release_before_013(engine)
    assert _table(engine)["handoff"] == (False, HANDOFF_CLASS)
