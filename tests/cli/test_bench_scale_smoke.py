"""``skillflow bench scale`` and ``skillflow class-stats`` at tiny sizes: structure and agreement, never timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.lab.bench import scale_bench as scale
from skillflow.storage.class_stats import read_stats
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import workflow_memory
from tests.conftest import POSTGRES_DSN


def test_scale_generate_is_set_based_and_shaped(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate(engine)
    s = scale.Scenario.parse("4x30x3")
    scale.generate(engine, s)
    scale.generate(engine, s, 10, prefix="b", pending=True, backdate=True)
    with engine.connect() as conn:
        wm = workflow_memory
        assert conn.execute(select(func.count()).select_from(wm)).scalar() == 130
        pending = conn.execute(select(func.count()).where(wm.c.stats_pending.is_not(None))).scalar()
        tenants = conn.execute(select(func.count(func.distinct(wm.c.user_id)))).scalar()
        oldest = conn.execute(select(func.min(wm.c.created_at)).where(wm.c.id.like("b%"))).scalar()
        newest_folded = conn.execute(select(func.min(wm.c.created_at)).where(wm.c.id.like("r%"))).scalar()
    assert (pending, tenants) == (10, 4)
    assert oldest < newest_folded  # the imported runs are older than the stored history
    assert scale.recount(engine) == 12
    scale.fold(engine)
    assert scale.read_all(engine) == {p: v for p, v in scale.full_aggregation(engine).items() if v}
    engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_bench_scale_cli_reports_agreement(backend: str, tmp_path: Path) -> None:
    if backend == "postgresql" and not POSTGRES_DSN:
        pytest.skip("SKILLFLOW_TEST_POSTGRES_DSN is not set")
    args = ["bench", "scale", "--scenarios", "5x20x2,3x10x1", "--backends", backend, "--fold-rows", "12"]
    result = CliRunner().invoke(app, [*args, "--repeats", "1", "--aggregate-repeats", "1", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert [(r["backend"], r["rows"], r["classes"]) for r in body] == [(backend, 100, 10), (backend, 30, 3)]
    assert all(r["match"] and r["fold_rows"] == 12 and r["fleet"] is None for r in body)
    assert all(len(r["read_runs_ms"]) == 1 for r in body)


def test_bench_scale_rejects_bad_scenarios() -> None:
    result = CliRunner().invoke(app, ["bench", "scale", "--scenarios", "10x0x5", "--backends", "sqlite"])
    assert result.exit_code == 2 and "TENANTSxRUNSxCLASSES" in result.output


def test_class_stats_cli_folds_and_recounts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cs.db'}"
    engine = make_engine(url)
    migrate(engine)
    scale.generate(engine, scale.Scenario.parse("2x10x2"), pending=True)
    runner = CliRunner()
    first = runner.invoke(app, ["class-stats", "--db", url, "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.output) == {"folded": 0, "recounted": 4}  # the first fold is a recount
    again = runner.invoke(app, ["class-stats", "--db", url, "--recount", "--json"])
    assert json.loads(again.output) == {"recounted": 4}
    with engine.connect() as conn:
        stats, outdated = read_stats(conn)
    assert outdated == [] and sum(len(v) for v in stats.values()) == 4
    engine.dispose()
