"""Fan-out of partitions: fleet settings, chunking, child flow runs on a work pool, and the wait for them.

Two modes (docs/guide/ops.md, "Fan-out"): ``local`` runs every chunk in this process, one partition after
another (the embedded default: ``skillflow serve``, the CLI, tests); ``pool`` starts one child flow run per
chunk on a work pool with ``run_deployment`` and waits for all of them with one filter query per poll.
``auto`` picks ``pool`` when the current flow run itself came from a work pool (``skillflow deploy``),
else ``local``. Prefect does the scheduling; nothing here is a queue of our own.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger("skillflow.fanout")

T = TypeVar("T")
K = TypeVar("K")
R = TypeVar("R")
FanOut = Literal["auto", "local", "pool"]
Mode = Literal["local", "pool"]


class FleetSettings(BaseSettings):
    """How flows spread partitions over workers (environment prefix ``SKILLFLOW_FLEET_``)."""

    model_config = SettingsConfigDict(env_prefix="SKILLFLOW_FLEET_", extra="ignore")

    fan_out: FanOut = Field(
        "auto", description="local: in this process; pool: child runs on a work pool; auto: pool inside a pool run"
    )
    chunks: int = Field(
        0, ge=0, le=10_000, description="Child runs per flow run in pool mode (0 = one per online worker slot)"
    )
    concurrency_limit: str = Field(
        "skillflow-partitions",
        min_length=1,
        max_length=100,
        description="Global concurrency limit a chunk holds one slot of in pool mode (strict: it must exist)",
    )
    partitions_per_task: int = Field(
        100,
        ge=1,
        le=10_000,
        description="Partitions per task run in pool mode (1: a task run each; the server pays ~50 ms CPU a task run)",
    )
    poll_seconds: float = Field(0.5, gt=0, le=60, description="How often a parent polls its child runs")
    child_timeout_seconds: float = Field(
        6 * 3600.0, gt=0, le=7 * 86_400, description="A parent gives up on child runs after this long"
    )
    unresponsive_seconds: float = Field(
        600.0,
        ge=60,
        le=86_400,
        description="A skillflow flow run whose heartbeats stop this long is marked Crashed by the shipped "
        "automation (keep it over 3x the workers' PREFECT_FLOWS_HEARTBEAT_FREQUENCY, 180 s by default)",
    )
    outbox_backlog_threshold: int = Field(
        10_000, ge=1, le=10**9, description="Emit skillflow.outbox.backlog when more runs than this are pending"
    )


def chunk(items: Sequence[T], n: int) -> list[list[T]]:
    """``items`` split into at most ``n`` contiguous chunks whose sizes differ by at most one (order kept)."""
    if n < 1:
        raise ValueError("n must be at least 1")
    n = min(n, len(items))
    if n == 0:
        return []
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out


def batches(items: Sequence[T], size: int) -> list[list[T]]:
    """``items`` in contiguous slices of at most ``size`` (order kept)."""
    return [list(items[i : i + size]) for i in range(0, len(items), max(size, 1))]


def run_batched(
    keys: Sequence[K],
    per_task: int,
    batch: Callable[[list[K]], Any],
    alone: Callable[[K], None],
    done: Callable[[list[R]], None],
) -> None:
    """Run ``keys`` (partitions) one task run each, or ``per_task`` per task run: the one batch loop of the flows.

    ``batch`` calls the batch task with ``return_state=True``; its result is ``(results, keys to run again)``.
    ``done`` takes a batch's results (store them, emit their events). Every key the batch hands back, and every
    key of a batch whose task run failed, goes to ``alone``, which runs it as its own task run (with the
    transient retries and a Failed state of its own) and records its outcome; a key is never run alone while
    its batch's results are pending, so each result is handed on exactly once. A task run costs the Prefect
    server about 50 ms of CPU whatever it holds (docs/BENCHMARKS.md, "Scale"), so a fleet runs in batches.
    """
    for group in batches(keys, per_task) if per_task > 1 else [[k] for k in keys]:
        rest = group
        if per_task > 1:
            state = batch(group)
            results, rest = state.result() if state.is_completed() else ([], group)
            done(results)
        for key in rest:
            alone(key)


def current_work_pool() -> str | None:
    """The work pool of the flow run we are inside (None when served, embedded or outside a run)."""
    try:
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
        return ctx.flow_run.work_pool_name if ctx is not None and ctx.flow_run is not None else None
    except Exception:  # noqa: BLE001 - no context means no pool
        return None


def resolve_mode(requested: FanOut | None, settings: FleetSettings | None = None) -> Mode:
    """``local`` or ``pool``: an explicit request wins, then the setting; ``auto`` follows the current run."""
    choice = requested or (settings or FleetSettings()).fan_out
    if choice == "auto":
        return "pool" if current_work_pool() else "local"
    return choice


def worker_slots(deployment: str) -> int:
    """Online workers of the deployment's pool, capped by the pool's concurrency limit (at least 1)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name(deployment)
        if not dep.work_pool_name:
            raise RuntimeError(f"deployment {deployment} has no work pool: register it with `skillflow deploy`")
        pool = client.read_work_pool(dep.work_pool_name)
        workers = client.read_workers_for_work_pool(dep.work_pool_name)
    online = sum(1 for w in workers if str(getattr(w.status, "value", w.status)).upper() == "ONLINE")
    slots = max(online, 1)
    return min(slots, pool.concurrency_limit) if pool.concurrency_limit else slots


@contextlib.contextmanager
def partition_slot(limit: str | None) -> Iterator[None]:
    """Hold one slot of the global concurrency limit ``limit`` (strict: a missing limit is an error)."""
    if not limit:
        yield
        return
    from prefect.concurrency.sync import concurrency

    with concurrency(limit, occupy=1, strict=True):
        yield


@dataclass(frozen=True)
class ChildRun:
    """One child flow run of a fan-out and how it ended."""

    index: int
    flow_run_id: str
    state: str  # COMPLETED, FAILED, CRASHED, CANCELLED, … or TIMED_OUT when the parent gave up
    message: str = ""

    @property
    def completed(self) -> bool:
        return self.state == "COMPLETED"

    def failure(self) -> str:
        """How a child that did not complete ended, with its state message (a failed child names its partitions)."""
        return f"child run {self.flow_run_id} {self.state.lower()}" + (f" ({self.message})" if self.message else "")


def run_children(
    deployment: str, parameters: Sequence[dict[str, Any]], parent_id: str | None, settings: FleetSettings
) -> list[ChildRun]:
    """Start one child run of ``deployment`` per parameter set, linked to the parent, and wait for all of them.

    The idempotency key ``<parent>-<index>`` makes a retried parent find its children instead of doubling them.
    """
    from prefect.deployments import run_deployment

    started = []
    for i, params in enumerate(parameters):
        key = f"{parent_id}-{deployment}-{i}" if parent_id else None
        fr: Any = run_deployment(deployment, parameters=params, timeout=0, as_subflow=True, idempotency_key=key)
        started.append(str(fr.id))
    log.info("fan-out: %d child run(s) of %s started", len(started), deployment)
    final = wait_for(started, settings.poll_seconds, settings.child_timeout_seconds)
    return [
        ChildRun(i, rid, *final.get(rid, ("TIMED_OUT", "the parent stopped waiting"))) for i, rid in enumerate(started)
    ]


def wait_for(run_ids: Sequence[str], poll: float, timeout: float) -> dict[str, tuple[str, str]]:
    """Final ``(state type, message)`` per run id; one filter query per poll, not one request per child."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    pending = {UUID(r) for r in run_ids}
    final: dict[str, tuple[str, str]] = {}
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while pending and time.monotonic() < deadline:
            flt = FlowRunFilter(id=FlowRunFilterId(any_=sorted(pending)))
            for fr in client.read_flow_runs(flow_run_filter=flt, limit=len(pending)):
                if fr.state is not None and fr.state.is_final():
                    final[str(fr.id)] = (fr.state.type.value, (fr.state.message or "")[:200])
                    pending.discard(fr.id)
            if pending:
                time.sleep(poll)
    return final
