"""A real fleet: ``prefect server``, ``skillflow deploy`` on two process pools, two compute workers, PostgreSQL.

A promotion cycle over 20 tenants fans out to both workers; every partition's report is stored exactly once,
no class is promoted twice, and the tenant whose distillation the provider refuses (HTTP 400, through the
real OpenAI SDK against a local server) leaves the other 19 promoted. A second cycle started at the same
time is cancelled (CANCEL_NEW); a demotion event re-qualifies its tenant through the shipped automation.
Then drift demotion and shadow evaluation run on the pool at once: drift fans out to ``drift-partitions``
children that store one report per partition exactly once while the tenant with a corrupted drift state
fails alone (its report names the failed skill); shadow evaluation fans out to two ``shadow-drain`` children
that empty the outbox, evaluating every fresh run exactly once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text

from skillflow.kernel.models import utcnow
from skillflow.lab.fleet import LocalFleet, server_database, unschedule
from skillflow.promotion import cycle
from skillflow.promotion.distill import OfflineDistiller
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.outbox import pending_count
from skillflow.storage.schema import reports, shadow_observations, skillbox, workflow_memory
from skillflow.storage.skills import list_skills, update_stats
from tests.conftest import PG_SKIP_REASON, POSTGRES_DSN
from tests.support.llm import fleet_llm_env
from tests.support.promotion import AGENT, agent, config, record_cancel, record_payment

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prefect,
    pytest.mark.postgres,
    pytest.mark.skipif(not POSTGRES_DSN, reason=PG_SKIP_REASON),
]
TENANTS = [f"u{i:02d}" for i in range(20)]
REFUSED = "u13"  # its class is the one the provider answers 400 for
CORRUPT = "u07"  # its skill's drift state is corrupted: its drift check fails, the others complete
SHADOW_TENANT = "s00"  # promoted to SHADOW after the cycle; fresh runs are evidence for it
# Each provider reply takes this long, as a real one does: a chunk of 10 tenants then lasts ~5 s, longer than a
# worker's 1 s poll plus a flow-run process start, so the two chunks overlap by the load, not by luck (with
# instant replies a chunk lasted ~1 s and one CI run saw the second start 0.2 s after the first had ended).
REPLY_SECONDS = 0.5
OVERRIDES = {"require_shadow": False, "promotion_every_n_runs": 0, "shadow_evaluation_enabled": False}
SHADOW_ON = {"shadow_evaluation_enabled": True}


def provider(replies: dict[str, str], refused: str) -> tuple[ThreadingHTTPServer, list[str]]:
    """OpenAI chat completions on 127.0.0.1: a SKILL.md per class hash found in the request, 400 for ``refused``."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            return

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
            time.sleep(REPLY_SECONDS)
            if refused in raw:
                seen.append("refused")
                status, body = 400, {"error": {"message": "request rejected by policy", "type": "invalid_request"}}
            else:
                text_ = next((md for h, md in replies.items() if h in raw), "INSUFFICIENT")
                seen.append("answered")
                message = {"role": "assistant", "content": text_}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
                status = 200
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, seen


@pytest.fixture(scope="module")
def databases() -> Iterator[tuple[str, str]]:
    """A fresh skillflow schema and a fresh Prefect server database on the PostgreSQL server; dropped after."""
    assert POSTGRES_DSN
    schema = f"fleet_{uuid.uuid4().hex[:10]}"
    admin = make_engine(POSTGRES_DSN).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in POSTGRES_DSN else "?"
    try:
        with server_database(POSTGRES_DSN) as server_url:
            yield f"{POSTGRES_DSN}{sep}options=-csearch_path%3D{schema}", server_url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def seed(url: str) -> tuple[str, str, str]:
    """20 tenants: 19 with a cancel procedure, one (REFUSED) with a payment procedure; the SKILL.md reply."""
    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine)
    good = bad = ""
    for user in TENANTS:
        for i in range(6):
            if user == REFUSED:
                bad = record_payment(sf, user, i, accepted=True)
            else:
                good = record_cancel(sf, user, i)
    [assessed] = cycle.assess_classes(engine, AGENT, TENANTS[0], config(), utcnow(), 1)
    evidence = cycle.gather_evidence(engine, assessed.stats, config())
    skill_md = OfflineDistiller().distill(evidence, config().skill_max_content_chars).skill_md
    engine.dispose()
    assert skill_md and good and bad and good != bad
    return good, bad, skill_md


def wait_final(run_ids: list[Any], timeout: float) -> list[Any]:
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            runs = [client.read_flow_run(r) for r in run_ids]
            if all(r.state.is_final() for r in runs) or time.monotonic() > deadline:
                return runs
            time.sleep(1)


@pytest.mark.usefixtures("offline_providers")  # this process's own seeding: no model load
def test_a_cycle_over_20_tenants_on_two_workers(databases: tuple[str, str], tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    url, server_db = databases
    good, bad, skill_md = seed(url)
    llm, seen = provider({good: skill_md}, bad)
    env = fleet_llm_env(url, llm.server_address[1])
    started = time.monotonic()
    try:
        with LocalFleet(tmp_path / "prefect", env=env, server_db=server_db) as fleet:
            out = fleet.cli("deploy", "--pool", "compute", "--control-pool", "ctl", "--db", url, "--json")
            deployed = json.loads(out)  # stdout is JSON alone (Prefect's tables go to stderr)
            assert "promotion-partitions/promotion-partitions" in deployed["deployments"]
            with temporary_settings({PREFECT_API_URL: fleet.api_url, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}):
                assert unschedule() >= 3  # the crons deploy registered (config/skillflow.toml)
            fleet.start_workers("ctl", 1, limit=None)
            fleet.start_workers("compute", 2, limit=1)
            with temporary_settings({PREFECT_API_URL: fleet.api_url, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}):
                params = {"params": {"database_url": url, "force": True, "config_overrides": OVERRIDES}}
                first = run_deployment("promotion-cycle/promotion-cycle", parameters=params, timeout=0)
                second = run_deployment("promotion-cycle/promotion-cycle", parameters=params, timeout=0)
                a, b = wait_final([first.id, second.id], 150)
                done = a if a.state.is_completed() else b
                assert sorted([a.state.type.value, b.state.type.value]) == ["CANCELLED", "COMPLETED"], (
                    a.state,
                    b.state,
                )
                with get_client(sync_client=True) as client:
                    children = client.read_flow_runs(
                        flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[done.id]))
                    )
                assert len(children) == 2 and all(c.state.is_completed() for c in children)
                assert {c.work_pool_name for c in children} == {"compute"}
                spans = sorted((c.start_time, c.end_time) for c in children)
                assert spans[1][0] < spans[0][1], "the two chunks ran at the same time on the two workers"
                check_rows(url, good, bad, {str(c.id) for c in children})
                assert seen.count("refused") == 1 and seen.count("answered") == 19

                # A demotion event re-qualifies its tenant through the shipped automation (templated tenant).
                # Emitted from a process of the fleet's own: this test process's events client may already be
                # bound to the suite's ephemeral server (a process-wide singleton), which would swallow it.
                emit = (
                    "from prefect.events import emit_event\n"
                    "emit_event(event='skillflow.skill.demoted', resource={'prefect.resource.id': "
                    f"'skillflow.skill.fleet-test', 'skillflow.agent_id': {AGENT!r}, 'skillflow.user_id': 'u05'}})\n"
                )
                subprocess.run([sys.executable, "-c", emit], env=fleet.process_env(), check=True, timeout=120)
                requalify = wait_requalify(45)
                assert requalify is not None and requalify.parameters["params"]["partitions"] == [[AGENT, "u05"]]
                [ran] = wait_final([requalify.id], 90)
                assert ran.state.is_completed(), ran.state
                check_rows(url, good, bad, {str(c.id) for c in children}, requalified="u05")

                # Drift demotion and shadow evaluation on the pool, at once: each fans out to its children.
                fresh = prepare_drift_and_shadow(url)
                drift_params = {"params": {"database_url": url}}
                shadow_params = {"params": {"database_url": url, "batch_size": 10, "config_overrides": SHADOW_ON}}
                drift = run_deployment("drift-demotion/drift-demotion", parameters=drift_params, timeout=0)
                shadow = run_deployment("shadow-evaluation/shadow-evaluation", parameters=shadow_params, timeout=0)
                drift, shadow = wait_final([drift.id, shadow.id], 120)
                check_drift(url, drift, children_of(drift.id))
                check_shadow(url, shadow, children_of(shadow.id), fresh)
    finally:
        llm.shutdown()
        llm.server_close()
    assert time.monotonic() - started < 330


def wait_requalify(timeout: float) -> Any:
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name("promotion-partitions/promotion-partitions")
        while time.monotonic() < deadline:
            runs = [
                r for r in client.read_flow_runs(limit=50) if r.deployment_id == dep.id and r.parent_task_run_id is None
            ]  # not a chunk of the cycle: started by the automation
            if runs:
                return runs[0]
            time.sleep(0.5)
    return None


def check_rows(url: str, good: str, bad: str, child_ids: set[str], requalified: str | None = None) -> None:
    engine = make_engine(url)
    with engine.connect() as conn:
        stored = conn.execute(select(reports.c.user_id, reports.c.flow_run_id, reports.c.body)).all()
        per_class = conn.execute(
            select(skillbox.c.user_id, skillbox.c.canonical_hash, func.count()).group_by(
                skillbox.c.user_id, skillbox.c.canonical_hash
            )
        ).all()
    engine.dispose()
    if requalified:  # the forced re-qualification found the class covered by its live skill: nothing new
        again = [body for u, f, body in stored if f not in child_ids]
        assert [(b["user_id"], b["promoted"]) for b in again] == [(requalified, [])]
        stored = [row for row in stored if row[1] in child_ids]
    assert sorted(u for u, _, _ in stored) == TENANTS  # each partition's report exactly once
    assert {f for _, f, _ in stored} == child_ids  # written by the two child runs
    assert max(n for _, _, n in per_class) == 1  # no class promoted twice
    assert sorted(u for u, _, _ in per_class) == [t for t in TENANTS if t != REFUSED]
    assert {h for _, h, _ in per_class} == {good}
    by_user = {u: body for u, _, body in stored}
    assert all(by_user[t]["partition_failed"] is None for t in TENANTS)
    [(h, reasons)] = by_user[REFUSED]["rejected"]
    assert h == bad and reasons[0].startswith("distillation failed: ") and by_user[REFUSED]["promoted"] == []
    assert all(len(by_user[t]["promoted"]) == 1 for t in TENANTS if t != REFUSED)


def children_of(parent_id: Any) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        flt = FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id]))
        runs = client.read_flow_runs(flow_run_filter=flt)
        deployments = {r.deployment_id: client.read_deployment(r.deployment_id).name for r in runs if r.deployment_id}
    return [(r, deployments.get(r.deployment_id)) for r in runs]


def prepare_drift_and_shadow(url: str) -> list[str]:
    """Corrupt CORRUPT's drift watermark; land a SHADOW skill for SHADOW_TENANT and record 4 fresh runs for it."""
    engine = make_engine(url)
    with engine.begin() as conn:
        [skill] = list_skills(conn, AGENT, CORRUPT)
        since = skill.activated_at.isoformat() if skill.activated_at else None
        bad = {"since": since, "watermark": "not-a-timestamp", "recounted_at": since}  # incremental: it reads the mark
        update_stats(conn, skill.id, {"active": {**bad, "watermark_run": "x"}})
    sf = agent(engine)
    for i in range(6):
        record_cancel(sf, SHADOW_TENANT, i)
    assert cycle.run_partition(engine, AGENT, SHADOW_TENANT, config(require_shadow=True)).promoted
    now = utcnow()
    fresh = [f"cancel-{SHADOW_TENANT}-{i}" for i in range(6, 10)]
    for i in range(6, 10):
        record_cancel(sf, SHADOW_TENANT, i, when=now + timedelta(seconds=i))
    engine.dispose()
    return fresh


def check_drift(url: str, parent: Any, children: list[Any]) -> None:
    """One drift report per partition, each written once, keyed by the drift run; the corrupted one alone failed."""
    message = parent.state.message or ""
    assert parent.state.is_failed() and f"{AGENT}/{CORRUPT} (skill " in message, parent.state
    assert "check failed: ValueError" in message, parent.state
    assert len(children) == 2 and {name for _, name in children} == {"drift-partitions"}
    assert sorted(r.state.type.value for r, _ in children) == ["COMPLETED", "FAILED"]
    engine = make_engine(url)
    with engine.connect() as conn:
        stored = conn.execute(
            select(reports.c.user_id, reports.c.flow_run_id, reports.c.body).where(reports.c.kind == "drift")
        ).all()
        corrupt = conn.execute(
            select(skillbox.c.status).where(skillbox.c.user_id == CORRUPT, skillbox.c.agent_id == AGENT)
        ).scalar()
    engine.dispose()
    checked = sorted(t for t in TENANTS if t != REFUSED)
    assert sorted(u for u, _, _ in stored) == checked  # exactly once each, the failed one's too
    assert [len(b["failed"]) for u, _, b in stored if u == CORRUPT] == [1]
    assert {f for _, f, _ in stored} == {str(parent.id)}  # the children stamp the drift run they belong to
    assert corrupt == "active"  # its failed check changed nothing


def check_shadow(url: str, parent: Any, children: list[Any], fresh: list[str]) -> None:
    """The outbox drained by two concurrent drains; every fresh run evaluated exactly once."""
    assert parent.state.is_completed(), parent.state
    assert len(children) == 2 and {name for _, name in children} == {"shadow-drain"}
    assert all(r.state.is_completed() and r.work_pool_name == "compute" for r, _ in children)
    engine = make_engine(url)
    with engine.connect() as conn:
        assert pending_count(conn) == 0
        evaluated = conn.execute(select(workflow_memory.c.id, workflow_memory.c.shadow_evaluations)).all()
        observed = conn.execute(select(shadow_observations.c.run_id)).scalars().all()
    engine.dispose()
    records = {run_id: [r["idempotency_key"] for r in recs] for run_id, recs in evaluated if recs}
    assert sorted(records) == fresh and all(len(keys) == 1 for keys in records.values()), records
    assert sorted(observed) == fresh  # one observation per fresh run: none evaluated twice
    [summary] = artifacts_of(parent.id, "shadow-evaluation")
    assert "fan-out: 2 concurrent drain(s)" in summary and "still pending: 0" in summary, summary


def artifacts_of(flow_run_id: Any, key: str) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    flt = ArtifactFilter(key=ArtifactFilterKey(any_=[key]), flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
    with get_client(sync_client=True) as client:
        return [str(a.data) for a in client.read_artifacts(artifact_filter=flt)]
