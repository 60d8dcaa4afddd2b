"""SIGKILL a pool-mode batch task run mid-batch, retry the crashed flow run: the rows equal a clean twin's.

On a work pool a chunk's partitions run several to a task run (``SKILLFLOW_FLEET_PARTITIONS_PER_TASK``): the
promotion cycle's ``cycle_batch`` and drift's ``check_drift_batch`` (docs/RELIABILITY.md, "Failure policy").
Each test runs a chunk of three partitions (u1, u2, u3) as a flow run of a deployment on a work pool — a
``promotion-partitions`` or a ``drift-partitions`` run — in a worker process, as Prefect's engine runs it, with
the fleet's batching taken from the environment (three partitions per task run: one batch). The process is killed
with SIGKILL inside the batch task run after the first partition's work committed, while the second is in
progress (``tests/faults/batch_kill_worker.py`` names the points). The crashed flow run is then marked Crashed and
retried under its flow-run id (``AwaitingRetry``, the UI's Retry; ``tests/faults/test_kill_review_paths.py``) and
run again in this process as a worker runs it.

What is checked, on SQLite and PostgreSQL: every table equals a clean twin's that ran the same chunk once, row for
row (ids and wall-clock times normalised, ``tests/faults/dbdump.py``; the reports' bodies compared whole); one
report per partition (no partition processed twice, none lost); the crashed attempt emitted no event and the retry
emitted exactly the clean run's events (each promotion and each demotion once).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import Engine, select

from skillflow.kernel.models import utcnow
from skillflow.lifecycle.drift import DriftReport
from skillflow.promotion.cycle import run_partition
from skillflow.promotion.report import PromotionReport
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import reports, skillbox
from tests.conftest import ROOT
from tests.faults import batch_kill_worker as worker
from tests.faults.dbdump import dump
from tests.faults.test_kill_operations import _assert_same_rows, _url
from tests.faults.test_kill_review_paths import _crash_and_retry, _state
from tests.support.promotion import AGENT, agent, config, record_cancel, record_payment

pytestmark = [pytest.mark.slow, pytest.mark.prefect, pytest.mark.usefixtures("offline_providers")]

USERS = ("u1", "u2", "u3")
CHUNK = [[AGENT, u] for u in USERS]
POOL = "kill-batch-pool"  # a work pool of the test's own: runs of its deployments are pool-mode runs
LIMIT = "kill-batch-partitions"  # the global concurrency limit a pool-mode chunk holds one slot of
CYCLE_CONFIG = {"require_shadow": True, "promotion_every_n_runs": 0, "shadow_evaluation_enabled": False}
DRIFT_CONFIG = {**CYCLE_CONFIG, "demotion_success_delta": 0.25}
DRIFT_RUN = "0f0f0f0f-fault-drift-parent-run"  # the drift-demotion parent a drift-partitions child belongs to
PROMOTION_FIELDS = tuple(f for f in PromotionReport.model_fields if f != "created_at")
DRIFT_FIELDS = tuple(DriftReport.model_fields)
ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:?\d{2}|Z)?")


# -- the pool: a work pool, its concurrency limit, the fleet's batching --------------------------------------------
@pytest.fixture
def pool(prefect_harness: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The work pool and the concurrency limit of the test's deployments, and the fleet settings of this process and
    of the worker process it starts: three partitions per task run, the test's limit."""
    from prefect import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(POOL)
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=POOL, type="process"))
        try:
            client.read_global_concurrency_limit_by_name(LIMIT)
        except ObjectNotFound:  # a killed chunk keeps its slot until the slot's lease expires: room for them all
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=LIMIT, limit=100))
    monkeypatch.setenv("SKILLFLOW_FLEET_PARTITIONS_PER_TASK", str(len(USERS)))
    monkeypatch.setenv("SKILLFLOW_FLEET_CONCURRENCY_LIMIT", LIMIT)


def _flow(kind: str) -> Any:
    from flows.drift_demotion import drift_demotion
    from flows.promotion_partitions import promotion_partitions

    return promotion_partitions if kind == "cycle" else drift_demotion


def _pool_run(engine: Engine, kind: str, landing: str) -> str:
    """A flow run of the chunk's deployment on the pool (Scheduled, not started), as a fan-out parent starts one;
    a cycle's skills land SHADOW (the project's configuration) or ACTIVE (the library's default: stamped)."""
    from prefect.deployments import run_deployment

    if kind == "cycle":
        name = "promotion-partitions"
        overrides = {**CYCLE_CONFIG, "require_shadow": landing == "shadow"}
        params = {"database_url": _url(engine), "partitions": CHUNK, "force": True,
                  "config_overrides": overrides, "now": utcnow().isoformat()}  # fmt: skip
    else:
        name = "drift-partitions"
        params = {"database_url": _url(engine), "partitions": CHUNK, "drift_run_id": DRIFT_RUN, "fan_out": "local",
                  "config_overrides": DRIFT_CONFIG}  # fmt: skip
    flow = _flow(kind)
    flow.to_deployment(name=name).apply(work_pool_name=POOL)
    run: Any = run_deployment(f"{flow.name}/{name}", parameters={"params": params}, timeout=0)
    assert run.work_pool_name == POOL
    return str(run.id)


def _run_here(kind: str, run_id: str) -> Any:
    """A worker runs the flow run (in this process, as the engine does, so that its events are captured)."""
    from prefect.flow_engine import load_flow_run, run_flow

    return run_flow(_flow(kind), flow_run=load_flow_run(UUID(run_id)))


def _run_killed(kind: str, point: str, run_id: str, where: Path) -> dict[str, Any]:
    """The worker process runs the flow run with ``point`` armed; it must die of SIGKILL. What it saw."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.faults.batch_kill_worker", kind, point, run_id, str(where)],
        cwd=ROOT, env=env, capture_output=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode(errors="replace")[-3000:]
    return dict(json.loads(where.read_text()))


# -- seeds --------------------------------------------------------------------------------------------------------
def _cycle_seed(engine: Engine) -> None:
    """Three tenants with two classes each that the gates promote (cancel, payment)."""
    migrate(engine)
    sf = agent(engine)
    for user in USERS:
        for i in range(6):
            record_cancel(sf, user, i)
            record_payment(sf, user, i, accepted=i != 0)


def _drift_seed(engine: Engine) -> None:
    """Three tenants with two ACTIVE skills each: the cancel skill drifts (10 activations since it went live, 6 of
    them failed runs of another procedure: demoted at delta 0.25, its deviation flagged), the payment skill is
    healthy (6 successes)."""
    migrate(engine)
    sf = agent(engine)
    for user in USERS:
        for i in range(6):
            record_cancel(sf, user, i)
            record_payment(sf, user, i, accepted=True)
        assert len(run_partition(engine, AGENT, user, config(), flow_run_id="seed").promoted) == 2
    with engine.connect() as conn:
        skills = {(u, n): s for s, u, n in conn.execute(select(skillbox.c.id, skillbox.c.user_id, skillbox.c.name))}
    start = utcnow()
    for user in USERS:
        cancel, pay = skills[(user, "cancel-reservation")], skills[(user, "charge-payment")]
        for i in range(10):
            rid = f"ZQ{8100 + i}K"
            ok = i < 4
            steps: list[dict[str, Any]] = [
                {"tool": "get_reservation_details", "arguments": {"reservation_id": rid}, "result": {"s": "booked"}}
            ]
            if ok:
                steps.append({"tool": "cancel_reservation", "arguments": {"reservation_id": rid}, "result": {"s": 1}})
            else:  # a deviation: the agent looked up the order instead, and failed
                steps.append({"tool": "lookup_order", "arguments": {"order_id": rid}, "error": "Error: not found"})
            stored = sf.record_run(
                f"Please cancel my reservation {rid}", user, steps, run_id=f"drift-cancel-{user}-{i}",
                created_at=start + timedelta(seconds=1 + i), skills_activated=[cancel], strict=True,
            )  # fmt: skip
            assert stored.stored, stored.error
        for i in range(6):
            oid = f"OR{6100 + i}Z"
            steps = [
                {"tool": "lookup_order", "arguments": {"order_id": oid}, "result": {"total": 10 + i}},
                {"tool": "charge_payment", "arguments": {"order_id": oid, "amount": 10 + i}, "result": {"ok": True}},
            ]
            stored = sf.record_run(
                f"Pay for order {oid}", user, steps, run_id=f"drift-pay-{user}-{i}",
                created_at=start + timedelta(seconds=1 + i), skills_activated=[pay], strict=True,
            )  # fmt: skip
            assert stored.stored, stored.error


SEEDS = {"cycle": _cycle_seed, "drift": _drift_seed}


# -- what is compared ---------------------------------------------------------------------------------------------
def _skill_tokens(engine: Engine) -> dict[str, str]:
    """Skill id → the token ``dump`` writes for it (the ids are random in each twin)."""
    with engine.connect() as conn:
        rows = conn.execute(select(skillbox.c.id, skillbox.c.canonical_hash, skillbox.c.version))
        return {r.id: f"<skill:{r.canonical_hash[:12]}:v{r.version}>" for r in rows}


def _tokens(value: Any, runs: dict[str, str]) -> Any:
    """Flow-run ids as tokens, and wall-clock times held as text (the drift figures' ``since``, ``watermark``,
    ``checked_at``) as ``<time>``: they differ between two twins by construction."""
    if isinstance(value, str):
        for run, token in runs.items():
            value = value.replace(run, token)
        return ISO_TIME.sub("<time>", value)
    if isinstance(value, dict):
        return {k: _tokens(v, runs) for k, v in value.items()}
    if isinstance(value, list):
        return [_tokens(v, runs) for v in value]
    return value


def _sorted(items: list[Any]) -> list[Any]:
    return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))


def _rows(engine: Engine, kind: str, run_id: str) -> dict[str, Any]:
    """Every table, normalised; the reports' bodies whole. What holds the random skill ids in an order or a digest
    is made comparable: the drift report's lists and the rule's live skills are sorted (their order follows the
    skill ids; the rule's labels are intents, not positions in it), and the digests over the ACTIVE skills' ids
    (the rule's fingerprint and fit key, a cycle report's rule fingerprint) are tokens."""
    dumped = _tokens(dump(engine, PROMOTION_FIELDS if kind == "cycle" else DRIFT_FIELDS), {run_id: "<run>"})
    for row in dumped["reports"]:
        body = row["body"]
        for key in ("skills", "demoted", "flagged"):
            if isinstance(body.get(key), list):
                body[key] = _sorted(body[key])
        if body.get("applicability"):
            body["applicability"]["fingerprint"] = "<digest>"
    for row in dumped["applicability_rules"]:
        row["fingerprint"] = row["rule"]["fit_key"] = "<digest>"
        row["rule"]["skills"] = _sorted(row["rule"]["skills"])
    for table in dumped.values():
        table.sort(key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return dumped


def _events(sent: list[tuple[Any, ...]], engine: Engine) -> list[tuple[str, str]]:
    """(event, resource) of each event sent, skill ids as tokens, sorted; a doubled event shows twice."""
    tokens = _skill_tokens(engine)
    out = []
    for event, resource, *_ in sent:
        for sid, token in tokens.items():
            resource = resource.replace(sid, token)
        out.append((str(event), str(resource)))
    return sorted(out)


def _stored_users(engine: Engine, kind: str, run_id: str) -> list[str]:
    """The partitions with a stored report of this chunk's run (its flow run; drift: the parent drift run)."""
    stamp = run_id if kind == "cycle" else DRIFT_RUN
    with engine.connect() as conn:
        q = select(reports.c.user_id).where(reports.c.kind == ("promotion" if kind == "cycle" else "drift"))
        return sorted(conn.execute(q.where(reports.c.flow_run_id == stamp)).scalars())


def _second_partition(engine: Engine, kind: str) -> int:
    """What the second partition (u2) had committed when the process died: its skills (cycle) or its demoted
    skills (drift)."""
    q = select(skillbox.c.id).where(skillbox.c.user_id == worker.SECOND)
    if kind == "drift":
        q = q.where(skillbox.c.status == "demoted")
    with engine.connect() as conn:
        return len(conn.execute(q).all())


# what u2 had committed at each kill point: skills stored (a cycle stores two; the drift seed's none), demotions
IN_PROGRESS = {("cycle", "sweep"): 0, ("cycle", "store"): 1, ("cycle", "report"): 2, ("drift", "demoted"): 1,
               ("drift", "report"): 1}  # fmt: skip

CLEAN: dict[tuple[str, str, str], tuple[dict[str, Any], list[tuple[str, str]]]] = {}


def _clean(
    engine: Engine, kind: str, landing: str, sent: list[tuple[Any, ...]]
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The rows and events of the chunk run once, cleanly (once per backend, flow and landing)."""
    key = (engine.dialect.name, kind, landing)
    if key not in CLEAN:
        SEEDS[kind](engine)
        run_id = _pool_run(engine, kind, landing)
        _run_here(kind, run_id)
        assert _stored_users(engine, kind, run_id) == list(USERS)
        CLEAN[key] = (_rows(engine, kind, run_id), _events(sent, engine))
    sent.clear()
    return CLEAN[key]


# -- the tests ----------------------------------------------------------------------------------------------------
# (flow, kill point, how the cycle's skills land): SHADOW at every point; ACTIVE (stamping the class's runs in the
# store's transaction) where the kill follows a store
CASES = [("cycle", p, "shadow") for p in worker.CYCLE_POINTS]
CASES += [("cycle", "store", "active")] + [("drift", p, "active") for p in worker.DRIFT_POINTS]


@pytest.mark.parametrize(("kind", "point", "landing"), CASES, ids=["-".join(c) for c in CASES])
def test_batch_killed_mid_batch_then_retried_equals_a_clean_run(
    pool: None,
    twins: tuple[Engine, Engine],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    kind: str,
    point: str,
    landing: str,
) -> None:
    """Killed inside the batch task run in its second partition, retried: the rows equal a clean twin's, each
    partition has one report, the crashed attempt emitted nothing and the retry exactly the clean run's events."""
    from tasks import events

    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    killed, clean = twins
    want_rows, want_events = _clean(clean, kind, landing, sent)
    n_events = {"cycle": 2 * len(USERS), "drift": len(USERS)}[kind]  # each tenant's promotions / its demotion
    assert len(want_events) == n_events

    SEEDS[kind](killed)
    run_id = _pool_run(killed, kind, landing)
    seen = _run_killed(kind, point, run_id, tmp_path / "where.json")
    batch = f"{'cycle' if kind == 'cycle' else 'check-drift'}-{len(USERS)}-from-{AGENT}-u1"
    assert seen["killed_in"] == {"task_run": batch, "partition": "u2"}  # inside the batch, in its 2nd partition
    assert seen["partitions"] == ["u1", "u2"] and seen["events"] == []  # the crashed attempt emitted nothing
    first = ["u1", "u2"] if point == "report" else ["u1"]
    assert _stored_users(killed, kind, run_id) == first  # the first partition committed, the third not started
    assert _second_partition(killed, kind) == IN_PROGRESS[(kind, point)]

    _crash_and_retry(run_id, "orchestrated")
    result = _run_here(kind, run_id)
    assert _state(run_id).is_completed()
    if kind == "cycle":
        assert [r.user_id for r in result] == list(USERS)
        assert all(r.partition_failed is None and r.partition_skipped is None for r in result)
    else:
        assert result.failed == [] and len(result.demoted) == len(USERS)
    assert _stored_users(killed, kind, run_id) == list(USERS)  # one report per partition: none twice, none lost
    _assert_same_rows(_rows(killed, kind, run_id), want_rows)
    assert _events(sent, killed) == want_events  # each event once, none lost
