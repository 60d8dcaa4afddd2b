"""The flows' events that had random ids are keyed by their occurrence (docs/guide/ops.md, "Events and
automations"): ``outbox.backlog`` by the database and the flow run, so a retried run sends the same event."""

from __future__ import annotations

import os
from typing import Any

import pytest
from prefect import flow
from sqlalchemy import Engine

from tasks import events
from tasks.common import flow_run_id
from tasks.shadow import note_backlog

pytestmark = pytest.mark.prefect


@flow(name="backlog-probe")
def backlog_probe(database_url: str) -> str | None:
    """Notes the backlog twice, as a retry of the task (or of the run) does, and returns the flow run id."""
    note_backlog(database_url, -1)  # threshold -1: an empty outbox is above it
    note_backlog(database_url, -1)
    return flow_run_id()


def test_a_retried_backlog_note_sends_the_same_event(
    prefect_harness: None, db_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: ``note_backlog`` sent ``outbox.backlog`` under a random id, twice for one flow run."""
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    first_run = backlog_probe(db_url)
    later_run = backlog_probe(db_url)
    assert first_run and later_run and first_run != later_run
    database = os.path.basename(engine.url.database or "") or engine.url.drivername  # as note_backlog names it
    assert [(e, res) for e, res, *_ in sent] == [(events.BACKLOG, f"skillflow.outbox.{database}")] * 4
    runs = [first_run, first_run, later_run, later_run]
    assert [key for *_, key in sent] == [events.stable_id(events.BACKLOG, database, run) for run in runs]
