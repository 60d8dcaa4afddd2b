"""Prefect events for operators and automations: every skill transition; outbox backlog; data quality.

Events are emitted by the orchestration layer (flows, tasks, the CLI) from what the domain returns (the domain
never imports Prefect). Emitting never breaks a run or a command: any error is logged by class and dropped.
The CLI emits only when a Prefect API is configured and never starts a server for it. Resources are
``skillflow.skill.<id>`` (or ``skillflow.class.<hash>`` for a rejected class, ``skillflow.outbox.<db>``,
``skillflow.quality.<report id>``) with ``skillflow.agent_id`` / ``skillflow.user_id`` labels; payloads carry
ids and counts only (docs/guide/ops.md, "Events and automations").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

log = logging.getLogger("skillflow.events")

PROMOTED = "skillflow.skill.promoted"
ACTIVATED = "skillflow.skill.activated"
DEMOTED = "skillflow.skill.demoted"
REJECTED = "skillflow.skill.rejected"  # a reviewer rejected the skill
DEPRECATED = "skillflow.skill.deprecated"  # the cycle's staleness sweep: a declared tool is gone
ROLLED_BACK = "skillflow.skill.rolled_back"  # an earlier version made ACTIVE again
CLASS_REJECTED = "skillflow.class.rejected"  # a cycle rejected a class (distillation or validation)
BACKLOG = "skillflow.outbox.backlog"
QUALITY_BLOCKING = "skillflow.quality.blocking"


def emit(
    event: str,
    resource_id: str,
    labels: dict[str, str] | None = None,
    payload: Any = None,
    event_id: UUID | None = None,
) -> bool:
    """Emit one event; True when handed to Prefect's event client, False when dropped (never raises).

    ``event_id`` (default: a random one) is the event's Prefect id: the server stores an id once and its triggers
    skip an id they have seen, so an event emitted again under the same id (a retried flow run) counts once.
    """
    try:
        from prefect.events import emit_event

        resource = {"prefect.resource.id": resource_id, **(labels or {})}
        return emit_event(event=event, resource=resource, payload=payload or {}, id=event_id) is not None
    except Exception as exc:  # noqa: BLE001 - an event must never fail the pipeline
        log.warning("event %s not emitted: %s", event, type(exc).__name__)
        return False


def tenant(agent_id: str, user_id: str) -> dict[str, str]:
    return {"skillflow.agent_id": agent_id, "skillflow.user_id": user_id}


def emit_promotion(reports: Iterable[Any]) -> int:
    """Per cycle report: ``skill.promoted`` per new skill, ``class.rejected`` per rejected class and
    ``skill.deprecated`` per skill the staleness sweep deprecated."""
    sent = 0
    for r in reports:
        if r.dry_run:
            continue
        labels, cycle = tenant(r.agent_id, r.user_id), str(r.cycle)
        for skill_id in r.promoted:  # a skill is promoted once
            key = stable_id(PROMOTED, skill_id)
            sent += emit(PROMOTED, f"skillflow.skill.{skill_id}", labels, {"cycle": r.cycle}, key)
        for canonical_hash, reasons in r.rejected:  # once per flow run ("Distill now" may ask again in a cycle)
            payload = {"cycle": r.cycle, "canonical_hash": canonical_hash, "reasons": len(reasons)}
            key = stable_id(CLASS_REJECTED, r.agent_id, r.user_id, canonical_hash, cycle, r.flow_run_id or "")
            sent += emit(CLASS_REJECTED, f"skillflow.class.{canonical_hash}", labels, payload, key)
        for skill_id, _reason in r.deprecated:  # a retried cycle keeps its cycle number (and reports this again)
            key = stable_id(DEPRECATED, skill_id, cycle)
            sent += emit(DEPRECATED, f"skillflow.skill.{skill_id}", labels, {"cycle": r.cycle}, key)
    return sent


def emit_demotions(demoted: Iterable[Any], dry_run: bool, drift_run_id: str | None = None) -> int:
    """One ``demoted`` per drift demotion (``SkillDrift`` rows), under :func:`drift_demotion_id`: a chunk checked
    again for the same drift run (which reads the demotions back) and a ``skillflow demote`` repeated afterwards
    send the same events."""
    if dry_run:
        return 0
    sent = 0
    for d in demoted:
        key = drift_demotion_id(d.skill_id, drift_run_id) if drift_run_id else None
        labels = tenant(d.agent_id, d.user_id)
        sent += emit(DEMOTED, f"skillflow.skill.{d.skill_id}", labels, drift_demotion_payload(d.version), key)
    return sent


def drift_demotion_id(skill_id: str, drift_run_id: str) -> UUID:
    """The id of drift's demotion of ``skill_id`` in the drift run ``drift_run_id``, which is also the run stamped
    on the demotion's lifecycle row (``skill_events.flow_run_id``): the one key of that transition, whoever
    sends its event (the chunk that demoted it, a chunk that reads it back, ``skillflow demote``)."""
    return stable_id(DEMOTED, skill_id, drift_run_id)


def drift_demotion_payload(version: int) -> dict[str, Any]:
    return {"version": version}


def drift_run_of(row: Any) -> str | None:
    """The drift run of a lifecycle row (:func:`skillflow.storage.skills.entered`) when drift's demotion wrote it,
    else None: its event is drift's, under :func:`drift_demotion_id` (docs/guide/ops.md, "Events and automations")."""
    from skillflow.lifecycle.drift import ACTOR

    if row.event == "demoted" and row.actor == ACTOR and row.flow_run_id:
        return str(row.flow_run_id)
    return None


def stable_id(*parts: str) -> UUID:
    """An event id derived from what makes the occurrence unique (``parts`` joined with a separator no tenant id
    may hold), so whoever sends the event again — a retried flow run or chunk, a repeated CLI command — sends
    the same event, which the Prefect server stores and triggers on once (docs/guide/ops.md)."""
    return uuid5(NAMESPACE_URL, "skillflow:" + "\x1f".join(parts))


def lifecycle_event_id(row_id: str) -> UUID:
    """The id of a decision's event: from the lifecycle row (``skill_events.id``) of the transition it made."""
    return stable_id("skill-event", row_id)


def emit_review(outcome: Any, agent_id: str, user_id: str) -> bool:
    """``skill.activated`` or ``skill.rejected`` when a reviewer's decision was applied, under the id of its
    transition's lifecycle row (:func:`lifecycle_event_id`), so a retried review run sends the same event."""
    if not outcome.applied:
        return False
    if outcome.status == "active":
        event = ACTIVATED
    elif outcome.status == "rejected":
        event = REJECTED
    else:
        return False
    payload = {"decision": outcome.decision, "injection_role": outcome.injection_role}
    event_id = lifecycle_event_id(outcome.event_row) if outcome.event_row else None
    return emit(event, f"skillflow.skill.{outcome.skill_id}", tenant(agent_id, user_id), payload, event_id)


def emit_backlog(pending: int, threshold: int, database: str, flow_run_id: str | None = None) -> bool:
    """``skillflow.outbox.backlog`` when more than ``threshold`` runs wait for shadow evaluation.

    One per database and flow run (a retried run sends the same event); outside a flow run, a random id.
    """
    if pending <= threshold:
        return False
    key = stable_id(BACKLOG, database, flow_run_id) if flow_run_id else None
    return emit(BACKLOG, f"skillflow.outbox.{database}", None, {"count": pending, "threshold": threshold}, key)


def emit_quality_blocking(report_id: str, failed_checks: list[str]) -> bool:
    """``skillflow.quality.blocking`` once per data-quality report (a retried run keeps its report id)."""
    payload = {"failed": failed_checks, "count": len(failed_checks)}
    key = stable_id(QUALITY_BLOCKING, report_id)
    return emit(QUALITY_BLOCKING, f"skillflow.quality.{report_id}", None, payload, key)


def emit_decision(
    event: str, skill: Any, payload: dict[str, Any], event_id: UUID | None = None, drain_seconds: float = 10.0
) -> bool:
    """A transition made outside a flow (the CLI): sent only when a Prefect API is configured and up, then flushed.

    Without ``PREFECT_API_URL`` nothing is sent (the events client would start an ephemeral server); an API
    that does not answer its health check gets a warning instead of the event. The command's process ends
    right after, so the event is flushed here, for up to ``drain_seconds``. Never raises.
    """
    try:
        from prefect.client.orchestration import get_client
        from prefect.events.worker import EventsWorker
        from prefect.settings import PREFECT_API_URL

        api = PREFECT_API_URL.value()
        if not api:
            return False
        with get_client(sync_client=True) as client:
            down = client.api_healthcheck()
        if down is not None:
            log.warning(
                "event %s not emitted: the Prefect API at %s is unreachable (%s)", event, api, type(down).__name__
            )
            return False
        sent = emit(event, f"skillflow.skill.{skill.id}", tenant(skill.agent_id, skill.user_id), payload, event_id)
        if sent:
            EventsWorker.drain_all(timeout=drain_seconds, at_exit=False)
        return sent
    except Exception as exc:  # noqa: BLE001 - an event must never fail the command
        log.warning("event %s not emitted: %s", event, type(exc).__name__)
        return False
