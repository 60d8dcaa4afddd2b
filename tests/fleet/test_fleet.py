"""A real fleet: ``prefect server``, ``skillflow deploy`` on two process pools, two compute workers, PostgreSQL.

A promotion cycle over 20 tenants fans out to both workers; every partition's report is stored exactly once,
no class is promoted twice, and the tenant whose distillation the provider refuses (HTTP 400, through the
real OpenAI SDK against a local server) leaves the other 19 promoted. A second cycle started at the same
time is cancelled (CANCEL_NEW); a demotion event re-qualifies its tenant through the shipped automation.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text

from skillflow.kernel.models import utcnow
from skillflow.lab.fleet import LocalFleet
from skillflow.promotion import cycle
from skillflow.promotion.distill import OfflineDistiller
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import reports, skillbox
from tests.conftest import PG_SKIP_REASON, POSTGRES_DSN
from tests.support.promotion import AGENT, agent, config, record_cancel, record_payment

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prefect,
    pytest.mark.postgres,
    pytest.mark.skipif(not POSTGRES_DSN, reason=PG_SKIP_REASON),
]
TENANTS = [f"u{i:02d}" for i in range(20)]
REFUSED = "u13"  # its class is the one the provider answers 400 for
OVERRIDES = {"require_shadow": False, "promotion_every_n_runs": 0, "shadow_evaluation_enabled": False}


def provider(replies: dict[str, str], refused: str) -> tuple[ThreadingHTTPServer, list[str]]:
    """OpenAI chat completions on 127.0.0.1: a SKILL.md per class hash found in the request, 400 for ``refused``."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            return

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
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
    from sqlalchemy.engine import make_url

    assert POSTGRES_DSN
    tag = uuid.uuid4().hex[:10]
    schema, server_db = f"fleet_{tag}", f"prefect_fleet_{tag}"
    admin = make_engine(POSTGRES_DSN).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        conn.execute(text(f'CREATE DATABASE "{server_db}"'))
    sep = "&" if "?" in POSTGRES_DSN else "?"
    base = make_url(POSTGRES_DSN)
    server_url = base.set(drivername="postgresql+asyncpg", database=server_db, query={})
    try:
        yield f"{POSTGRES_DSN}{sep}options=-csearch_path%3D{schema}", server_url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            conn.execute(text(f'DROP DATABASE IF EXISTS "{server_db}" WITH (FORCE)'))
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


def test_a_cycle_over_20_tenants_on_two_workers(databases: tuple[str, str], tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    url, server_db = databases
    good, bad, skill_md = seed(url)
    llm, seen = provider({good: skill_md}, bad)
    env = {
        "SKILLFLOW_DATABASE_URL": url,
        "SKILLFLOW_DISTILLER": "openai",
        "SKILLFLOW_LLM_BASE_URL": f"http://127.0.0.1:{llm.server_address[1]}/v1",
        "SKILLFLOW_OPENAI_API_KEY": "sk-fleet-test",
        "SKILLFLOW_LLM_MAX_RETRIES": "0",
        "SKILLFLOW_JUDGE": "offline",
        "SKILLFLOW_EMBEDDER": "hashing",
    }
    started = time.monotonic()
    try:
        with LocalFleet(tmp_path / "prefect", env=env, server_db=server_db) as fleet:
            out = fleet.cli("deploy", "--pool", "compute", "--control-pool", "ctl", "--db", url, "--json")
            deployed = json.loads(out[out.index("{") :])
            assert "promotion-partitions/promotion-partitions" in deployed["deployments"]
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
    finally:
        llm.shutdown()
        llm.server_close()
    assert time.monotonic() - started < 240


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
