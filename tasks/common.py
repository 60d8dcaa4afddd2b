"""Helpers every task shares: engines from URLs, the current flow-run id, transient-error retries."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from skillflow.config import Settings
from skillflow.storage.engine import cached_engine
from skillflow.storage.migrations import migrate

_MIGRATED: set[str] = set()


def engine_for(database_url: str | None) -> Engine:
    """The process-wide engine for a URL (migrations are the deploy step, checked once per process)."""
    url = database_url or Settings().database_url
    engine = cached_engine(url)
    if url not in _MIGRATED:
        migrate(engine)
        _MIGRATED.add(url)
    return engine


def flow_run_id() -> str | None:
    """The id of the flow run we are inside, if any (stamped on events and reports)."""
    try:
        from prefect.runtime import flow_run

        value = flow_run.id
        return str(value) if value else None
    except Exception:  # noqa: BLE001 - outside a flow run there is simply no id
        return None


def is_transient(exc: BaseException) -> bool:
    """Network, rate-limit, timeout and lock errors are worth a retry; nothing else is."""
    if isinstance(exc, OperationalError | TimeoutError | ConnectionError):
        return True
    name = type(exc).__name__
    return name in {
        "RateLimitError",
        "APITimeoutError",
        "APIConnectionError",
        "InternalServerError",
        "TransientLLMError",
    }


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """``retry_condition_fn`` for Prefect tasks: retry only transient failures."""
    try:
        state.result()
    except Exception as exc:  # noqa: BLE001 - inspecting the failure is the point
        return is_transient(exc)
    return False
