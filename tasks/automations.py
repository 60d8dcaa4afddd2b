"""Automations defined in code, created idempotently (upsert by name) after the deployments exist.

* ``skillflow-requalify-on-demotion``: a ``skillflow.skill.demoted`` event starts ``promotion-partitions`` for
  that tenant (``force``), so the class re-qualifies under the same gates as soon as its evidence allows.
* ``skillflow-drain-on-backlog``: a ``skillflow.outbox.backlog`` event starts ``shadow-evaluation``.
* ``skillflow-crash-unresponsive-runs``: a skillflow flow run (tag ``skillflow``) whose heartbeats stop for
  ``SKILLFLOW_FLEET_UNRESPONSIVE_SECONDS`` without a final state is marked Crashed. A worker machine that dies
  takes its runs' processes with it and nobody reports them: without this, its run stays Running for good, and
  a parent waiting for it (a fan-out) holds the ``promotion-cycle`` singleton until its child timeout.

Automation names are not unique on the server, so a plain create on every deploy would pile up duplicates
that each fire; :func:`upsert` updates the one with the same name instead (docs/guide/ops.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

from tasks.events import BACKLOG, DEMOTED

REQUALIFY = "skillflow-requalify-on-demotion"
DRAIN = "skillflow-drain-on-backlog"
CRASH_UNRESPONSIVE = "skillflow-crash-unresponsive-runs"
TAG = "skillflow"  # every deployment's tag (flows/serve.py): its runs' heartbeats carry it
# A heartbeat opens a window that the next heartbeat or any final or paused state closes.
ALIVE = frozenset(
    {"prefect.flow-run.heartbeat"}
    | {
        f"prefect.flow-run.{state}"
        for state in ("Completed", "Failed", "Cancelled", "Crashed", "TimedOut", "Paused", "Suspended")
    }
)
PARTITIONS_DEPLOYMENT = "promotion-partitions/promotion-partitions"
SHADOW_DEPLOYMENT = "shadow-evaluation/shadow-evaluation"


def deployment_id(name: str) -> UUID:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_deployment_by_name(name).id


def crash_unresponsive(seconds: float) -> Any:
    """Mark a skillflow flow run Crashed when no heartbeat or final state follows its last heartbeat in time."""
    from prefect.automations import Automation, EventTrigger
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState

    return Automation(
        name=CRASH_UNRESPONSIVE,
        description="A skillflow flow run stopped sending heartbeats (its worker or machine died): mark it Crashed",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect=set(ALIVE),
            match={"prefect.resource.id": "prefect.flow-run.*"},
            match_related={"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.{TAG}"},
            for_each={"prefect.resource.id"},
            posture="Proactive",
            threshold=1,
            within=timedelta(seconds=seconds),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {seconds:.0f} s: the process running this flow run is gone "
                "(skillflow-crash-unresponsive-runs)",
            )
        ],
    )


def define_automations(database_url: str | None = None) -> list[Any]:
    """The shipped automations (their deployments must exist: run ``skillflow deploy`` or ``serve`` first)."""
    from prefect.automations import Automation, EventTrigger, RunDeployment

    from tasks.fanout import FleetSettings

    base: dict[str, Any] = {"database_url": database_url} if database_url else {}
    # One (agent, user) pair from the event's labels, rendered as JSON (plain "{{ }}" strings are not templated
    # inside nested lists, and tojson keeps any id exact).
    labels = (
        "[[{{ event.resource['skillflow.agent_id'] | tojson }}, {{ event.resource['skillflow.user_id'] | tojson }}]]"
    )
    tenant = {"__prefect_kind": "json", "value": {"__prefect_kind": "jinja", "template": labels}}
    return [
        Automation(
            name=REQUALIFY,
            description="A demoted skill: run the promotion cycle for its tenant (re-qualification)",
            trigger=EventTrigger(
                expect={DEMOTED},
                match={"prefect.resource.id": "skillflow.skill.*"},
                posture="Reactive",
                threshold=1,
                within=timedelta(0),
            ),
            actions=[
                RunDeployment(
                    source="selected",
                    deployment_id=deployment_id(PARTITIONS_DEPLOYMENT),
                    parameters={"params": {**base, "partitions": tenant, "force": True}},
                )
            ],
        ),
        Automation(
            name=DRAIN,
            description="A large shadow outbox backlog: run shadow evaluation now",
            trigger=EventTrigger(
                expect={BACKLOG},
                match={"prefect.resource.id": "skillflow.outbox.*"},
                for_each={"prefect.resource.id"},
                posture="Reactive",
                threshold=1,
                within=timedelta(0),
            ),
            actions=[
                RunDeployment(
                    source="selected", deployment_id=deployment_id(SHADOW_DEPLOYMENT), parameters={"params": base}
                )
            ],
        ),
        crash_unresponsive(FleetSettings().unresponsive_seconds),
    ]


def upsert(automation: Any) -> UUID:
    """Create the automation, or replace the one with the same name; its id either way."""
    from prefect.automations import Automation
    from prefect.exceptions import ObjectNotFound

    existing: Any
    try:
        existing = Automation.read(name=automation.name)
    except (ValueError, ObjectNotFound):
        existing = None
    if existing is None:
        created: Any = automation.create()
        return UUID(str(created.id))
    automation.id = existing.id
    automation.update()
    return UUID(str(existing.id))


def install_automations(database_url: str | None = None) -> dict[str, UUID]:
    """Upsert every shipped automation; ``{name: id}``."""
    return {a.name: upsert(a) for a in define_automations(database_url)}
