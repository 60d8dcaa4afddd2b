"""No read-only skills by default: a class without a state-changing call is not promoted when the tenant changes
state (a tool declared state-changing, or one it registered or calls that writes by the tool-name verb rule); a
tenant that declared every tool read-only, or whose tools all read by name, keeps read-only classes eligible."""

from __future__ import annotations

from sqlalchemy import Engine, select

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import Step
from skillflow.promotion.cycle import promote_class, run_partition
from skillflow.promotion.gates import READ_ONLY_CLASS
from skillflow.runtime import Skillflow
from skillflow.storage.schema import workflow_memory

CONFIG = PromotionConfig(min_executions=3, promotion_every_n_runs=0)
READS = ["get_user_details", "get_reservation_details"]
TOOLS = [*READS, "cancel_reservation"]
LOOKUP = [
    Step("get_user_details", {"user_id": "mia_1"}, {"name": "Mia"}),
    Step("get_reservation_details", {"reservation_id": "ZQ1"}, {"status": "booked"}),
]
CANCEL = [*LOOKUP, Step("cancel_reservation", {"reservation_id": "ZQ1"}, {"status": "cancelled"})]


def _seed(
    engine: Engine, state_changing: dict[str, bool] | None, *, tools: list[str] = TOOLS, cancel: bool = True
) -> None:
    sf = Skillflow(agent_id="a1", engine=engine, config=CONFIG)
    sf.register_tools(tools, state_changing=state_changing)
    for i in range(3):
        assert sf.record_run(f"what is on my booking {i}", "u1", LOOKUP, strict=True).stored
        if cancel:
            assert sf.record_run(f"cancel my booking {i}", "u1", CANCEL, strict=True).stored


def _table(engine: Engine, config: PromotionConfig = CONFIG) -> dict[str, tuple[bool, str | None]]:
    """ "lookup"/"cancel" → (read_only gate passed, reported reason) from a dry-run cycle's class table."""
    with engine.connect() as conn:
        rows = conn.execute(select(workflow_memory.c.canonical_hash, workflow_memory.c.tool_sequence)).all()
    sequences = {h: seq for h, seq in rows}
    report = run_partition(engine, "a1", "u1", config, dry_run=True)
    name = {"get_user_details > get_reservation_details": "lookup"}
    return {
        name.get(sequences[row.canonical_hash], "cancel"): (row.checks["read_only"], row.reason) for row in report.gates
    }


def test_read_only_class_is_not_promoted_when_the_agent_declared_a_write(engine: Engine) -> None:
    _seed(engine, {"cancel_reservation": True})
    table = _table(engine)
    assert table["lookup"] == (False, READ_ONLY_CLASS)
    assert READ_ONLY_CLASS == "read-only: no state-changing call"
    assert table["cancel"] == (True, None)
    report = run_partition(engine, "a1", "u1", CONFIG, dry_run=True)
    assert len(report.would_promote) == 1  # the cancel class only
    assert sum(1 for _, reason in report.skipped if reason == READ_ONLY_CLASS) == 1


def test_read_only_class_is_not_promoted_by_default(engine: Engine) -> None:
    _seed(engine, None)  # tools registered without flags (README's first example): the verb rule reads a write
    assert _table(engine)["lookup"] == (False, READ_ONLY_CLASS)


def test_read_only_class_is_not_promoted_when_the_tenant_only_calls_a_write(engine: Engine) -> None:
    _seed(engine, None, tools=READS)  # the write is not registered: it is seen in the tenant's own classes
    assert _table(engine)["lookup"] == (False, READ_ONLY_CLASS)


def test_read_only_classes_stay_eligible_for_a_tenant_whose_tools_all_read(engine: Engine) -> None:
    _seed(engine, None, tools=READS, cancel=False)  # a look-up agent: every tool reads by name
    assert _table(engine)["lookup"] == (True, None)


def _lookup_class(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(
                select(workflow_memory.c.canonical_hash).where(
                    workflow_memory.c.tool_sequence == "get_user_details > get_reservation_details"
                )
            )
            .scalars()
            .first()
        )


def test_one_class_distilled_alone_is_gated_on_the_tenants_tools(engine: Engine) -> None:
    _seed(engine, None, tools=READS)
    report = promote_class(engine, "a1", "u1", _lookup_class(engine), CONFIG, dry_run=True)  # "Distill now"
    assert [g.reason for g in report.gates] == [READ_ONLY_CLASS]


def test_another_users_writes_do_not_gate_a_tenants_look_ups(engine: Engine) -> None:
    _seed(engine, None, tools=READS, cancel=False)  # u1 only looks up
    other = Skillflow(agent_id="a1", engine=engine, config=CONFIG)
    for i in range(3):  # u2 of the same agent cancels, with a tool nobody registered
        assert other.record_run(f"cancel my booking {i}", "u2", CANCEL, strict=True).stored
    report = promote_class(engine, "a1", "u1", _lookup_class(engine), CONFIG, dry_run=True)
    assert [g.checks["read_only"] for g in report.gates] == [True]


def test_declaring_every_tool_read_only_keeps_read_only_classes_eligible(engine: Engine) -> None:
    _seed(engine, {t: False for t in TOOLS})  # an explicit "this agent changes nothing"
    table = _table(engine)
    assert table["lookup"] == (True, None) and table["cancel"] == (True, None)


def test_promote_read_only_classes_turns_the_gate_off(engine: Engine) -> None:
    _seed(engine, {"cancel_reservation": True})
    assert _table(engine, CONFIG.merged({"promote_read_only_classes": True}))["lookup"] == (True, None)
