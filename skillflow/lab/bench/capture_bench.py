"""``skillflow bench capture``: capture latency through ``Skillflow.record_run`` and canonicalization throughput.

Latency is measured per call on a file SQLite database (one transaction per run, as an agent would
write); throughput is ``canonical.signature`` + ``canonical.canonical_hash`` over pre-built 5-step runs
on one core.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from skillflow.kernel import canonical
from skillflow.kernel.models import Step
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate

TARGET_P95_MS = 5.0
TARGET_RUNS_PER_S = 20_000.0


@dataclass(frozen=True)
class CaptureBench:
    backend: str
    runs: int
    stored: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    canonical_runs: int
    canonical_runs_per_s: float
    load_average: float | None = None
    target_p95_ms: float = TARGET_P95_MS
    target_runs_per_s: float = TARGET_RUNS_PER_S

    @property
    def meets_targets(self) -> bool:
        return self.p95_ms <= self.target_p95_ms and self.canonical_runs_per_s >= self.target_runs_per_s

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "meets_targets": self.meets_targets}


def load_average() -> float | None:
    """1-minute load average at the end of a measurement (other work on the machine skews timings)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - platforms without getloadavg
        return None


def five_step_run(i: int) -> list[Step]:
    """A realistic 5-step run (lookup, check, retry-free update, payment, receipt) with varying values."""
    ts = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=i)
    return [
        Step("get_reservation", {"reservation_id": f"R{i:06d}"}, {"id": f"R{i:06d}", "status": "booked"}, timestamp=ts),
        Step("check_policy", {"reservation_id": f"R{i:06d}", "action": "change"}, {"allowed": True}),
        Step("search_flights", {"origin": "SFO", "destination": "JFK", "date": "2025-02-01"}, {"flights": [1, 2]}),
        Step("update_reservation", {"reservation_id": f"R{i:06d}", "flight": "UA1"}, {"ok": True}),
        Step("charge_payment", {"amount": 10 + i % 90, "method": "card"}, {"accepted": True}),
    ]


def _percentile(sorted_values: list[float], q: float) -> float:
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


def canonical_throughput(n: int) -> float:
    """Runs per second through signature + hash (single thread)."""
    runs = [five_step_run(i) for i in range(n)]
    start = time.perf_counter()
    for steps in runs:
        canonical.canonical_hash(canonical.signature(steps))
    elapsed = time.perf_counter() - start
    return n / elapsed if elapsed else float("inf")


def run(
    runs: int = 1000, database_url: str | None = None, canonical_runs: int = 20_000, warmup: int = 20
) -> CaptureBench:
    """Measure capture latency (``runs`` calls after ``warmup``) and canonicalization throughput."""
    with tempfile.TemporaryDirectory() as tmp:
        url = database_url or f"sqlite:///{Path(tmp) / 'capture-bench.db'}"
        engine = make_engine(url)
        migrate(engine)
        sf = Skillflow(agent_id="bench-capture", engine=engine, spool_dir=Path(tmp) / "spool")
        for i in range(warmup):
            sf.record_run(f"warm up {i}", "bench-user", five_step_run(i))
        latencies: list[float] = []
        stored = 0
        for i in range(runs):
            steps = five_step_run(warmup + i)
            start = time.perf_counter()
            result = sf.record_run(f"change reservation {i % 50}", "bench-user", steps)
            latencies.append((time.perf_counter() - start) * 1000.0)
            stored += int(result.stored)
        engine.dispose()
    latencies.sort()
    return CaptureBench(
        backend=engine.dialect.name,
        runs=runs,
        stored=stored,
        p50_ms=round(_percentile(latencies, 0.50), 3),
        p95_ms=round(_percentile(latencies, 0.95), 3),
        p99_ms=round(_percentile(latencies, 0.99), 3),
        mean_ms=round(statistics.fmean(latencies), 3),
        canonical_runs=canonical_runs,
        canonical_runs_per_s=round(canonical_throughput(canonical_runs), 1),
        load_average=load_average(),
    )
