"""Every skillflow flow as a deployment, defined in code: cron from config/skillflow.toml, params as a form.

``build_deployments(database_url)`` returns one ``RunnerDeployment`` per flow module present;
``serve_all`` serves them from this process (``skillflow serve`` / ``make serve``). A flow with no cron
in ``[schedules]`` is manual-only (trigger it from the UI or ``prefect deployment run``).
"""

from __future__ import annotations

import importlib
import os
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from skillflow.kernel.config import Settings, load_schedules

# File stem = flow function name; deployment name = the stem with hyphens = the flow name.
FLOW_STEMS = (
    "promotion_cycle",
    "distill_class",
    "shadow_evaluation",
    "activation_review",
    "drift_demotion",
    "data_quality",
    "backfill_canonical_hashes",
)


def deployment_name(stem: str) -> str:
    return stem.replace("_", "-")


def available_flows() -> list[tuple[str, Any]]:
    """``(stem, flow)`` for each flow module that exists (a missing module is skipped, any other error raises)."""
    found = []
    for stem in FLOW_STEMS:
        try:
            module = importlib.import_module(f"flows.{stem}")
        except ModuleNotFoundError as exc:
            if exc.name == f"flows.{stem}":
                continue
            raise
        found.append((stem, getattr(module, stem)))
    return found


def params_model(flow: Any) -> type[BaseModel]:
    """The pydantic model of the flow's single ``params`` parameter (``X | None`` unwrapped)."""
    hint = typing.get_type_hints(flow.fn)["params"]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if not (isinstance(hint, type) and issubclass(hint, BaseModel)):
        raise TypeError(f"flow {flow.name}: params must be a pydantic model, got {hint!r}")
    return hint


def default_parameters(model: type[BaseModel], database_url: str) -> dict[str, Any]:
    """Every field with a default (required ones are left for the UI form or ``--params``), plus the URL."""
    values = {
        name: field.get_default(call_default_factory=True)
        for name, field in model.model_fields.items()
        if not field.is_required()
    }
    values["database_url"] = database_url
    return typing.cast(dict[str, Any], to_jsonable_python(values))


def build_deployments(database_url: str | None = None) -> list[Any]:
    """One ``RunnerDeployment`` per available flow, with its cron (or none) and default parameters."""
    url = database_url or Settings().database_url
    schedules = load_schedules()
    deployments = []
    for stem, flow in available_flows():
        name = deployment_name(stem)
        model = params_model(flow)
        deployments.append(
            flow.to_deployment(
                name=name,
                cron=schedules.get(name) or None,
                parameters={"params": default_parameters(model, url)},
                tags=["skillflow"],
                description=(flow.description or model.__doc__ or "").strip() or None,
            )
        )
    return deployments


def run_log_level() -> str:
    """The log level flow runs served from here use: ``$SKILLFLOW_FLOW_LOG_LEVEL`` or INFO."""
    level = os.environ.get("SKILLFLOW_FLOW_LOG_LEVEL", "INFO").strip().upper()
    return level if level in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"} else "INFO"


def serve_all(database_url: str | None = None) -> None:
    """Serve every deployment from this process until interrupted (runs execute here)."""
    from prefect import serve

    url = database_url or Settings().database_url
    # A run whose params omit database_url (``--params`` replaces the whole model) falls back to this URL.
    os.environ["SKILLFLOW_DATABASE_URL"] = url
    # Runs execute in child processes that inherit this environment: a quiet shell (PREFECT_LOGGING_LEVEL=WARNING,
    # as `make` exports for tests and the demo) would leave every flow run's Logs tab empty. Stages log counts
    # and ids at INFO; SKILLFLOW_FLOW_LOG_LEVEL chooses another level.
    os.environ["PREFECT_LOGGING_LEVEL"] = run_log_level()
    # pause_on_shutdown=False: stopping `skillflow serve` must not pause the schedules.
    serve(*build_deployments(url), pause_on_shutdown=False)
