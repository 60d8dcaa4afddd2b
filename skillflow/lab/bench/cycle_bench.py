"""``skillflow bench cycle``: SQL aggregation vs a naive read-everything baseline, at growing history sizes.

Synthetic rows are generated inside the database (SQLite: one ``INSERT … SELECT`` from a recursive CTE
in one transaction; other backends: executemany in large batches) across ``tenants`` × ``classes``.
Each size is measured in a fresh, migrated database: aggregation over every partition
(:func:`skillflow.storage.aggregate.aggregate_classes`) on the shipped schema (migration 004's covering
index) and on the pre-004 index set (the covering index dropped, ``ix_workflow_memory_class`` rebuilt, on
the throwaway database only), against a baseline that reads every row into Python and groups there, with
all results compared for equality; then the whole promotion cycle (the ``promotion-cycle`` flow,
offline distiller) is timed on the shipped schema.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Index, insert, inspect, select, text
from sqlalchemy.schema import CreateIndex, DropIndex

from skillflow.kernel import canonical
from skillflow.kernel.config import pinned_environment
from skillflow.kernel.models import Step, new_id
from skillflow.storage.aggregate import aggregate_classes, partitions
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import CLASS_COVER_COLUMNS, agent_tools, build_metadata, skillbox, workflow_memory
from skillflow.storage.types import dumps

# Migration 004's covering index (the grouped aggregation reads only these columns) and the index it replaced.
COVERING_INDEX = "ix_workflow_memory_class_cover"
COVERING_COLUMNS = CLASS_COVER_COLUMNS
PRE_004_INDEX = "ix_workflow_memory_class"
# History ends now (to the second), so the recency gate sees live classes.
BASE = datetime.now(UTC).replace(microsecond=0) - timedelta(days=90)
SPAN_SECONDS = 90 * 86400
TOOLS = ("search_flights", "get_reservation", "check_policy", "update_reservation", "charge_payment", "send_receipt")


@dataclass(frozen=True)
class SizeResult:
    rows: int
    generate_s: float
    partitions: int
    classes: int
    aggregate_s: float
    naive_s: float
    ratio: float
    results_match: bool
    aggregate_covering_s: float | None = None
    ratio_covering: float | None = None
    index_build_s: float | None = None
    cycle_s: float | None = None
    cycle_considered: int | None = None
    cycle_promoted: int | None = None
    aggregate_runs_s: list[float] = field(default_factory=list)
    naive_runs_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class CycleBench:
    backend: str
    tenants: int
    classes_per_tenant: int
    repeats: int
    sizes: list[SizeResult]
    cycle_entry: str | None
    notes: list[str]
    load_average: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _class_rows(n_classes: int) -> list[dict[str, Any]]:
    """Distinct 5-step procedures (real canonical hashes) with a class-specific success rate."""
    rows = []
    for k in range(n_classes):
        tools = [TOOLS[(k + j * (1 + k % 5)) % len(TOOLS)] for j in range(5)]
        steps = [Step(t, {f"arg_{j}": j, f"id_{k % 7}": "x"}, {"ok": True}) for j, t in enumerate(tools)]
        units = canonical.signature(steps)
        doc = [{"tool": s.tool, "arguments": s.arguments, "result": s.result, "error": None} for s in steps]
        rows.append(
            {
                "k": k,
                "chash": canonical.canonical_hash(units),
                "seq": canonical.tool_sequence(units),
                "steps": dumps(doc),
                "sig": dumps([u.as_hashable() for u in units]),
                "pct": 55 + (k * 37) % 45,
            }
        )
    return rows


_SQLITE_INSERT = """
insert into workflow_memory (id, agent_id, user_id, query, query_fingerprint, canonical_hash, tool_sequence,
    step_count, outcome, execution_outcome, outcome_source, shadow_pending, created_at, steps, signature,
    skills_activated)
with recursive n(i) as (select 0 union all select i + 1 from n where i + 1 < :rows)
select printf('r%010d', i), 'bench-agent', 'user-' || (i % :tenants), 'request ' || c.k || ' variant ' || (i % 37),
    printf('%056d%08d', c.k, i % 37), c.chash, c.seq, 5,
    case when i % 97 = 0 then 'unknown' when (i * 7919) % 100 < c.pct then 'success' else 'failure' end,
    case when (i * 7919) % 100 < c.pct then 'success' else 'failure' end,
    case when i % 97 = 0 then 'evaluator' else 'execution' end, 0,
    strftime('%Y-%m-%d %H:%M:%S', :base + (i * :span) / :rows, 'unixepoch') || '.000000', c.steps, c.sig, '[]'
from n join bench_classes c on c.k = (i / :tenants) % :classes
"""


def generate(engine: Engine, rows: int, tenants: int, classes: int) -> None:
    """Fill ``workflow_memory`` with ``rows`` synthetic runs in one transaction, plus one demoted skill per tenant."""
    spec = _class_rows(classes)
    with engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(text("pragma cache_size = -262144"))  # 256 MB: index maintenance stays in memory
            conn.execute(text("create temp table bench_classes (k integer primary key, chash, seq, steps, sig, pct)"))
            conn.execute(
                text("insert into bench_classes values (:k, :chash, :seq, :steps, :sig, :pct)"),
                spec,
            )
            params = {"rows": rows, "tenants": tenants, "classes": classes, "base": int(BASE.timestamp())}
            conn.execute(text(_SQLITE_INSERT), {**params, "span": SPAN_SECONDS})
            conn.execute(text("drop table bench_classes"))
        else:
            _generate_batches(conn, rows, tenants, classes, spec)
        _demote_one_class_per_tenant(conn, tenants, spec[0]["chash"])
        conn.execute(
            insert(agent_tools), [{"agent_id": "bench-agent", "tool_name": t, "registered_at": BASE} for t in TOOLS]
        )


def _generate_batches(conn: Connection, rows: int, tenants: int, classes: int, spec: list[dict[str, Any]]) -> None:
    import json

    batch: list[dict[str, Any]] = []
    for i in range(rows):
        c = spec[(i // tenants) % classes]
        ok = (i * 7919) % 100 < c["pct"]
        outcome = "unknown" if i % 97 == 0 else ("success" if ok else "failure")
        batch.append(
            {
                "id": f"r{i:010d}",
                "agent_id": "bench-agent",
                "user_id": f"user-{i % tenants}",
                "query": f"request {c['k']} variant {i % 37}",
                "query_fingerprint": f"{c['k']:056d}{i % 37:08d}",
                "canonical_hash": c["chash"],
                "tool_sequence": c["seq"],
                "step_count": 5,
                "outcome": outcome,
                "execution_outcome": "success" if ok else "failure",
                "outcome_source": "evaluator" if i % 97 == 0 else "execution",
                "shadow_pending": 0,
                "created_at": BASE + timedelta(seconds=(i * SPAN_SECONDS) // rows),
                "steps": json.loads(c["steps"]),
                "signature": json.loads(c["sig"]),
                "skills_activated": [],
            }
        )
        if len(batch) >= 20_000:
            conn.execute(insert(workflow_memory), batch)
            batch = []
    if batch:
        conn.execute(insert(workflow_memory), batch)


def _demote_one_class_per_tenant(conn: Connection, tenants: int, chash: str) -> None:
    """A demoted skill halfway through history, so the post-demotion filter is part of what is measured."""
    demoted_at = BASE + timedelta(seconds=SPAN_SECONDS // 2)
    conn.execute(
        insert(skillbox),
        [
            {
                "id": new_id(),
                "agent_id": "bench-agent",
                "user_id": f"user-{t}",
                "canonical_hash": chash,
                "version": 1,
                "name": "bench-skill",
                "description": "Synthetic demoted skill for the benchmark.",
                "status": "demoted",
                "live_key": None,
                "content": "---\nname: bench-skill\n---\n",
                "prompt_version": "bench",
                "distiller": "bench",
                "created_at": BASE,
                "updated_at": demoted_at,
                "demoted_at": demoted_at,
                "demotion_reason": "drift: rolling 0.40 vs baseline 0.90",
                "injection_role": "user",
            }
            for t in range(tenants)
        ],
    )


def aggregate_all(engine: Engine) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    """The production path: one aggregation statement per partition."""
    out: dict[tuple[str, str, str], tuple[Any, ...]] = {}
    with engine.connect() as conn:
        for agent_id, user_id in partitions(conn):
            for s in aggregate_classes(conn, agent_id, user_id):
                out[(agent_id, user_id, s.canonical_hash)] = (s.successes, s.failures, s.unknown, s.distinct_queries)
    return out


def naive_all(engine: Engine) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    """The baseline: read every workflow row into Python (as a document store would) and group there."""
    with engine.connect() as conn:
        since: dict[tuple[str, str, str], datetime] = {}
        for r in conn.execute(select(skillbox).where(skillbox.c.status.in_(("demoted", "deprecated")))).mappings():
            key = (r["agent_id"], r["user_id"], r["canonical_hash"])
            if r["demoted_at"] is not None and (key not in since or r["demoted_at"] > since[key]):
                since[key] = r["demoted_at"]
        acc: dict[tuple[str, str, str], list[Any]] = defaultdict(lambda: [0, 0, 0, set()])
        for r in conn.execute(select(workflow_memory)).mappings():
            if r["canonical_hash"] is None:
                continue
            key = (r["agent_id"], r["user_id"], r["canonical_hash"])
            cut = since.get(key)
            if cut is not None and r["created_at"] <= cut:
                continue
            a = acc[key]
            a[("success", "failure", "unknown").index(r["outcome"])] += 1
            if r["query_fingerprint"] is not None and r["outcome"] == "success":  # the requests it served
                a[3].add(r["query_fingerprint"])
    return {k: (v[0], v[1], v[2], len(v[3])) for k, v in acc.items()}


def _workflow_index(level: int, name: str) -> Index:
    return next(ix for ix in build_metadata(level).tables["workflow_memory"].indexes if ix.name == name)


def use_index_set(engine: Engine, covering: bool) -> float:
    """Switch a benchmark database's class index: migration 004's covering index (``covering``) or the
    pre-004 ``ix_workflow_memory_class``. Returns the seconds spent building the new index (0 when present)."""
    want, drop = (COVERING_INDEX, PRE_004_INDEX) if covering else (PRE_004_INDEX, COVERING_INDEX)
    with engine.begin() as conn:
        present = {ix["name"] for ix in inspect(conn).get_indexes("workflow_memory")}
        built = 0.0
        if want not in present:
            start = time.perf_counter()
            conn.execute(CreateIndex(_workflow_index(4 if covering else 3, want)))
            built = time.perf_counter() - start
        if drop in present:
            conn.execute(DropIndex(_workflow_index(3 if covering else 4, drop)))
    return built


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    runs, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), runs, result


def run(
    sizes: list[int],
    tenants: int = 20,
    classes: int = 50,
    repeats: int = 3,
    naive_repeats: int | None = None,
    covering: bool = True,
    workdir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> CycleBench:
    """Measure every size in its own fresh SQLite file and return medians and ratios."""
    say = progress or (lambda _msg: None)
    notes = [
        "aggregation = partitions() + aggregate_classes() for every partition (one GROUP BY per tenant)",
        f"aggregate_s = the pre-004 index set: {COVERING_INDEX} dropped and {PRE_004_INDEX} "
        "(agent_id, user_id, canonical_hash, created_at) rebuilt on the throwaway bench db",
        f"aggregate_covering_s = the shipped schema after migrate: {COVERING_INDEX} ({', '.join(COVERING_COLUMNS)})"
        "; index_build_s = time to build it on the filled table",
        "naive = SELECT * FROM workflow_memory into Python, grouped in a dict (same figures, compared)",
    ]
    notes.append(
        "cycle = one real promotion-cycle flow run on the shipped schema after the aggregation timings: "
        "offline distiller and judge, hashing embedder; it writes skills and cycle state into the bench db"
    )
    results = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for rows in sizes:
            engine = make_engine(f"sqlite:///{Path(tmp) / f'bench-{rows}.db'}")
            migrate(engine)
            say(f"generating {rows} rows")
            start = time.perf_counter()
            generate(engine, rows, tenants, classes)
            gen_s = time.perf_counter() - start
            cov_s = None
            cov = None
            if covering:
                say(f"aggregating {rows} rows (shipped schema, covering index)")
                cov_s, _, cov = _timed(partial(aggregate_all, engine), repeats)
            say(f"aggregating {rows} rows (pre-004 index set)")
            use_index_set(engine, covering=False)
            agg_s, agg_runs, agg = _timed(partial(aggregate_all, engine), repeats)
            say(f"rebuilding the covering index over {rows} rows")
            build_s = round(use_index_set(engine, covering=True), 4)  # back to the shipped schema
            say(f"naive baseline over {rows} rows")
            naive_s, naive_runs, naive = _timed(partial(naive_all, engine), naive_repeats or repeats)
            cycle: tuple[float | None, int | None, int | None] = (None, None, None)
            say(f"promotion cycle over {rows} rows")
            try:
                cycle = _time_cycle(engine)
            except Exception as exc:  # noqa: BLE001 - another stage's failure is reported, not hidden or fatal
                notes.append(f"cycle over {rows} rows failed: {type(exc).__name__}: {exc}"[:300])
            results.append(
                SizeResult(
                    rows=rows,
                    generate_s=round(gen_s, 4),
                    partitions=len({k[:2] for k in agg}),
                    classes=len(agg),
                    aggregate_s=round(agg_s, 4),
                    naive_s=round(naive_s, 4),
                    ratio=round(naive_s / agg_s, 2) if agg_s else float("inf"),
                    results_match=agg == naive and (cov is None or cov == naive),
                    aggregate_covering_s=None if cov_s is None else round(cov_s, 4),
                    ratio_covering=None if not cov_s else round(naive_s / cov_s, 2),
                    index_build_s=build_s,
                    cycle_s=cycle[0],
                    cycle_considered=cycle[1],
                    cycle_promoted=cycle[2],
                    aggregate_runs_s=[round(x, 4) for x in agg_runs],
                    naive_runs_s=[round(x, 4) for x in naive_runs],
                )
            )
            engine.dispose()
    from skillflow.lab.bench.capture_bench import load_average

    return CycleBench(
        "sqlite",
        tenants,
        classes,
        repeats,
        results,
        "flows.promotion_cycle.promotion_cycle",
        notes,
        load_average(),
    )


_CYCLE_ENV = {"SKILLFLOW_EMBEDDER": "hashing", "SKILLFLOW_DISTILLER": "offline", "SKILLFLOW_JUDGE": "offline"}


def _time_cycle(engine: Engine) -> tuple[float, int, int]:
    """One real promotion cycle over every partition (offline distiller and judge, hashing embedder).

    Returns (seconds, classes considered by the gates, skills promoted). The benchmark database is
    disposable, so the cycle writes as it would in production.
    """
    from flows.promotion_cycle import PromotionCycleParams, promotion_cycle

    with pinned_environment(_CYCLE_ENV):
        start = time.perf_counter()
        params = PromotionCycleParams(database_url=engine.url.render_as_string(hide_password=False), force=True)
        reports = promotion_cycle(params)
        elapsed = time.perf_counter() - start
    considered = sum(r.candidates_considered for r in reports)
    promoted = sum(len(r.promoted) for r in reports)
    return round(elapsed, 4), considered, promoted
