"""The database unreachable during capture: runs spool, replay later, and the rows equal a direct write.

The outage is real: a PostgreSQL URL to a port nothing listens on (connection refused), or a SQLite path
that cannot be opened as a database (a directory sits where the file belongs; ``make_engine`` creates missing
folders, and as root a read-only folder does not stop a write); both raise ``OperationalError`` through
SQLAlchemy. The agent (``Skillflow`` with the shipped ``record_run``/``record_conversation``) records the
same runs a twin agent writes directly to a healthy database; then a process pointed at the real database
replays the spool, and every table of the two databases is compared row by row.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from skillflow.capture.outcome import Workflow
from skillflow.kernel.models import Step
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import workflow_memory
from tests.conftest import PG_SKIP_REASON, POSTGRES_DSN, _pg_engine
from tests.faults.dbdump import dump
from tests.support.promotion import config

pytestmark = [pytest.mark.usefixtures("offline_providers")]

T0 = datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)


def _free_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def business(workflow: Workflow) -> bool | None:
    """A business evaluator that reads results (it runs again at replay: it must see the same run)."""
    last = workflow.steps[-1]["result"] if workflow.steps else None
    return None if not isinstance(last, dict) else last.get("status") != "declined"


def _call(cid: str, tool: str, result: str, **arguments: Any) -> list[dict[str, Any]]:
    fn = {"name": tool, "arguments": json.dumps(arguments)}
    return [
        {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": fn}]},
        {"role": "tool", "tool_call_id": cid, "content": result},
    ]


CONVERSATION = [
    {"role": "user", "content": "cancel my reservation R1 please"},
    *_call("c1", "get_reservation_details", '{"id": "R1"}', reservation_id="R1"),
    {"role": "user", "content": "yes, proceed"},
    *_call("c2", "cancel_reservation", '{"ok": true}', reservation_id="R1"),
    {"role": "user", "content": "and refund order 7?"},
    *_call("c3", "issue_refund", '{"status": "declined"}', order_id=7),
]


def _capture(sf: Skillflow) -> list[Any]:
    """Every kind of run the agent records: results of many types, errors, times, metadata, a conversation."""
    out: list[Any] = []
    for i in range(5):
        out.append(
            sf.record_run(
                f"Refund order {1000 + i} – café ✓",
                "u1",
                [
                    Step("lookup_order", {"order_id": 1000 + i}, {"total": 12.5 + i, "items": ["a", None, 3]}),
                    {
                        "tool": "issue_refund",
                        "arguments": {"order_id": 1000 + i, "amount": 12.5 + i},
                        "result": {"status": "declined" if i == 3 else "refunded"},
                        "timestamp": T0 + timedelta(seconds=i),
                    },
                ],
                run_id=f"refund-{i}",
                created_at=T0 + timedelta(minutes=i),
                metadata={"channel": "chat", "n": i, "nested": {"x": [1, 2.5, "y"]}},
                skills_activated=["skill-a"] if i % 2 else (),
            )
        )
    out.append(
        sf.record_run(
            "refund order 9",
            "u2",
            [Step("lookup_order", {"order_id": 9}, None, error="order 9 not found", error_class="NotFound")],
            run_id="refund-missing",
            created_at="2026-03-01T10:00:00+02:00",  # text time: coerced the same way both times
            execution_error=TimeoutError("upstream"),
        )
    )
    out.append(sf.record_run("hello there", "u1", [], run_id="chat-only", created_at=T0))
    out.extend(sf.record_conversation(CONVERSATION, "u1", conversation_id="conv-1", created_at=T0))
    return out


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def outage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(unreachable URL, URL of the database that comes back, URL of the twin written directly)."""
    if request.param == "sqlite":
        down = tmp_path / "skillflow.db"
        down.mkdir()  # something that cannot be opened as a database sits where the file belongs
        yield f"sqlite:///{down}", f"sqlite:///{down}", f"sqlite:///{tmp_path / 'twin.db'}"
        return
    if not POSTGRES_DSN:
        pytest.skip(PG_SKIP_REASON)
    real, twin = _pg_engine(), _pg_engine()
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{_free_port()}/test", next(real), next(twin)
    finally:
        next(real, None)
        next(twin, None)


def test_runs_spooled_during_an_outage_replay_to_the_rows_of_a_direct_write(
    outage: tuple[str, str, str], tmp_path: Path
) -> None:
    down_url, back_url, twin_url = outage
    twin = make_engine(twin_url)
    migrate(twin)
    direct = _capture(Skillflow(agent_id="agent", engine=twin, config=config(), workflow_outcome_evaluator=business))
    assert all(r.stored for r in direct), [r.error for r in direct if not r.stored]

    spool = tmp_path / "spool"
    down = make_engine(down_url)
    agent = Skillflow(
        agent_id="agent", engine=down, config=config(), workflow_outcome_evaluator=business, spool_dir=spool
    )
    results = _capture(agent)  # never raises: every call spools, at once (the start-up check opened the breaker)
    assert [(r.stored, r.spooled, r.error) for r in results] == [(False, True, "DatabaseDown")] * len(direct)
    assert [r.run_id for r in results] == [r.run_id for r in direct]  # the same identities, decided at capture
    assert len(list(spool.glob("*.json"))) == len(direct)
    down.dispose()

    if back_url.startswith("sqlite"):
        Path(back_url.removeprefix("sqlite:///")).rmdir()  # the database can be opened again
    back = make_engine(back_url)
    migrate(back)
    later = Skillflow(
        agent_id="agent", engine=back, config=config(), workflow_outcome_evaluator=business, spool_dir=spool
    )
    assert later.replay_spool() == len(direct)
    assert list(spool.glob("*.json")) == []  # replayed files are removed
    assert later.replay_spool() == 0  # a second replay stores nothing more

    got, want = dump(back), dump(twin)
    assert len(want["workflow_memory"]) == len(direct)  # one row per stored run (conversation: one per segment)
    for table in want:
        assert got[table] == want[table], table
    with back.connect() as a, twin.connect() as b:  # times are normalised in the dumps: compare them exactly
        q = select(workflow_memory.c.id, workflow_memory.c.created_at).order_by(workflow_memory.c.id)
        assert a.execute(q).all() == b.execute(q).all()
    back.dispose()
    twin.dispose()
