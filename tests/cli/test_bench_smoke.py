"""Smoke tests of the benchmarks at tiny sizes: output structure and correctness checks, never timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.lab.bench import capture_bench as capture
from skillflow.lab.bench import cycle_bench as cycle
from skillflow.storage.aggregate import partitions
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import skillbox, workflow_memory

# End-to-end runs of a bench or the evaluation harness: `make test` runs them, `make test-fast` does not.
pytestmark = pytest.mark.slow


def test_generate_fills_the_requested_shape(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'gen.db'}")
    migrate(engine)
    cycle.generate(engine, 600, tenants=3, classes=4)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(workflow_memory)).scalar() == 600
        hashes = conn.execute(select(func.count(func.distinct(workflow_memory.c.canonical_hash)))).scalar()
        outcomes = set(conn.execute(select(workflow_memory.c.outcome).distinct()).scalars())
        assert len(partitions(conn)) == 3 and hashes == 4 and outcomes == {"success", "failure", "unknown"}
        assert (
            conn.execute(select(func.count()).select_from(skillbox).where(skillbox.c.status == "demoted")).scalar() == 3
        )
    assert cycle.aggregate_all(engine) == cycle.naive_all(engine)
    engine.dispose()


@pytest.mark.prefect  # the bench times a real promotion-cycle flow run
def test_cycle_bench_structure(tmp_path: Path) -> None:
    result = cycle.run([300, 900], tenants=3, classes=4, repeats=1, workdir=tmp_path).as_dict()
    assert [s["rows"] for s in result["sizes"]] == [300, 900]
    for size in result["sizes"]:
        assert size["results_match"] is True
        assert size["partitions"] == 3 and size["classes"] == 12
        assert size["aggregate_s"] > 0 and size["naive_s"] > 0 and size["aggregate_covering_s"] > 0
        assert len(size["aggregate_runs_s"]) == 1 and size["ratio"] > 0
    assert result["tenants"] == 3 and result["classes_per_tenant"] == 4 and result["notes"]
    assert result["cycle_entry"] == "flows.promotion_cycle.promotion_cycle"
    assert all(s["cycle_considered"] == 12 and s["cycle_s"] > 0 for s in result["sizes"]), result["notes"]


def test_capture_bench_structure() -> None:
    result = capture.run(runs=20, canonical_runs=200, warmup=2).as_dict()
    assert result["stored"] == 20 and result["backend"] == "sqlite"
    assert 0 < result["p50_ms"] <= result["p95_ms"] <= result["p99_ms"]
    assert result["canonical_runs_per_s"] > 0 and isinstance(result["meets_targets"], bool)


def test_bench_cli_json() -> None:
    runner = CliRunner()
    cap = runner.invoke(app, ["bench", "capture", "--runs", "10", "--canonical-runs", "100", "--json"])
    assert cap.exit_code == 0, cap.output
    assert {"p50_ms", "p95_ms", "canonical_runs_per_s", "meets_targets"} <= set(json.loads(cap.stdout))
    cyc = runner.invoke(app, ["bench", "cycle", "--rows", "200", "--tenants", "2", "--classes", "3", "--repeats", "1",
                              "--no-covering", "--json"])  # fmt: skip
    assert cyc.exit_code == 0, cyc.output
    (size,) = json.loads(cyc.stdout)["sizes"]
    assert size["rows"] == 200 and size["classes"] == 6 and size["aggregate_covering_s"] is None
    table = runner.invoke(
        app, ["bench", "cycle", "--rows", "100", "--tenants", "1", "--classes", "2", "--repeats", "1"]
    )
    assert table.exit_code == 0 and "naive" in table.output
    bad = runner.invoke(app, ["bench", "cycle", "--rows", "ten"])
    assert bad.exit_code == 2
