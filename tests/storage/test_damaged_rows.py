"""A damaged row of one tenant stays that tenant's problem (an outside reliability audit, 2026-12-05).

Rows the pipeline reads can be written by something else than skillflow (a migration script, a repair by hand,
another tool). Two such rows stopped every tenant's work, each case failing on the code before:

- a run whose ``shadow_evaluations`` is valid JSON of another shape (``5``, ``{"k": 1}``, ``[5]``): every shadow
  drain claimed it first and failed the whole batch, so no tenant's runs were evaluated again;
- on SQLite, a run whose ``created_at`` text carries its offset (``…T10:00:00Z``, as ISO text from another tool):
  the promotion chunk's shared read raised ``ValueError``, so no partition of the chunk ran, and
  ``skillflow status`` printed a traceback. A time that cannot be read at all now fails its tenant's partition
  alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text, update
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.injection.embeddings import get_embedder
from skillflow.lifecycle.shadow import drain_shadow_evaluations
from skillflow.promotion import cycle
from skillflow.promotion.chunk import prefetch
from skillflow.storage.schema import skillbox, workflow_memory
from tests.support.promotion import AGENT, agent, config, record_cancel

pytestmark = pytest.mark.usefixtures("offline_providers")


@pytest.mark.parametrize("damage", ["5", '{"k": 1}', "[5]", '[5, {"idempotency_key": null}]'])
def test_a_run_with_damaged_shadow_records_does_not_stop_the_other_tenants_runs(engine: Engine, damage: str) -> None:
    sf = agent(engine)
    for i in range(3):
        record_cancel(sf, "damaged", i)
    for i in range(3, 6):
        record_cancel(sf, "healthy", i)
    with engine.begin() as conn:  # the damaged tenant's oldest run: the first every drain claims
        conn.execute(
            text("UPDATE workflow_memory SET shadow_evaluations = :v WHERE id = 'cancel-damaged-0'"), {"v": damage}
        )
    report = drain_shadow_evaluations(
        engine, config(shadow_evaluation_enabled=True), get_embedder("hashing"), None, batch_size=2
    )
    with engine.connect() as conn:
        pending = dict(
            conn.execute(
                select(workflow_memory.c.user_id, func.count())
                .where(workflow_memory.c.shadow_pending == 1)
                .group_by(workflow_memory.c.user_id)
            ).all()
        )
    assert pending == {}, (pending, report)
    assert report.failed == 0 and report.claimed == 6


def _two_tenants(engine: Engine) -> None:
    sf = agent(engine)
    for user in ("A", "B"):
        for i in range(6):
            record_cancel(sf, user, i + (0 if user == "A" else 10))


def _cycle_chunk(engine: Engine) -> dict[str, str | None]:
    """What the ``promotion-cycle`` flow runs for one chunk: its shared read, then each partition."""
    cfg = config()
    parts = [(AGENT, "A"), (AGENT, "B")]
    shared = prefetch(engine, parts, cfg, dry_run=False, force=True, flow_run_id="fr-1")
    failed: dict[str, str | None] = {}
    for part in parts:  # a failed partition raises, and the flow records it as that partition's failure
        try:
            cycle.run_partition(engine, *part, cfg, force=True, flow_run_id="fr-1", prefetched=shared.get(part))
            failed[part[1]] = None
        except cycle.PartitionFailed as exc:
            failed[part[1]] = exc.reason
    return failed


def _skills(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(conn.execute(select(skillbox.c.user_id, func.count()).group_by(skillbox.c.user_id)).all())


def test_a_sqlite_time_written_with_its_offset_is_read(sqlite_engine: Engine, tmp_path: Path) -> None:
    _two_tenants(sqlite_engine)
    with sqlite_engine.begin() as conn:
        conn.execute(
            update(workflow_memory)
            .where(workflow_memory.c.id == "cancel-A-0")
            .values(created_at=text("'2026-12-01T10:00:00Z'"))
        )
    assert _cycle_chunk(sqlite_engine) == {"A": None, "B": None}
    assert _skills(sqlite_engine) == {"A": 1, "B": 1}
    url = str(sqlite_engine.url)
    result = CliRunner().invoke(app, ["status", "--db", url])
    assert result.exit_code == 0, (result.output, result.exception)


def test_a_time_that_cannot_be_read_fails_its_tenant_alone(sqlite_engine: Engine) -> None:
    _two_tenants(sqlite_engine)
    with sqlite_engine.begin() as conn:
        conn.execute(
            update(workflow_memory).where(workflow_memory.c.id == "cancel-A-0").values(created_at=text("'yesterday'"))
        )
    assert _cycle_chunk(sqlite_engine) == {"A": "aggregation failed: ValueError", "B": None}
    assert _skills(sqlite_engine) == {"B": 1}
