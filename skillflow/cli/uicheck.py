"""``make ui-check``: a real local Prefect server and the served deployments, toured in headless Chromium.

Steps: seed a fresh SQLite database with runs, start ``prefect server`` on 127.0.0.1 (own PREFECT_HOME), serve
the deployments (``skillflow serve``, logging at INFO like ``make serve``), then drive Chromium over the
DevTools protocol (:mod:`skillflow.cli.uibrowser`) and save screenshots under ``screenshots/ui-check/``: the
deployments list, the Run forms, a promotion cycle's Logs tab, a paused activation review and its Resume
form, the review artifact with its chart, and the drift report with its chart. Everything the check needs
to pass (states, the form's text, a decoded chart image) is asserted on, not only photographed.
The work folder lives under ``.skillflow/ui-check`` and is removed at the end; needs ``chromium``.

``skillflow`` never imports prefect at module level; the Prefect client is imported inside the
functions that need it (this module is a dev tool run as ``python -m skillflow.cli.uicheck``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from skillflow.cli.uibrowser import browser
from skillflow.cli.uitour import FORMS, Tour, tour
from skillflow.lab.fleet import PORT_ATTEMPTS, SERVER_ENV, free_port, port_taken, stop_group

QUIET_ENV = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "PREFECT_LOGGING_LEVEL": "WARNING"}


def _bin(name: str) -> str:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def local_prefect_server(home: Path, port: int | None = None, timeout: float = 120.0) -> Iterator[str]:
    """Run ``prefect server start`` on 127.0.0.1 with PREFECT_HOME=``home`` (and ``SERVER_ENV``, as every server
    the project starts); yield its API URL; stop it.

    A port picked here (``port`` None) may be bound by another process before the server binds it; the server
    then exits saying so and another port is picked (as the fleet harness does); a port the caller gave is kept.
    """
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **QUIET_ENV, **SERVER_ENV, "PREFECT_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_UI_API_URL", None)
    env["PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT"] = "false"
    path = home / "server.log"
    with path.open("ab") as log:
        for attempt in range(PORT_ATTEMPTS):
            at = port or free_port()
            api_url = f"http://127.0.0.1:{at}/api"
            env["PREFECT_SERVER_UI_API_URL"] = api_url
            offset = path.stat().st_size
            cmd = [_bin("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(at)]
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + timeout
            while not _healthy(api_url) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            if not _healthy(api_url):
                exited = proc.poll() is not None
                stop_group(proc)
                if exited and not port and attempt < PORT_ATTEMPTS - 1 and port_taken(path, offset):
                    continue  # another process bound the port this picked before the server did
                tail = path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"prefect server did not become healthy within {timeout:.0f}s:\n{tail}")
            try:
                yield api_url
            finally:
                stop_group(proc)
            return


@contextlib.contextmanager
def serving(database_url: str, api_url: str, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``skillflow serve --db URL`` in a subprocess against ``api_url``."""
    env = {**os.environ, **QUIET_ENV, "PREFECT_API_URL": api_url, "PREFECT_LOGGING_LEVEL": "INFO"}
    log = (workdir / "serve.log").open("wb")
    proc = subprocess.Popen(
        [_bin("skillflow"), "serve", "--db", database_url], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        stop_group(proc)
        log.close()


def seed_runs(database_url: str) -> int:
    """Runs of one refund class over the last eight days that clear the default gates (one failure, so the
    review's daily success chart has something to show)."""
    from datetime import timedelta

    from skillflow.kernel.models import Step, utcnow
    from skillflow.runtime import Skillflow
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate

    engine = make_engine(database_url)
    migrate(engine)
    sf = Skillflow(agent_id="ui-check", engine=engine, continual_learning=True)
    sf.register_tools(["lookup_order", "issue_refund"])
    runs = 8
    for i in range(runs):
        steps = [
            Step(tool="lookup_order", arguments={"order_id": f"A{i}"}, result={"status": "delivered"}),
            Step(tool="issue_refund", arguments={"order_id": f"A{i}", "amount": 10 + i}, result={"accepted": True}),
        ]
        sf.record_run(
            f"please refund my order number {i}", "demo-user", steps, strict=True,
            created_at=utcnow() - timedelta(days=runs - 1 - i, minutes=5),
            execution_error="TimeoutError" if i == 3 else None,
        )  # fmt: skip
    engine.dispose()
    return runs


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


def verify_cli_run(api_url: str, database_url: str) -> None:
    """``prefect deployment run`` with nested params (the syntax the README documents) creates a run."""
    env = {**os.environ, **QUIET_ENV, "PREFECT_API_URL": api_url}
    params = json.dumps({"params": {"database_url": database_url, "dry_run": True}})
    cmd = [_bin("prefect"), "deployment", "run", "drift-demotion/drift-demotion", "--params", params]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or "Created flow run" not in done.stdout:
        raise RuntimeError(f"prefect deployment run failed: {done.stdout[-800:]} {done.stderr[-800:]}")


def run_ui_check(
    out: Path = Path("screenshots/ui-check"), workdir: Path | None = None, keep_workdir: bool = False
) -> dict[str, Any]:
    """The whole check; returns run ids and states, screenshot paths and findings (the caller asserts).

    The work folder (database, Prefect home, server and serve logs, the browser profile) is
    ``.skillflow/ui-check`` under the current directory unless given, and is removed at the end unless
    ``keep_workdir``; nothing goes to the system temp folder.
    """
    work = (workdir or Path(".skillflow") / "ui-check").resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    result = Tour(out=out)
    try:
        database_url = f"sqlite:///{work / 'ui-check.db'}"
        seed_runs(database_url)
        with local_prefect_server(work / "prefect-home") as api_url, serving(database_url, api_url, work):
            for name in (*FORMS, "activation-review"):
                wait_for_deployment(api_url, f"{name}/{name}")
            verify_cli_run(api_url, database_url)
            with browser(work / "chromium-profile") as page:
                tour(result, page, api_url, database_url)
    finally:
        if not keep_workdir:
            shutil.rmtree(work, ignore_errors=True)
    return {"screenshots": result.shots, "runs": result.runs, "states": result.states, "findings": result.findings,
            "workdir": str(work) if keep_workdir else None}  # fmt: skip


def failures(result: dict[str, Any]) -> list[str]:
    """What the check requires of a result; an empty list means it passed."""
    f, states, problems = result["findings"], result["states"], []
    for name in ("promotion-cycle", "activation-review", "drift-demotion"):
        if states.get(name) != "Completed":
            problems.append(f"{name} ended {states.get(name)}")
    for key, fields in f.items():
        if key.endswith(":id-fields"):
            problems += [f"{key} {x['label']}: opens on a None variant" for x in fields if x["none"]]
    if not f.get("promotion-cycle:logs"):
        problems.append("no INFO stage log line in the promotion cycle's Logs tab")
    for key in ("review-form:skill-name", "review-form:artifact-link", "review-form:descriptions"):
        if not f.get(key):
            problems.append(f"{key} missing")
    for key in ("review-artifact:images", "drift-report:images"):
        if not any(img["shown"] for img in f.get(key) or []):
            problems.append(f"{key}: no chart picture shown")
    return problems


def main() -> None:
    result = run_ui_check()
    print(json.dumps(result, indent=2, default=str))
    problems = failures(result)
    if problems:
        raise SystemExit("ui-check failed: " + "; ".join(problems))


if __name__ == "__main__":
    main()
