"""A class marked for a recount while a recount rewrites its row keeps the mark (a concurrency audit, 2026-12-05).

A late conversation outcome (or a stamp change) marks its class ``stale`` so the next fold recounts it. A
recount deletes the class's row and inserts it again from a snapshot taken before that change: the mark's UPDATE
waited on the deleted row, found it gone, and the following SELECT saw the new row, so nothing was marked, and
the class kept the old outcome in its statistics until the next full recount (3 of 5, 2 of 20, 2 of 20 audit
rounds). The mark now writes the row again when one appeared meanwhile.
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import Engine, select, text

from skillflow.kernel.models import utcnow
from skillflow.storage.class_stats import mark_stale
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import metadata

KEY = ("agent-a", "u1", "a" * 64)


@pytest.mark.postgres
def test_a_mark_waiting_on_a_recount_s_rewrite_of_the_row_lands_on_the_new_row(pg_schema_url: str) -> None:
    engine = make_engine(pg_schema_url)  # row locks are the subject: no SQLite twin
    migrate(engine)
    cs = metadata.tables["class_stats"]
    now = utcnow()
    row = {"agent_id": KEY[0], "user_id": KEY[1], "canonical_hash": KEY[2], "newest_at": now, "stale": 0,
           "updated_at": now}  # fmt: skip
    with engine.begin() as conn:
        conn.execute(cs.insert(), [row])
    done: list[int] = []
    with engine.connect() as recount:  # what a recount does to the row, in its own transaction
        recount.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        recount.execute(cs.delete().where(cs.c.canonical_hash == KEY[2]))
        recount.execute(cs.insert(), [row])

        def mark() -> None:
            with engine.begin() as conn:
                done.append(mark_stale(conn, [KEY]))

        marker = threading.Thread(target=mark)
        marker.start()
        time.sleep(1.0)  # the mark's UPDATE waits on the row the recount deleted
        assert not done
        recount.commit()
    marker.join(30)
    assert done
    with engine.connect() as conn:
        assert conn.execute(select(cs.c.stale).where(cs.c.canonical_hash == KEY[2])).scalar_one() == 1
    engine.dispose()


def test_a_fold_outlasts_a_burst_of_serialization_failures(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a concurrency audit: ``skillflow class-stats`` (a fold, or ``--recount``) failed in 7 of 8 runs
    while agents recorded and a shadow drain ran: the drain writes the same fresh rows as the fold, and five quick
    retries (0.25 s in all) were spent. A fold now backs off exponentially, up to about 12 s."""
    from sqlalchemy.exc import OperationalError

    import skillflow.storage.class_stats as class_stats

    class Conflict(Exception):
        sqlstate = "40001"

    calls: list[int] = []

    def work(conn: object) -> str:
        calls.append(1)
        if len(calls) <= 8:
            raise OperationalError("UPDATE …", {}, Conflict("could not serialize access due to concurrent update"))
        return "folded"

    monkeypatch.setattr(class_stats.time, "sleep", lambda _: None)
    assert class_stats._in_snapshot(engine, work) == "folded" and len(calls) == 9


def test_the_cli_names_a_conflict_as_such_not_as_a_server_down() -> None:
    from sqlalchemy.exc import OperationalError

    from skillflow.cli.errors import explain

    class Conflict(Exception):
        sqlstate = "40001"

    error = explain(OperationalError("UPDATE …", {}, Conflict("could not serialize access due to concurrent update")))
    assert error is not None and "run the command again" in error.message and "server running" not in error.message
