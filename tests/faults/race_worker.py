"""A long-lived cycle worker process for the race test: one shipped ``run_partition`` per line of stdin.

``python -m tests.faults.race_worker``; each stdin line is ``DB_URL FLOW_RUN_ID START_AT`` (START_AT a
``time.time()`` value). The worker sleeps until START_AT, so two workers fed the same line start their
cycles within a millisecond or so of each other, then runs :func:`skillflow.promotion.cycle.run_partition`
(what the ``promotion-cycle`` flow's task runs) and prints one JSON line: the report's outcome, or the
error class. The process stays up between rounds so the race is between cycles, not between imports.
"""

from __future__ import annotations

import json
import os
import sys
import time

from skillflow.promotion.cycle import run_partition
from skillflow.storage import leases
from skillflow.storage.engine import make_engine
from tests.support.promotion import AGENT, config


def one_round(url: str, flow_run_id: str, start_at: float) -> dict[str, object]:
    engine = make_engine(url)
    try:
        with engine.connect():  # open the pool's connection before the start line: race the cycles only
            pass
        time.sleep(max(0.0, start_at - time.time()))
        started = time.time()
        report = run_partition(engine, AGENT, "u1", config(), flow_run_id=flow_run_id)
        return {
            "started": started,
            "promoted": report.promoted,
            "partition_skipped": report.partition_skipped,
            "skipped": [list(s) for s in report.skipped],
        }
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
        return {"error": type(exc).__name__, "detail": str(exc)[:500]}
    finally:
        engine.dispose()


def main() -> None:
    if os.environ.get("RACE_WITHOUT_LEASE") == "1":  # model an expired lease: both cycles proceed
        leases.acquire = lambda *args, **kwargs: True
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        url, flow_run_id, start_at = line.split()
        print(json.dumps(one_round(url, flow_run_id, float(start_at))), flush=True)


if __name__ == "__main__":
    main()
