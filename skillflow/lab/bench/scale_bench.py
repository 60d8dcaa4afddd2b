"""``skillflow bench scale``: the cycle's read of maintained class statistics against the full aggregation.

Each scenario (tenants × runs per tenant × classes per tenant) gets a throwaway database: a PostgreSQL schema
(dropped after) or a SQLite file. Rows are generated inside the database in one set-based statement
(``generate_series`` on PostgreSQL, a recursive CTE on SQLite), stored as a database migrated to 010 holds its
history (``stats_pending`` NULL), with one demoted class per tenant. Measured in the same run, medians:

* ``aggregate_s``: the full aggregation, one statement per tenant (``partitions`` + ``aggregate_classes``);
* ``recount_s``: rebuilding the statistics from scratch (one set-based statement per table);
* ``read_s``: the cycle's read for every partition, exactly what the ``promotion-cycle`` flow calls: the listing
  (``partitions``, from the counters) and the chunk's read (``promotion.chunk.prefetch``: a fold with nothing
  pending, the counters, every partition's statistics — all due with ``force`` — and the flow run's reports);
* ``fold_s``: folding ``fold_rows`` new runs (half of them backdated) into the statistics;

and ``match``: the read equals the full aggregation class by class after the fold. ``--fleet`` adds the whole
cycle's wall time on one and on two local Prefect workers (:mod:`skillflow.lab.bench.fleet_bench`).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import ClassStats
from skillflow.lab.bench.cycle_bench import _class_rows, _demote_one_class_per_tenant
from skillflow.promotion.chunk import prefetch
from skillflow.storage.aggregate import aggregate_classes, partitions, partitions_reference
from skillflow.storage.class_stats import fold, recount
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate

BASE = datetime.now(UTC).replace(microsecond=0) - timedelta(days=90)
SPAN = 90 * 86400
TARGETS_MS = {"1000 classes at 10M rows": 50.0, "1,000 tenants x 5 classes": 100.0}

_COLUMNS = """id, agent_id, user_id, query, query_fingerprint, canonical_hash, tool_sequence, step_count, outcome,
    execution_outcome, outcome_source, shadow_pending, created_at, steps, signature, skills_activated, stats_pending"""
_PG = f"""insert into workflow_memory ({_COLUMNS})
select :prefix || i, 'bench-agent', 'user-' || (i % :tenants), 'request ' || c.k || ' variant ' || (i % 37),
    lpad(c.k::text, 56, '0') || lpad((i % 37)::text, 8, '0'), c.chash, c.seq, 5,
    case when i % 97 = 0 then 'unknown' when (i * 7919) % 100 < c.pct then 'success' else 'failure' end,
    case when (i * 7919) % 100 < c.pct then 'success' else 'failure' end,
    case when i % 97 = 0 then 'evaluator' else 'execution' end, 0,
    to_timestamp(:base + (i::bigint * :span) / :rows), :steps, null, '[]', :pending
from generate_series(0::bigint, :rows - 1) i join bench_classes c on c.k = (i / :tenants) % :classes"""
_SQLITE = f"""insert into workflow_memory ({_COLUMNS})
with recursive n(i) as (select 0 union all select i + 1 from n where i + 1 < :rows)
select :prefix || i, 'bench-agent', 'user-' || (i % :tenants), 'request ' || c.k || ' variant ' || (i % 37),
    printf('%056d%08d', c.k, i % 37), c.chash, c.seq, 5,
    case when i % 97 = 0 then 'unknown' when (i * 7919) % 100 < c.pct then 'success' else 'failure' end,
    case when (i * 7919) % 100 < c.pct then 'success' else 'failure' end,
    case when i % 97 = 0 then 'evaluator' else 'execution' end, 0,
    strftime('%Y-%m-%d %H:%M:%S', :base + (i * :span) / :rows, 'unixepoch') || '.000000', :steps, null, '[]',
    :pending
from n join bench_classes c on c.k = (i / :tenants) % :classes"""


@dataclass(frozen=True)
class Scenario:
    tenants: int
    runs_per_tenant: int
    classes_per_tenant: int

    @property
    def rows(self) -> int:
        return self.tenants * self.runs_per_tenant

    @classmethod
    def parse(cls, raw: str) -> Scenario:
        """``TENANTSxRUNSxCLASSES`` (e.g. ``1000x1000x5``)."""
        parts = [int(x.replace("_", "")) for x in raw.lower().split("x")]
        if len(parts) != 3 or min(parts) < 1:
            raise ValueError(f"a scenario is TENANTSxRUNSxCLASSES with positive integers, got {raw!r}")
        return cls(*parts)


@dataclass
class ScenarioResult:
    backend: str
    tenants: int
    runs_per_tenant: int
    classes_per_tenant: int
    rows: int
    classes: int
    generate_s: float
    aggregate_s: float
    recount_s: float
    read_s: float
    read_runs_ms: list[float]
    fold_rows: int
    fold_s: float
    match: bool
    speedup: float  # aggregate_s / read_s, same run
    fleet: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    runs, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), runs, result


@contextmanager
def throwaway(backend: str, dsn: str | None, workdir: Path | None) -> Iterator[str]:
    """A database URL that exists for the block: a fresh PostgreSQL schema (dropped after) or a SQLite file."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(dir=workdir, prefix="skillflow-scale-") as tmp:
            yield f"sqlite:///{Path(tmp) / 'scale.db'}"
        return
    if not dsn:
        raise ValueError("PostgreSQL needs --db or SKILLFLOW_TEST_POSTGRES_DSN")
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = make_engine(dsn)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def generate(engine: Engine, s: Scenario, rows: int | None = None, prefix: str = "r", pending: bool = False,
             backdate: bool = False) -> None:  # fmt: skip
    """``rows`` runs (default: the scenario's) in one set-based statement; ``pending`` marks them not yet folded."""
    n = rows or s.rows
    spec = _class_rows(s.classes_per_tenant)
    base = BASE - timedelta(days=400) if backdate else BASE
    params = {"rows": n, "tenants": s.tenants, "classes": s.classes_per_tenant, "base": int(base.timestamp()),
              "span": SPAN, "prefix": prefix, "steps": "[]", "pending": 1 if pending else None}  # fmt: skip
    with engine.begin() as conn:
        conn.execute(text("create temp table bench_classes (k integer primary key, chash text, seq text, pct integer)"))
        conn.execute(
            text("insert into bench_classes values (:k, :chash, :seq, :pct)"),
            [{k: c[k] for k in ("k", "chash", "seq", "pct")} for c in spec],
        )
        conn.execute(text(_PG if engine.dialect.name == "postgresql" else _SQLITE), params)
        conn.execute(text("drop table bench_classes"))
        if prefix == "r":
            _demote_one_class_per_tenant(conn, s.tenants, spec[0]["chash"])
        if engine.dialect.name == "postgresql":
            conn.execute(text("analyze workflow_memory"))


def full_aggregation(engine: Engine) -> dict[tuple[str, str], list[ClassStats]]:
    """The reference: the distinct tenants of the runs, then one aggregation statement per tenant."""
    with engine.connect() as conn:
        return {p: aggregate_classes(conn, *p) for p in partitions_reference(conn)}


def read_all(engine: Engine) -> dict[tuple[str, str], list[ClassStats]]:
    """The cycle's read for every partition: the listing and the chunk's read, as ``run_partitions`` calls it."""
    with engine.connect() as conn:
        listed = partitions(conn)
    config = PromotionConfig(promotion_every_n_runs=1)
    shared = prefetch(engine, listed, config, dry_run=False, force=True, flow_run_id="bench-scale")
    missing = [p for p, pre in shared.items() if pre.stats is None]
    if missing:
        raise RuntimeError(f"{len(missing)} partitions without prefetched statistics")
    return {p: pre.stats or [] for p, pre in shared.items()}


def run_scenario(
    backend: str,
    s: Scenario,
    *,
    dsn: str | None = None,
    repeats: int = 5,
    aggregate_repeats: int = 3,
    fold_rows: int = 10_000,
    fleet: bool = False,
    fleet_rounds: int = 3,
    workdir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> ScenarioResult:
    say = progress or (lambda _m: None)
    with throwaway(backend, dsn, workdir) as url:
        engine = make_engine(url)
        try:
            migrate(engine)
            say(f"{backend} {s}: generating {s.rows:,} rows")
            gen_s, _, _ = _timed(lambda: generate(engine, s), 1)
            say(f"{backend} {s}: full aggregation (one statement per tenant)")
            agg_s, _, _ = _timed(lambda: full_aggregation(engine), aggregate_repeats)
            say(f"{backend} {s}: recount")
            recount_s, _, _ = _timed(lambda: recount(engine), 1)
            say(f"{backend} {s}: folding {fold_rows:,} new runs (half backdated)")
            generate(engine, s, fold_rows // 2, prefix="n", pending=True)
            generate(engine, s, fold_rows - fold_rows // 2, prefix="b", pending=True, backdate=True)
            fold_s, _, folded = _timed(lambda: fold(engine), 1)
            say(f"{backend} {s}: reading the statistics")
            read_s, read_runs, read = _timed(lambda: read_all(engine), repeats)
            reference = full_aggregation(engine)
            match = {p: v for p, v in read.items() if v} == {p: v for p, v in reference.items() if v}
            fleet_result = _fleet(url, say, fleet_rounds) if fleet else None
            return ScenarioResult(
                backend=backend,
                tenants=s.tenants,
                runs_per_tenant=s.runs_per_tenant,
                classes_per_tenant=s.classes_per_tenant,
                rows=s.rows,
                classes=sum(len(v) for v in reference.values()),
                generate_s=round(gen_s, 3),
                aggregate_s=round(agg_s, 4),
                recount_s=round(recount_s, 4),
                read_s=round(read_s, 5),
                read_runs_ms=[round(x * 1000, 2) for x in read_runs],
                fold_rows=int(folded["folded"]),
                fold_s=round(fold_s, 4),
                match=match,
                speedup=round(agg_s / read_s, 1) if read_s else float("inf"),
                fleet=fleet_result,
            )
        finally:
            engine.dispose()


def _fleet(url: str, say: Callable[[str], None], rounds: int = 3) -> dict[str, Any]:
    """The whole cycle on one and on two local workers, or why it could not be measured (e.g. no server)."""
    from skillflow.lab.bench.fleet_bench import measure_fleet  # starts a Prefect server: import only when asked

    say("whole cycle on one and on two workers (local process pool)")
    try:
        return asdict(measure_fleet(url, rounds=rounds))
    except Exception as exc:  # noqa: BLE001 - reported in the result, never hidden
        return {"not_measured": f"{type(exc).__name__}: {exc}"[:300]}


def run(
    scenarios: list[Scenario],
    backends: list[str],
    *,
    dsn: str | None = None,
    repeats: int = 5,
    aggregate_repeats: int = 3,
    fold_rows: int = 10_000,
    fleet: bool = False,
    fleet_rounds: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[ScenarioResult]:
    return [
        run_scenario(
            b,
            s,
            dsn=dsn,
            repeats=repeats,
            aggregate_repeats=aggregate_repeats,
            fold_rows=fold_rows,
            fleet=fleet,
            fleet_rounds=fleet_rounds,
            progress=progress,
        )
        for s in scenarios
        for b in backends
    ]
