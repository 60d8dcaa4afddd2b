"""``skillflow bench scale --fleet`` end to end at a tiny size: a real server, the pool, one round; structure only.

What ``docs/BENCHMARKS.md`` reports for the whole cycle on one and on two workers comes from this code path
(:func:`skillflow.lab.bench.fleet_bench.measure_fleet`); here it runs once on 4 tenants so that a broken harness
fails the suite instead of a benchmark run. Timings are never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_SKIP_REASON, POSTGRES_DSN

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prefect,
    pytest.mark.postgres,
    pytest.mark.skipif(not POSTGRES_DSN, reason=PG_SKIP_REASON),
]


def test_bench_scale_fleet_measures_one_round_on_one_and_two_workers(tmp_path: Path) -> None:
    cli = Path(sys.executable).with_name("skillflow")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
    args = ["bench", "scale", "--scenarios", "4x20x2", "--backends", "postgresql", "--db", str(POSTGRES_DSN)]
    args += ["--repeats", "1", "--aggregate-repeats", "1", "--fold-rows", "4", "--fleet", "--fleet-rounds", "1"]
    done = subprocess.run([str(cli), *args, "--json"], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads(done.stdout)
    fleet = result["fleet"]
    assert "not_measured" not in fleet, fleet
    assert result["match"] and fleet["partitions"] == 4 and fleet["chunks"] == 2
    assert fleet["server_database"] == "postgresql"  # the production topology, not the server's SQLite file
    assert fleet["setup"]["unscheduled"] >= 3  # no scheduled cycle can take the measured cycle's slot
    assert len(fleet["one_worker_runs"]) == 1 and len(fleet["two_workers_runs"]) == 1
    assert fleet["one_worker_s"] > 0 and fleet["two_workers_s"] > 0
    assert fleet["speedup"] == round(fleet["one_worker_s"] / fleet["two_workers_s"], 2)
