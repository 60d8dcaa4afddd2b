"""The whole promotion cycle on a local process work pool: one worker against two, same database and data.

``measure_fleet(url)`` starts a local fleet (``skillflow.lab.fleet.LocalFleet``: ``prefect server``,
``skillflow deploy``, one control worker, two compute workers with ``--limit 1``) — on PostgreSQL the server
gets a throwaway database of its own on the same PostgreSQL server, as production runs it (on SQLite it locks
under the fleet's concurrent writes and every client stalls ~2 s per retry) —, drops every deployment's cron
schedule (:func:`skillflow.lab.fleet.unschedule`: a scheduled cycle took the measured cycle's concurrency slot
and cancelled it; a scheduled drift check or shadow drain would land in some measurements and not in others),
runs one warm-up cycle for a single tenant, then ``rounds`` times: the whole cycle with two compute
workers, one worker stopped, the cycle again, the worker started again. Every measured cycle is a dry run with the
same ``chunks``, so all do the same work on the same rows (aggregation, gates, evidence, distillation, validation;
nothing is stored, so a later run is not cheaper than an earlier one). The speed-up is the ratio of the medians.
``skillflow bench scale`` calls it; ``python -m skillflow.lab.bench.fleet_bench
--db URL [--rows N --tenants N --classes N]`` seeds a database and runs it alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skillflow.lab.fleet import LocalFleet, server_database, unschedule

OFFLINE_ENV = {"SKILLFLOW_DISTILLER": "offline", "SKILLFLOW_JUDGE": "offline", "SKILLFLOW_EMBEDDER": "hashing"}
OVERRIDES = {"require_shadow": False, "promotion_every_n_runs": 0, "shadow_evaluation_enabled": False}


@dataclass
class FleetBenchResult:
    """Wall times of one cycle on one and on two compute workers, and their ratio (same run, same data)."""

    partitions: int
    chunks: int
    one_worker_s: float  # median over the rounds
    two_workers_s: float
    speedup: float  # one_worker_s / two_workers_s
    one_worker_runs: list[float] = field(default_factory=list)
    two_workers_runs: list[float] = field(default_factory=list)
    partitions_per_task: int = 0
    server_database: str = ""  # the Prefect server's database backend: postgresql (production) or sqlite
    setup: dict[str, float] = field(default_factory=dict)


def _cycle(url: str, chunks: int, timeout: float, **scope: str) -> float:
    """Start ``promotion-cycle`` (dry run, forced), wait for it to complete; its wall time in seconds."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    params = {"database_url": url, "force": True, "dry_run": True, "chunks": chunks, "config_overrides": OVERRIDES}
    started = time.monotonic()
    run: Any = run_deployment("promotion-cycle/promotion-cycle", parameters={"params": {**params, **scope}}, timeout=0)
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(run.id)
            if run.state.is_final() or time.monotonic() - started > timeout:
                break
            time.sleep(0.5)
    elapsed = time.monotonic() - started
    if not run.state.is_completed():
        raise RuntimeError(f"promotion-cycle ended {run.state.type.value}: {run.state.message}")
    return elapsed


def _partitions(url: str) -> list[tuple[str, str]]:
    from skillflow.storage.aggregate import partitions
    from skillflow.storage.engine import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return partitions(conn, None, None)
    finally:
        engine.dispose()


@contextlib.contextmanager
def _server_db(database_url: str) -> Iterator[str | None]:
    """A throwaway Prefect server database beside a PostgreSQL store (None: the server's own SQLite file)."""
    if not database_url.startswith("postgresql"):
        yield None
        return
    with server_database(database_url, prefix="prefect_bench") as url:
        yield url


def measure_fleet(
    database_url: str,
    *,
    chunks: int = 2,
    rounds: int = 3,
    home: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 3600.0,
) -> FleetBenchResult:
    """Wall times of the whole cycle with two compute workers and with one, alternating ``rounds`` times."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    from tasks.fanout import FleetSettings

    parts = _partitions(database_url)
    if not parts:
        raise ValueError("the database has no partitions: seed it first")
    two: list[float] = []
    one: list[float] = []
    with tempfile.TemporaryDirectory(prefix="skillflow-fleet-") as tmp, _server_db(database_url) as server_db:
        fleet = LocalFleet(home or Path(tmp) / "prefect", env={**OFFLINE_ENV, **(env or {})}, server_db=server_db)
        with fleet:
            fleet.cli("deploy", "--pool", "compute", "--control-pool", "ctl", "--db", database_url, "--json")
            settings = {PREFECT_API_URL: fleet.api_url, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}
            with temporary_settings(settings):
                fleet.timings["unscheduled"] = unschedule()
                fleet.start_workers("ctl", 1, limit=None)
                fleet.start_workers("compute", 2, limit=1)
                agent, user = parts[0]
                _cycle(database_url, 1, timeout, agent_id=agent, user_id=user)  # warm-up: imports, caches
                for i in range(rounds):
                    if i:
                        fleet.start_workers("compute", 1, limit=1)
                    two.append(round(_cycle(database_url, chunks, timeout), 2))
                    fleet.stop_workers("compute", keep=1)
                    one.append(round(_cycle(database_url, chunks, timeout), 2))
            setup = dict(fleet.timings)
    one_s, two_s = statistics.median(one), statistics.median(two)
    return FleetBenchResult(
        partitions=len(parts),
        chunks=chunks,
        one_worker_s=round(one_s, 2),
        two_workers_s=round(two_s, 2),
        speedup=round(one_s / two_s, 2),
        one_worker_runs=one,
        two_workers_runs=two,
        partitions_per_task=int(
            (env or {}).get("SKILLFLOW_FLEET_PARTITIONS_PER_TASK") or FleetSettings().partitions_per_task
        ),
        server_database="postgresql" if server_db else "sqlite",
        setup=setup,
    )


def main() -> None:  # pragma: no cover - a manual entry point
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="SQLAlchemy URL (PostgreSQL for a real fleet)")
    parser.add_argument("--rows", type=int, default=0, help="Seed this many runs first (0: use the data as is)")
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="Alternating two-worker / one-worker cycles")
    args = parser.parse_args()
    if args.rows:
        from skillflow.lab.bench.cycle_bench import generate
        from skillflow.storage.class_stats import recount
        from skillflow.storage.engine import make_engine
        from skillflow.storage.migrations import migrate

        engine = make_engine(args.db)
        migrate(engine)
        generate(engine, args.rows, args.tenants, args.classes)
        recount(engine)  # what the first cycle's fold would do: the measured cycles read maintained statistics
        engine.dispose()
    print(json.dumps(asdict(measure_fleet(args.db, chunks=args.chunks, rounds=args.rounds)), indent=1))


if __name__ == "__main__":
    main()
