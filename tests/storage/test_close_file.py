"""``close_file``: once a command that wrote a SQLite file is done, the file alone is the whole database."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from sqlalchemy import func, select

from skillflow.runtime import Skillflow
from skillflow.storage.engine import close_file, make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import workflow_memory


def _runs_in_a_copy_of_the_file_alone(path: Path, tmp_path: Path) -> int:
    copy = tmp_path / "copy.db"
    shutil.copyfile(path, copy)  # the file only, as a backup or `cp demo.db` takes it
    conn = sqlite3.connect(copy)
    try:
        return int(conn.execute("SELECT count(*) FROM workflow_memory").fetchone()[0])
    finally:
        conn.close()


def test_the_log_is_folded_into_the_file_while_the_process_still_holds_its_engines(tmp_path: Path) -> None:
    path = tmp_path / "skillflow.db"
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    migrate(engine)
    sf = Skillflow(agent_id="a", engine=engine, spool_dir=tmp_path / "spool")
    for i in range(20):
        assert sf.record_run(f"cancel reservation {i}", "u", [{"tool": "cancel_reservation"}]).stored
    with engine.connect() as conn:  # a pooled connection stays open, as in a command that has not exited
        assert conn.execute(select(func.count()).select_from(workflow_memory)).scalar() == 20
    wal = path.with_name(path.name + "-wal")
    assert wal.exists() and wal.stat().st_size > 0  # the runs are in the log, not yet in the file

    close_file(url)

    assert not wal.exists() or wal.stat().st_size == 0
    assert _runs_in_a_copy_of_the_file_alone(path, tmp_path) == 20
    with engine.connect() as conn:  # the engines still work afterwards (their pools open new connections)
        assert conn.execute(select(func.count()).select_from(workflow_memory)).scalar() == 20


def test_nothing_to_do_for_a_missing_file_or_another_database(tmp_path: Path) -> None:
    missing = tmp_path / "none" / "x.db"
    close_file(f"sqlite:///{missing}")
    assert not missing.exists() and not missing.parent.exists()  # never creates a file or a folder
    close_file("sqlite://")  # in memory
    close_file("postgresql://nobody@127.0.0.1:1/none")  # not a file: not even a connection is tried
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database")
    close_file(f"sqlite:///{notes}")  # not a database: left as it is
    assert notes.read_text() == "not a database"
