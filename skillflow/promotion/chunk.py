"""One read serves a chunk of partitions: the fold, every partition's counters, the due ones' class statistics.

:func:`prefetch` runs once per chunk (the ``promotion-cycle`` flow's partitions in-process, or one
``promotion-partitions`` child's chunk): it folds the chunk's pending runs (not on a dry run, which writes
nothing), reads every partition's counters in one statement, decides which partitions are due with the cycle's
own cadence rule (:func:`skillflow.promotion.stages.plan_partition`), reads the due partitions' class
statistics in one statement and, for the partitions that are not due, this flow run's stored reports (a
retry) in one more. Only partitions with
pending runs are folded (their counters then read again); a class whose ``since`` moved after the last fold is
aggregated on the spot by the read (:func:`skillflow.storage.class_stats.completed`). Each partition's cycle
(:func:`skillflow.promotion.cycle.run_partition`) then gets its :class:`Prefetched` inputs: a partition that
is not due issues no statement at all, a due one does not read its counters or statistics again. Statements
per chunk are constant (per 1 000 partitions), whatever the history (docs/guide/aggregate.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import ClassStats
from skillflow.promotion.report import PromotionReport
from skillflow.promotion.stages import plan_partition
from skillflow.storage.class_stats import completed, fold, read_stats
from skillflow.storage.counters import SLICE, Counters, read_counters, recounted
from skillflow.storage.reports import report_id
from skillflow.storage.schema import reports

log = logging.getLogger(__name__)

Partition = tuple[str, str]
LEASE_HELD = "lease held by another promotion cycle"


@dataclass(frozen=True)
class Prefetched:
    """A partition's share of the chunk's read: counters, class statistics (None: the partition reads its own at
    the gates, e.g. a dry run with pending runs) and this flow run's finished report of it, if any."""

    counters: Counters
    stats: list[ClassStats] | None = None
    done: PromotionReport | None = None


def usable_report(body: Mapping[str, Any] | None) -> PromotionReport | None:
    """A stored cycle report a retry may return as is (not a lease skip, not a failure)."""
    if not body or body.get("partition_skipped") == LEASE_HELD or body.get("partition_failed"):
        return None
    return PromotionReport.model_validate(body)


def finished_reports(
    engine: Engine, flow_run_id: str, partitions: Sequence[Partition]
) -> dict[Partition, PromotionReport]:
    """This flow run's usable stored cycle report per partition that has one (one statement per slice)."""
    out: dict[Partition, PromotionReport] = {}
    ids = {report_id("promotion", flow_run_id, "cycle", a, u): (a, u) for a, u in partitions}
    keys = list(ids)
    with engine.connect() as conn:
        for i in range(0, len(keys), SLICE):
            for rid, body in conn.execute(
                select(reports.c.id, reports.c.body).where(reports.c.id.in_(keys[i : i + SLICE]))
            ):
                report = usable_report(body)
                if report is not None:
                    out[ids[rid]] = report
    return out


def prefetch(
    engine: Engine,
    partitions: Sequence[Partition],
    config: PromotionConfig,
    *,
    dry_run: bool,
    force: bool,
    flow_run_id: str | None,
) -> dict[Partition, Prefetched]:
    """Each partition's :class:`Prefetched` inputs; empty before the first recount on a dry run (the partitions
    then read the reference aggregation themselves)."""
    wanted = list(dict.fromkeys(partitions))
    if not wanted:
        return {}
    with engine.connect() as conn:
        ready = recounted(conn)
        counters = read_counters(conn, wanted) if ready else {}
    if dry_run and not ready:
        return {}
    # Fold only the partitions with pending runs, scoped and in bounded slices: concurrent children with
    # disjoint chunks do not conflict. Before the first recount the fold is the recount.
    stale = [p for p in wanted if not ready or counters[p].pending]
    if stale and not dry_run:
        for i in range(0, len(stale), SLICE):
            fold(engine, partitions=stale[i : i + SLICE])
        with engine.connect() as conn:
            counters.update(read_counters(conn, stale))
    runs = {p for p in wanted if plan_partition(engine, *p, config, force, counters[p]).run}
    # A due partition asks for its finished report itself (at its lease); only the others need it from here.
    idle = [p for p in wanted if p not in runs]
    done = finished_reports(engine, flow_run_id, idle) if flow_run_id and not dry_run and idle else {}
    due = [p for p in wanted if p in runs and (not dry_run or not counters[p].pending)]  # dry run: aggregate
    stats = _read_due(engine, due) if due else {}
    return {p: Prefetched(counters[p], stats.get(p), done.get(p)) for p in wanted}


def _read_due(engine: Engine, due: list[Partition]) -> dict[Partition, list[ClassStats]]:
    """The due partitions' statistics in one read. A value the read cannot take (a row another tool wrote) fails
    one partition, not the chunk: the partitions are then read one by one, and one whose read fails is left out,
    so it reads (and fails, alone, as ``partition_failed``) in its own partition. A database error is raised."""
    try:
        with engine.connect() as conn:
            return completed(conn, read_stats(conn, due))
    except SQLAlchemyError:
        raise
    except Exception as exc:  # noqa: BLE001 - the class only: the value may be a run's
        log.warning("chunk read failed (%s): its %d due partitions read one by one", type(exc).__name__, len(due))
    stats: dict[Partition, list[ClassStats]] = {}
    for partition in due:
        try:
            with engine.connect() as conn:
                stats.update(completed(conn, read_stats(conn, [partition])))
        except SQLAlchemyError:
            raise
        except Exception:  # noqa: BLE001 - that partition reads for itself and fails there
            continue
    return stats
