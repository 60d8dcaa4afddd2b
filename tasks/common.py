"""What every task shares: engines from URLs, the current flow-run id, and the house retry policy.

Tasks never migrate: :func:`engine_for` checks the schema version once per process and fails at once,
naming ``skillflow migrate``, when the database is behind (docs/design.md, "No DDL on the hot path").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, BeforeValidator, ConfigDict
from sqlalchemy import Engine

from skillflow.kernel.config import DEFAULT_DATABASE_URL, Settings
from skillflow.kernel.errors import should_retry
from skillflow.storage.engine import cached_engine
from skillflow.storage.migrations import require_current


def _none_is_all(value: object) -> object:
    """``None`` (the CLI's unset option, an old saved parameter set) means every tenant, like ``""``."""
    return "" if value is None else value


class FlowParams(BaseModel):
    """A flow's parameters: a key it does not know is refused, as the config file refuses one. A misspelt
    ``dryrun`` was dropped, so a requested dry run ran for real (docs/RELIABILITY.md)."""

    model_config = ConfigDict(extra="forbid")


# An optional agent or user id in a flow's form: a plain text box, empty meaning every agent or user.
TenantScope = Annotated[str, BeforeValidator(_none_is_all)]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

_CHECKED: set[str] = set()


class MissingDatabaseUrl(RuntimeError):
    """A flow run on a work pool with no database URL of its own and none in its worker's environment."""


def engine_for(database_url: str | None) -> Engine:
    """The process-wide engine for a URL, after one schema-version check per process.

    A run on a work pool without a URL (its deployment records none when the URL carries a password) reads the
    worker's ``SKILLFLOW_DATABASE_URL``; a worker without it is refused, never given the built-in SQLite file
    (docs/guide/ops.md, "Secrets"): that file would be a new, empty database in the worker's directory."""
    url = database_url or Settings().database_url
    if database_url is None and url == DEFAULT_DATABASE_URL:
        from tasks.fanout import current_work_pool

        if (pool := current_work_pool()) is not None:
            raise MissingDatabaseUrl(
                f"this run on work pool {pool!r} has no database URL: its deployment records none (a URL with a "
                "password is never recorded), so set SKILLFLOW_DATABASE_URL in this worker's environment "
                '(docs/guide/ops.md, "Secrets")'
            )
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


def deployment_of_run() -> str | None:
    """The deployment of the flow run we are inside, if it has one (a run started from a deployment: a worker's,
    ``skillflow serve``'s, or ``prefect deployment run``); None for a flow called directly."""
    try:
        from prefect.runtime import deployment

        value = deployment.id
        return str(value) if value else None
    except Exception:  # noqa: BLE001 - outside a deployment's run there is simply no id
        return None


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """``retry_condition_fn`` for Prefect tasks: retry transient failures no other layer already retried
    (a database error; never a provider error the LLM wrapper gave up on, docs/RELIABILITY.md "Retries")."""
    try:
        state.result()
    except Exception as exc:  # noqa: BLE001 - inspecting the failure is the point
        return should_retry(exc)
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


def run_parameters(flow: bool = False) -> Callable[[str], Any]:
    """A reader of the current run's parameters: the task run's own, or (``flow``) the fields of the flow's
    ``params`` model (a dict when the run came from a deployment, the model when called in process)."""
    if flow:
        from prefect.runtime import flow_run

        params: Any = (flow_run.parameters or {}).get("params") or {}
    else:
        from prefect.runtime import task_run

        params = task_run.parameters or {}
    if isinstance(params, dict):
        return params.get
    return lambda key: getattr(params, key, None)


def run_name(prefix: str, *fields: str, flow: bool = False) -> Callable[[], str]:
    """A ``task_run_name`` (or, with ``flow``, ``flow_run_name``) callable: ``prefix-<field>-…`` from the run's
    parameters (ids only, cut to 24 characters; a missing or empty one reads ``all``)."""

    def name() -> str:
        get = run_parameters(flow)
        return "-".join([prefix, *(str(get(f) or "all")[:24] for f in fields)])

    return name


def batch_name(prefix: str, key: str = "batch", flow: bool = False) -> Callable[[], str]:
    """A run-name callable for a run over a list of partitions (the parameter ``key``):
    ``<prefix>-<n>-from-<first agent>-<first user>`` (how many it holds and where it starts; ids cut to 24)."""

    def name() -> str:
        pairs = list(run_parameters(flow)(key) or [])
        first = "-".join(str(x)[:24] for x in pairs[0]) if pairs else "none"
        return f"{prefix}-{len(pairs)}-from-{first}"

    return name
