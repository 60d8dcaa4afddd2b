"""What every task shares: engines from URLs, the current flow-run id, and the house retry policy.

Tasks never migrate: :func:`engine_for` checks the schema version once per process and fails at once,
naming ``skillflow migrate``, when the database is behind (docs/design.md, "No DDL on the hot path").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from pydantic import BeforeValidator
from sqlalchemy import Engine

from skillflow.kernel.config import Settings
from skillflow.kernel.errors import is_transient
from skillflow.storage.engine import cached_engine
from skillflow.storage.migrations import require_current


def _none_is_all(value: object) -> object:
    """``None`` (the CLI's unset option, an old saved parameter set) means every tenant, like ``""``."""
    return "" if value is None else value


# An optional agent or user id in a flow's form: a plain text box, empty meaning every agent or user.
TenantScope = Annotated[str, BeforeValidator(_none_is_all)]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

_CHECKED: set[str] = set()


def engine_for(database_url: str | None) -> Engine:
    """The process-wide engine for a URL, after one schema-version check per process."""
    url = database_url or Settings().database_url
    engine = cached_engine(url)
    if url not in _CHECKED:
        require_current(engine)
        _CHECKED.add(url)
    return engine


def flow_run_id() -> str | None:
    """The id of the flow run we are inside, if any (stamped on events and reports)."""
    try:
        from prefect.runtime import flow_run

        value = flow_run.id
        return str(value) if value else None
    except Exception:  # noqa: BLE001 - outside a flow run there is simply no id
        return None


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """``retry_condition_fn`` for Prefect tasks: retry only transient failures."""
    try:
        state.result()
    except Exception as exc:  # noqa: BLE001 - inspecting the failure is the point
        return is_transient(exc)
    return False


def stage(
    *,
    retries: int = 2,
    delays: tuple[float, ...] = (2.0, 10.0),
    name: str | None = None,
    run_name: str | Callable[[], str] | None = None,
) -> Callable[[Callable[P, R]], Task[P, R]]:
    """The house task decorator: no result cache (database work), retries only on transient failures.

    ``run_name`` names each task run (a ``str.format`` template over the task's parameters, or a callable).
    """

    def wrap(fn: Callable[P, R]) -> Task[P, R]:
        decorate = task(
            name=name or fn.__name__.replace("_", "-"),
            task_run_name=run_name,
            cache_policy=NO_CACHE,
            retries=retries,
            retry_delay_seconds=list(delays),
            retry_condition_fn=retry_transient,
        )
        return decorate(fn)

    return wrap


def tenant_label(agent_id: str | None, user_id: str | None) -> str:
    """``agent/user`` for a run name; an empty or missing part reads ``all``."""
    return f"{agent_id or 'all'}/{user_id or 'all'}"


def params_run_name(prefix: str, *fields: str) -> Callable[[], str]:
    """A ``flow_run_name`` callable: ``prefix`` plus the named fields of the flow's ``params`` (ids only).

    Values are cut to 24 characters (an id prefix is enough to find the run); missing ones read ``all``.
    """

    def name() -> str:
        from prefect.runtime import flow_run

        params: Any = (flow_run.parameters or {}).get("params") or {}
        get = params.get if isinstance(params, dict) else lambda key, default=None: getattr(params, key, default)
        parts = [str(get(f, "") or "all")[:24] for f in fields]
        return "-".join([prefix, *parts]) if parts else prefix

    return name


def task_run_namer(prefix: str, *fields: str) -> Callable[[], str]:
    """A ``task_run_name`` callable: ``prefix`` plus the named task parameters (ids, cut to 24 characters).

    A missing or empty value reads ``all``, so an unscoped call is named ``<prefix>-all-all``, not ``None``.
    """

    def name() -> str:
        from prefect.runtime import task_run

        params = task_run.parameters or {}
        parts = [str(params.get(f) or "all")[:24] for f in fields]
        return "-".join([prefix, *parts])

    return name


def batch_run_namer(prefix: str) -> Callable[[], str]:
    """A ``task_run_name`` callable for a batch of partitions: ``<prefix>-<n>-from-<first agent>-<first user>``
    (how many partitions the task run holds and where it starts; ids cut to 24 characters)."""

    def name() -> str:
        from prefect.runtime import task_run

        batch = (task_run.parameters or {}).get("batch") or []
        first = "-".join(str(x)[:24] for x in batch[0]) if batch else "none"
        return f"{prefix}-{len(batch)}-from-{first}"

    return name


def batches(items: list[T], size: int) -> list[list[T]]:
    """``items`` in contiguous slices of at most ``size`` (order kept)."""
    return [items[i : i + size] for i in range(0, len(items), max(size, 1))]
