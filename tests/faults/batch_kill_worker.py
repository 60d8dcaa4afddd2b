"""A worker that runs a pool-mode chunk's flow run and SIGKILLs itself inside a batch task run, mid-batch.

``python -m tests.faults.batch_kill_worker FLOW POINT FLOW_RUN_ID WHERE_FILE`` runs the flow run ``FLOW_RUN_ID``
of a deployment on a work pool as Prefect's engine runs it (``prefect.engine``: the run read from the API,
``run_flow`` under ``handle_engine_signals``; ``tests/faults/ops_kill_worker.py``, ``review-run``), so the flow
takes the fleet's batching (``SKILLFLOW_FLEET_PARTITIONS_PER_TASK``) from the environment as on a worker:

* ``cycle`` — a ``promotion-partitions`` chunk, whose partitions run in ``cycle_batch`` task runs;
* ``drift`` — a ``drift-partitions`` chunk (the ``drift-demotion`` flow given its partitions), whose partitions
  run in ``check_drift_batch`` task runs.

The process is killed with SIGKILL at ``POINT`` of the batch's **second** partition (:data:`SECOND`), after the
first one's cycle or check returned (its writes committed) and before the batch returns (so before the flow has
emitted any of the batch's events):

* ``cycle``: ``sweep`` (its sweep done, nothing landed), ``store`` (its first class's skill stored and stamped,
  the second class not distilled), ``report`` (its report and cycle mark committed, its lease not released, the
  third partition not started) — the stages of ``tests/faults/kill_worker.py``;
* ``drift``: ``demoted`` (its drifting skill's demotion committed, its report not stored), ``report`` (its report
  stored, its applicability rule not refit).

Before dying the worker writes to ``WHERE_FILE`` (JSON) the task run and the partitions it was in and every event
the flow emitted (``tasks.events.emit`` is recorded there, not sent), so the test can tell it was killed where it
meant to be and that the crashed attempt emitted nothing.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

from tests.faults.kill_worker import STAGES

SECOND = "u2"  # the batch's second partition (the test's chunk: u1, u2, u3 of one agent)
DRIFT_POINTS = ("demoted", "report")
CYCLE_POINTS = ("sweep", "store", "report")

_seen: dict[str, Any] = {"partitions": [], "events": []}


def _record(where: Path) -> None:
    where.write_text(json.dumps(_seen))


def _task_run_name() -> str | None:
    from prefect.runtime import task_run

    return str(task_run.name) if task_run.name else None


def _die(where: Path) -> None:
    _seen["killed_in"] = {"task_run": _task_run_name(), "partition": _seen["partitions"][-1]}
    _record(where)
    os.kill(os.getpid(), signal.SIGKILL)


def _in_second(fn: Callable[..., Any], where: Path, when: Callable[[Any], bool] = lambda result: True) -> Any:
    """``fn`` that kills the process right after a call of it returns inside the second partition (and ``when``
    holds for what it returned)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if _seen["partitions"] and _seen["partitions"][-1] == SECOND and when(result):
            _die(where)
        return result

    return wrapper


def _tracking(fn: Callable[..., Any], user_of: Callable[..., str]) -> Any:
    """``fn`` (a partition's composition) that records which partition is in progress."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _seen["partitions"].append(user_of(*args, **kwargs))
        return fn(*args, **kwargs)

    return wrapper


def arm_cycle(point: str, where: Path) -> Any:
    from flows.promotion_partitions import promotion_partitions
    from skillflow.promotion import cycle

    # cycle_batch calls cycle.run_partition by attribute: this records each partition it starts
    cycle.run_partition = _tracking(cycle.run_partition, lambda engine, agent_id, user_id, *a, **k: user_id)
    module, name = STAGES[point]
    setattr(module, name, _in_second(getattr(module, name), where))
    return promotion_partitions


def arm_drift(point: str, where: Path) -> Any:
    import tasks.drift
    from flows.drift_demotion import drift_demotion
    from skillflow.lifecycle import drift

    # check_drift_batch calls tasks.drift.run_drift by name: this records each partition it starts
    tasks.drift.run_drift = _tracking(tasks.drift.run_drift, lambda *a, **k: k["user_id"])
    if point == "demoted":
        drift.check_skill = _in_second(drift.check_skill, where, lambda r: r is not None and r.decision == "demote")
    elif point == "report":
        drift.store_report = _in_second(drift.store_report, where)
    else:
        raise SystemExit(f"unknown drift point {point!r}")
    return drift_demotion


def main(flow: str, point: str, flow_run_id: str, where_file: str) -> None:
    from prefect.engine import handle_engine_signals
    from prefect.flow_engine import load_flow_run, run_flow

    from tasks import events

    where = Path(where_file)
    events.emit = lambda *args: _seen["events"].append(list(args[:2])) or True  # type: ignore[assignment]
    armed = arm_cycle(point, where) if flow == "cycle" else arm_drift(point, where)
    with handle_engine_signals(UUID(flow_run_id)):
        run_flow(armed, flow_run=load_flow_run(UUID(flow_run_id)))
    _record(where)
    raise SystemExit(3)  # not reached: the point killed us


if __name__ == "__main__":
    main(*sys.argv[1:5])
