"""A local Prefect fleet on 127.0.0.1 for the fleet test and the two-worker benchmark (not product code).

``LocalFleet`` starts ``prefect server start`` (own PREFECT_HOME, free port, ephemeral mode refused), runs
``skillflow deploy`` against it, starts process workers, and stops everything by process group: a worker's
flow-run subprocesses and the server's uvicorn child are in the same group, so nothing is left running.
``server_database(dsn)`` gives the server a throwaway PostgreSQL database, as production runs it
(docs/guide/ops.md): on its default SQLite database the server answers concurrent writes with "database is
locked" (HTTP 503), and Prefect's client sleeps ~2 s before it retries. Every server starts with
:data:`SERVER_ENV`; ``restart_server`` stops it and starts it again on the same port and home.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

BIN = Path(sys.executable).parent

# The environment of every Prefect server the project starts (this fleet, `make ui`, `make ui-check`):
# concurrency leases in files under PREFECT_HOME instead of the server's memory, so a restarted server still
# knows the slots of `skillflow-partitions` the running chunks hold; their releases then free them, and a
# lease whose holder died expires and is revoked (docs/guide/ops.md, "What to watch"; docs/RELIABILITY.md).
LEASE_STORAGE_SETTING = "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE"
FILESYSTEM_LEASE_STORAGE = "prefect.server.concurrency.lease_storage.filesystem"
SERVER_ENV = {LEASE_STORAGE_SETTING: FILESYSTEM_LEASE_STORAGE}

PORT_ATTEMPTS = 3


class PortTaken(RuntimeError):
    """The server exited because its port was already bound."""


def free_port() -> int:
    """A port free now; another process may bind it before the caller does (:meth:`LocalFleet.__enter__` and
    ``skillflow.cli.uicheck.local_prefect_server`` retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_taken(log: Path, offset: int) -> bool:
    """Whether the server that wrote ``log`` from ``offset`` on exited because its port was already bound."""
    try:
        with log.open("rb") as fh:
            fh.seek(offset)
            return b"already in use" in fh.read()  # Prefect's own check ("Port N is already in use") or uvicorn's bind
    except OSError:
        return False


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM the process group, wait, then SIGKILL whatever of the group is left, and any descendant outside
    it (a worker's flow-run processes are not always in its group)."""
    started = {pid: _start_time(pid) for pid in process_tree(proc.pid)[1:]}
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)
    for pid, start in started.items():
        if start is not None and _start_time(pid) == start:  # still that process, not a reused pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, …), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


@contextlib.contextmanager
def server_database(dsn: str, prefix: str = "prefect_fleet") -> Iterator[str]:
    """A fresh database for a Prefect server on the PostgreSQL server of ``dsn``; its asyncpg URL, dropped after."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from skillflow.storage.engine import make_engine

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = make_engine(dsn).execution_options(isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            url = make_url(dsn).set(drivername="postgresql+asyncpg", database=name, query={})
            yield url.render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def unschedule() -> int:
    """Drop every deployment's cron schedules and the runs already scheduled from them (the Prefect API of the
    current settings); how many schedules were dropped.

    ``skillflow deploy`` registers the crons of config/skillflow.toml (the cycle every 15 minutes, drift every
    10, shadow every 5). In a measurement or a test every run must be started by the caller: a scheduled cycle
    whose minute fell inside one took the cycle's concurrency slot, so the caller's own cycle was cancelled
    (``CANCEL_NEW``), and a scheduled drift run stored a second report per tenant.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType

    dropped = 0
    with get_client(sync_client=True) as client:
        for dep in client.read_deployments():
            for schedule in client.read_deployment_schedules(dep.id):
                client.delete_deployment_schedule(dep.id, schedule.id)
                dropped += 1
        scheduled = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])))
        for run in client.read_flow_runs(flow_run_filter=scheduled):
            if run.auto_scheduled:
                client.delete_flow_run(run.id)
    return dropped


def process_tree(pid: int) -> list[int]:
    """``pid`` and every live descendant of it, parents first (read from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        fields = _stat(entry.name) if entry.name.isdigit() else None
        if fields and len(fields) > 1:  # not gone meanwhile
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, stack = [], [pid]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(children.get(current, []))
    return out


@dataclass
class LocalFleet:
    """``with LocalFleet(home, env) as fleet: fleet.deploy(...); fleet.start_workers("compute", 2)``."""

    home: Path
    env: dict[str, str] = field(default_factory=dict)  # SKILLFLOW_* etc. for every process
    server_db: str | None = None  # PREFECT_API_DATABASE_CONNECTION_URL (None: SQLite under home)
    port: int = 0
    server: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    _logs: list[IO[bytes]] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def process_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(
            PREFECT_HOME=str(self.home),
            PREFECT_API_URL=self.api_url,
            PREFECT_SERVER_ALLOW_EPHEMERAL_MODE="false",
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            PREFECT_SERVER_UI_ENABLED="false",
            PREFECT_LOGGING_LEVEL="WARNING",
            DO_NOT_TRACK="1",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.env)
        env.update(extra)
        return env

    def _spawn(self, cmd: list[str], env: dict[str, str], log: str, cwd: Path | None = None) -> subprocess.Popen[bytes]:
        fh = (self.home / log).open("ab")
        self._logs.append(fh)
        return subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )

    def server_env(self) -> dict[str, str]:
        """The server's environment: :data:`SERVER_ENV` under :meth:`process_env` (so ``env`` may override it)."""
        env = {**SERVER_ENV, **self.process_env()}
        env.pop("PREFECT_API_URL")
        if self.server_db:
            env["PREFECT_API_DATABASE_CONNECTION_URL"] = self.server_db
        return env

    def _start_server(self) -> None:
        """Spawn ``prefect server start`` on ``self.port`` and wait until it is healthy (:class:`PortTaken` when it
        exited because the port was bound)."""
        log = self.home / "server.log"
        offset = log.stat().st_size if log.exists() else 0
        cmd = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(self.port), "--no-ui"]
        self.server = self._spawn(cmd, self.server_env(), "server.log")
        try:
            self._wait(lambda: self._get("/health") is True, 120, "server health")
        except RuntimeError as exc:
            if port_taken(log, offset):
                raise PortTaken(str(exc)) from exc
            raise

    def __enter__(self) -> LocalFleet:
        self.home.mkdir(parents=True, exist_ok=True)
        chosen = not self.port  # a port this fleet picks may be taken before the server binds it: pick again
        started = time.monotonic()
        for attempt in range(PORT_ATTEMPTS):
            self.port = self.port or free_port()
            try:
                self._start_server()
                break
            except PortTaken:
                if not chosen or attempt == PORT_ATTEMPTS - 1:
                    raise
                self.server, self.port = None, 0  # it exited: another process bound the port in between
        self.timings["server_start_s"] = round(time.monotonic() - started, 2)
        return self

    def restart_server(self, attempts: int = 10) -> float:
        """Stop the server (SIGTERM, as an operator or a host restart does) and start it again on the same port and
        home: workers and runs hold its URL. Seconds from the stop until it answered ``/health`` again.

        The port is given back at once (the server binds with ``SO_REUSEADDR``); should another process bind it in
        between, the start is tried again, up to ``attempts`` times, a second apart.
        """
        if self.server is None:
            raise RuntimeError("no server to restart: use the fleet as a context manager first")
        stopped = time.monotonic()
        stop_group(self.server, timeout=20)
        for attempt in range(attempts):
            try:
                self._start_server()
                break
            except PortTaken:
                if attempt == attempts - 1:
                    raise
                time.sleep(1)
        self.timings["server_restart_s"] = round(time.monotonic() - stopped, 2)
        return self.timings["server_restart_s"]

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for proc in self.workers:
            stop_group(proc)
        self.workers.clear()
        if self.server is not None:
            stop_group(self.server, timeout=20)
            self.server = None
        for fh in self._logs:
            fh.close()
        self._logs.clear()

    def _get(self, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.api_url}{path}", data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.load(r)
        except OSError:
            return None

    def _wait(self, ok: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            if self.server is not None and self.server.poll() is not None:
                raise RuntimeError(f"prefect server exited ({self.server.returncode}); see {self.home}/server.log")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready after {timeout:.0f}s (logs in {self.home})")
            time.sleep(0.25)

    def cli(self, *args: str, timeout: float = 300) -> str:
        """Run ``skillflow ARGS`` against this server; its stdout (raises with the output on failure)."""
        started = time.monotonic()
        done = subprocess.run(
            [str(BIN / "skillflow"), *args], env=self.process_env(), capture_output=True, text=True, timeout=timeout
        )
        self.timings[f"skillflow_{args[0]}_s"] = round(time.monotonic() - started, 2)
        if done.returncode != 0:
            raise RuntimeError(f"skillflow {args[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def start_workers(self, pool: str, n: int, limit: int | None = 1, cwd: Path | None = None) -> None:
        """``n`` process workers on ``pool`` (unique names; ``--limit`` flow runs at a time each), then wait.

        ``cwd``: the workers' working directory (default this process's), as on a machine of their own.
        """
        first = sum(1 for w in self.workers if getattr(w, "pool", None) == pool)
        for i in range(first, first + n):
            cmd = [str(BIN / "prefect"), "worker", "start", "--pool", pool, "--name", f"{pool}-{i}"]
            cmd += ["--type", "process", "--install-policy", "never"] + (["--limit", str(limit)] if limit else [])
            env = self.process_env(PREFECT_WORKER_QUERY_SECONDS="1", PREFECT_WORKER_PREFETCH_SECONDS="1")
            proc = self._spawn(cmd, env, f"worker-{pool}-{i}.log", cwd)
            proc.pool = pool  # type: ignore[attr-defined]
            self.workers.append(proc)
        self._wait(lambda: self.online(pool) >= first + n, 60, f"{n} worker(s) on {pool}")

    def online(self, pool: str) -> int:
        workers = self._get(f"/work_pools/{pool}/workers/filter", {}) or []
        return sum(1 for w in workers if w.get("status") == "ONLINE")

    def kill_worker(self, proc: subprocess.Popen[bytes]) -> list[int]:
        """SIGKILL a worker and every process it started at once, as a machine's power loss would (Linux).

        A flow run's process is the worker's child but not always in its process group, so the tree is read
        from ``/proc`` first. Nothing is left to report the runs. Returns the pids killed.
        """
        pids = process_tree(proc.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)
        self.workers.remove(proc)
        return pids

    def stop_workers(self, pool: str, keep: int) -> None:
        """Stop all but ``keep`` workers of ``pool`` (and their runs)."""
        mine = [w for w in self.workers if getattr(w, "pool", None) == pool]
        for proc in mine[keep:]:
            stop_group(proc)
            self.workers.remove(proc)
