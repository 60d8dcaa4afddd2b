"""``make ui-check``: a real local Prefect server, the deployments, one promotion cycle, a browser screenshot.

Steps: start ``prefect server`` on 127.0.0.1 (own PREFECT_HOME), seed a fresh SQLite database with runs,
serve the deployments in a subprocess (``skillflow serve``), trigger ``promotion-cycle`` through the API,
wait for it to finish, then let headless Chromium load the flow run's Artifacts tab and save
``screenshots/prefect-flow-run.png``.

``skillflow`` never imports prefect at module level; the Prefect client is imported inside the
functions that need it (this module is a dev tool run as ``python -m skillflow.cli.uicheck``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1600,1200",
)
QUIET_ENV = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "PREFECT_LOGGING_LEVEL": "WARNING"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bin(name: str) -> str:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process group this module started (by its id), politely first."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def local_prefect_server(home: Path, port: int | None = None, timeout: float = 120.0) -> Iterator[str]:
    """Run ``prefect server start`` on 127.0.0.1 with PREFECT_HOME=``home``; yield its API URL; stop it."""
    port = port or free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **QUIET_ENV, "PREFECT_HOME": str(home), "PREFECT_SERVER_UI_API_URL": api_url}
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_UI_API_URL", None)
    env["PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT"] = "false"
    log = (home / "server.log").open("wb")
    cmd = [_bin("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(api_url):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (home / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"prefect server did not become healthy within {timeout:.0f}s:\n{tail}")
            time.sleep(0.5)
        yield api_url
    finally:
        _stop(proc)
        log.close()


@contextlib.contextmanager
def serving(database_url: str, api_url: str, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``skillflow serve --db URL`` in a subprocess against ``api_url``."""
    env = {**os.environ, **QUIET_ENV, "PREFECT_API_URL": api_url}
    log = (workdir / "serve.log").open("wb")
    proc = subprocess.Popen(
        [_bin("skillflow"), "serve", "--db", database_url], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        _stop(proc)
        log.close()


def seed_runs(database_url: str) -> int:
    """A few tool-calling runs that clear the default gates (one class, several distinct queries)."""
    from skillflow.kernel.models import Step
    from skillflow.runtime import Skillflow
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate

    engine = make_engine(database_url)
    migrate(engine)
    sf = Skillflow(agent_id="ui-check", engine=engine, continual_learning=True)
    sf.register_tools(["lookup_order", "issue_refund"])
    for i in range(6):
        steps = [
            Step(tool="lookup_order", arguments={"order_id": f"A{i}"}, result={"status": "delivered"}),
            Step(tool="issue_refund", arguments={"order_id": f"A{i}", "amount": 10 + i}, result={"accepted": True}),
        ]
        sf.record_run(f"please refund my order number {i}", "demo-user", steps, strict=True)
    engine.dispose()
    return 6


def wait_for_deployment(api_url: str, name: str, timeout: float = 90.0) -> Any:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL, temporary_settings

    deadline = time.monotonic() + timeout
    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        while True:
            try:
                return client.read_deployment_by_name(name)
            except ObjectNotFound:  # not registered yet; the deadline bounds the wait
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)


def trigger_and_wait(api_url: str, name: str, parameters: dict[str, Any] | None = None, timeout: float = 300.0) -> Any:
    """Create a flow run of deployment ``name`` through the API and wait for a final state."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        run: Any = run_deployment(name, parameters=parameters, timeout=0)
        deadline = time.monotonic() + timeout
        with get_client(sync_client=True) as client:
            while True:
                run = client.read_flow_run(run.id)
                if run.state is not None and run.state.is_final():
                    return run
                if time.monotonic() > deadline:
                    raise TimeoutError(f"flow run {run.id} not finished after {timeout:.0f}s (state {run.state})")
                time.sleep(1)


def verify_cli_run(api_url: str, database_url: str) -> None:
    """``prefect deployment run`` with nested params (the syntax the README documents) creates a run."""
    env = {**os.environ, **QUIET_ENV, "PREFECT_API_URL": api_url}
    params = json.dumps({"params": {"database_url": database_url, "dry_run": True}})
    cmd = [_bin("prefect"), "deployment", "run", "drift-demotion/drift-demotion", "--params", params]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or "Created flow run" not in done.stdout:
        raise RuntimeError(f"prefect deployment run failed: {done.stdout[-800:]} {done.stderr[-800:]}")


def screenshot(url: str, out: Path, budget_ms: int = 15000) -> Path:
    """Headless Chromium screenshot of ``url`` (the UI is a single-page app: give it virtual time)."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="skillflow-chromium-") as profile:
        cmd = [
            chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
            f"--screenshot={out}", url,
        ]  # fmt: skip
        subprocess.run(cmd, check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(f"chromium produced no screenshot at {out}")
    return out


def run_ui_check(out: Path = Path("screenshots/prefect-flow-run.png"), workdir: Path | None = None) -> dict[str, Any]:
    """The whole check; returns the flow run id, its state, the artifact keys and the screenshot path."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    work = workdir or Path(tempfile.mkdtemp(prefix="skillflow-ui-check-"))
    database_url = f"sqlite:///{work / 'ui-check.db'}"
    seed_runs(database_url)
    with local_prefect_server(work / "prefect-home") as api_url, serving(database_url, api_url, work):
        wait_for_deployment(api_url, "promotion-cycle/promotion-cycle")
        # force=True: a manual cycle ignores the every-N-runs cadence (the whole params model is replaced).
        params = {"params": {"database_url": database_url, "force": True}}
        run = trigger_and_wait(api_url, "promotion-cycle/promotion-cycle", parameters=params)
        verify_cli_run(api_url, database_url)
        with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
            artifacts = client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
            )
        keys = sorted({a.key for a in artifacts if a.key})
        ui = api_url.removesuffix("/api")
        # The flow run page (its graph carries the promotion-report artifact badge); the UI ignores ?tab= on
        # first render, so the artifact itself is captured from its own page as a second screenshot.
        shot = screenshot(f"{ui}/runs/flow-run/{run.id}?tab=Artifacts", out)
        report = next((a for a in artifacts if a.key == "promotion-report"), None)
        artifact_shot = None
        if report is not None:
            artifact_shot = screenshot(
                f"{ui}/artifacts/artifact/{report.id}", out.with_name("prefect-promotion-report.png")
            )
    return {"flow_run_id": str(run.id), "state": run.state.name if run.state else None, "artifacts": keys,
            "screenshot": str(shot), "artifact_screenshot": str(artifact_shot), "workdir": str(work)}  # fmt: skip


def main() -> None:
    result = run_ui_check()
    for key, value in result.items():
        print(f"{key}: {value}")
    if result["state"] != "Completed" or "promotion-report" not in result["artifacts"]:
        raise SystemExit("ui-check failed: the promotion cycle did not complete with a promotion-report artifact")


if __name__ == "__main__":
    main()
