"""Tasks of the activation review: gather the evidence, publish it, apply the reviewer's decision."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta
from typing import Any
from uuid import UUID

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.lifecycle.review import (
    ReviewEvidence,
    ReviewOutcome,
    apply_review_decision,
    decision_of_run,
    evidence_table,
    gather_evidence,
    log_review_event,
    render_markdown,
)
from tasks.common import engine_for, stage

log = logging.getLogger("skillflow.review")  # also outside a flow run, where the run logger raises

ACTOR = "flow:activation-review"


def _wait_prefixes() -> tuple[str, ...]:
    """The key prefixes of the two states a review waits in (docs/guide/lifecycle.md), as Prefect builds them
    (``paused-<key>-…``, ``suspended-<key>-…``: the state's name), asked of Prefect rather than spelled here."""
    from prefect.input.run_input import keyset_from_paused_state
    from prefect.states import Paused, Suspended

    return tuple(
        keyset_from_paused_state(state(pause_key="k"))["response"].removesuffix("-k-response")
        for state in (Paused, Suspended)
    )


WAIT_STATES = _wait_prefixes()


def artifact_key(skill_id: str) -> str:
    """Stable artifact key ``review-<skill-id-prefix>`` (keys allow lowercase letters, digits and dashes)."""
    return "review-" + re.sub(r"[^a-z0-9-]", "-", skill_id.lower())[:12]


def artifact_url(artifact_id: UUID) -> str:
    """The artifact's page in the UI: absolute under ``PREFECT_UI_URL`` when known, else relative to the UI.

    ``prefect.utilities.urls.url_for`` has no URL for artifacts (it returns None), so the form's link is built
    from the UI's route ``/artifacts/artifact/<id>``.
    """
    from prefect.settings import PREFECT_UI_URL

    base = (PREFECT_UI_URL.value() or "").rstrip("/")
    return f"{base}/artifacts/artifact/{artifact_id}"


@stage(run_name="load-review-{skill_id}")
def load_review(database_url: str | None, skill_id: str, config: PromotionConfig) -> ReviewEvidence:
    evidence = gather_evidence(engine_for(database_url), skill_id, config)
    get_run_logger().info(
        "loaded skill %s v%d revision %d (%s), chart %s",
        evidence.skill_id, evidence.version, evidence.revision, evidence.status,
        "rendered" if evidence.chart_png_base64 else "none",
    )  # fmt: skip
    return evidence


@task(cache_policy=NO_CACHE, task_run_name="publish-review-{evidence.skill_id}")
def publish_review(evidence: ReviewEvidence) -> str | None:
    """The review page (with its chart) and the evidence table; returns the page's UI URL when known."""
    key = artifact_key(evidence.skill_id)
    artifact_id = create_markdown_artifact(
        key=key,
        markdown=render_markdown(evidence),
        description=f"SKILL.md under review: {evidence.name} v{evidence.version}.{evidence.revision}",
    )
    rows = evidence_table(evidence)
    if rows:
        create_table_artifact(key=f"{key}-evidence", table=rows, description="Source class, baseline, validation")
    url = artifact_url(artifact_id) if isinstance(artifact_id, UUID) else None
    get_run_logger().info("published review artifact %s (%d evidence rows)", key, len(rows))
    return url


@stage(run_name="apply-{decision}-{skill_id}")
def apply_decision(
    database_url: str | None,
    skill_id: str,
    decision: str,
    reviewer: str,
    reason: str,
    config: PromotionConfig,
    flow_run_id: str | None,
    revision: int | None = None,
    skill_md: str | None = None,
) -> ReviewOutcome:
    engine = engine_for(database_url)
    return apply_review_decision(
        engine, skill_id, decision, reviewer, reason=reason, config=config, flow_run_id=flow_run_id,
        revision=revision, skill_md=skill_md,
    )  # fmt: skip


@stage(run_name="load-decision-{skill_id}")
def load_decision(
    database_url: str | None, skill_id: str, flow_run_id: str | None, config: PromotionConfig | None = None
) -> ReviewOutcome | None:
    """The decision an earlier attempt of this flow run applied (a retry after a crash), if any; a transition's
    rule refit is finished (``decision_of_run``)."""
    return decision_of_run(engine_for(database_url), skill_id, flow_run_id, config)


@stage(run_name="review-timeout-{skill_id}")
def record_timeout(database_url: str | None, skill_id: str, flow_run_id: str | None) -> bool:
    """A review nobody answered: the skill stays in shadow; the audit log says so. False, and nothing written, when
    the skill is no longer in shadow (activated or rejected from the CLI while the review waited)."""
    engine = engine_for(database_url)
    return log_review_event(
        engine, skill_id, "review_timeout", ACTOR, "", flow_run_id, "keep_shadow", only_in=SkillStatus.SHADOW
    )


def leave_expired_pause(flow_run_id: str | None) -> None:
    """Put this flow run back to Running after its pause timed out, so it completes with its outcome.

    A pause that times out in the flow's process leaves the run Paused on the server, which then fails the run
    when it completes ("The flow was completed and never resumed"): every unanswered review would end Failed
    and fire alerts on failed runs, though keeping the skill in shadow is the review's designed outcome
    (docs/guide/lifecycle.md). Forced, as Prefect's rules refuse to leave an expired pause; never raises: at
    worst the run ends Failed as before.
    """
    if not flow_run_id:
        return
    try:
        from prefect import get_client
        from prefect.states import Running

        with get_client(sync_client=True) as client:
            client.set_flow_run_state(
                UUID(flow_run_id), Running(message="review timed out: kept in shadow"), force=True
            )
    except Exception as exc:  # noqa: BLE001 - the outcome is recorded; only the run's final state is at stake
        log.warning("could not leave the expired pause: %s", type(exc).__name__)


def schedule_expiry(deployment_id: str, params: Any, flow_run_id: str | None, key: str) -> bool:
    """Schedule the run of the review's deployment that expires this run's wait under ``key`` at the review's
    timeout (``params.expires`` set; docs/guide/lifecycle.md). Idempotent per (run, key). False when it could not be
    scheduled: the review then waits in its process, as a pause does, and times out there."""
    if not flow_run_id:
        return False
    try:
        from prefect.deployments import run_deployment

        body = params.model_dump(mode="json") | {"expires": {"flow_run_id": flow_run_id, "key": key}}
        run_deployment(
            UUID(deployment_id), parameters={"params": body}, timeout=0, as_subflow=False,
            scheduled_time=utcnow() + timedelta(seconds=params.timeout_seconds),
            idempotency_key=f"review-expiry:{flow_run_id}:{key}",
        )  # fmt: skip
        return True
    except Exception as exc:  # noqa: BLE001 - the review still happens, held in its process
        log.warning("could not schedule the review's expiry: %s; waiting in this process", type(exc).__name__)
        return False


def expire_review(database_url: str | None, skill_id: str, flow_run_id: str, key: str) -> bool:
    """Time out the suspended review run ``flow_run_id`` when it is still waiting under ``key``: ``review_timeout``
    recorded for that run (once), then the run set Completed, so an answer that comes later finds nothing to resume
    and a retry of that run reads the timeout back. False, and nothing changed, when the run was answered (resumed),
    asks again under another key (an edit's new revision), has ended, or is not a review of ``skill_id``. Raises on
    a failed read or write: the expiry run fails and can be retried."""
    from prefect import get_client
    from prefect.states import Completed

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(flow_run_id))
        state = run.state
        if state is None or not state.is_paused() or state.state_details.pause_key != key:
            return False
        if (run.parameters.get("params") or {}).get("skill_id") != skill_id:
            return False  # not a review of this skill: an expiry never ends another skill's review
        timed_out = True
        if load_decision(database_url, skill_id, flow_run_id) is None:
            timed_out = record_timeout(database_url, skill_id, flow_run_id)
        message = "review timed out: kept in shadow" if timed_out else "the skill was decided elsewhere"
        client.set_flow_run_state(run.id, Completed(message=message), force=True)
    return True


def earlier_answer(flow_run_id: str | None, key_prefix: str) -> dict[str, object] | None:
    """The newest answer a reviewer gave to an earlier attempt of this flow run under a pause key starting with
    ``key_prefix`` (the revision it showed), which that attempt did not live to apply; None when there is none.

    Only called before a pause, after ``load_decision`` found no decision of this run: an answer about the revision
    the run now shows, stored by the Prefect server when the reviewer resumed a run whose process then died (its
    machine lost, or the run killed while applying it). Reading it back spares the reviewer a second answer; an
    answer about another revision (an edit landed since) is never read (docs/RELIABILITY.md). Never raises: any
    failure to read asks the reviewer again, as a pause does.
    """
    if not flow_run_id:
        return None
    try:
        from prefect.input.actions import filter_flow_run_input

        found: list[Any] = []
        for state in WAIT_STATES:  # Prefect keys a wait's input by its state's name: paused-<key>-…, suspended-<key>-…
            stored: Any = filter_flow_run_input(
                key_prefix=f"{state}-{key_prefix}", limit=100, flow_run_id=UUID(flow_run_id)
            )
            found += stored
        responses = sorted((i for i in found if i.key.endswith("-response")), key=lambda i: i.created)
        if not responses:
            return None
        value = responses[-1].value
        answer = json.loads(value) if isinstance(value, str) else value
        return answer if isinstance(answer, dict) else None
    except Exception as exc:  # noqa: BLE001 - the reviewer is asked again
        log.warning("could not read an earlier answer of this review: %s", type(exc).__name__)
        return None


def delete_answers(flow_run_id: str | None, key_prefix: str) -> int:
    """Delete from the Prefect server every answer the reviewer gave to this flow run under a pause key starting with
    ``key_prefix``; returns how many went. The server stores an answer as given (a password in the reason too), and
    skillflow keeps its own cleaned, redacted copy (docs/SECURITY.md), so called only once that copy is written: after
    a decision is applied and recorded, or when the run has decided and an answer about another revision will never be
    applied. Never raises: on a failure the answers stay on the server (the error's class is logged, never a text)."""
    if not flow_run_id:
        return 0
    try:
        from prefect.exceptions import PrefectHTTPStatusError
        from prefect.input.actions import delete_flow_run_input, filter_flow_run_input

        run, deleted = UUID(flow_run_id), 0
        for state in WAIT_STATES:
            seen: set[str] = set()
            while True:  # page by page: the server leaves out the keys seen, and a page of none seen ends it anyway
                page: Any = filter_flow_run_input(
                    key_prefix=f"{state}-{key_prefix}", limit=100, exclude_keys=seen, flow_run_id=run
                )
                fresh = [item for item in page if item.key not in seen]
                if not fresh:
                    break
                for item in fresh:
                    seen.add(item.key)
                    if not item.key.endswith("-response"):
                        continue  # the form's schema and description: no answer in them
                    try:
                        delete_flow_run_input(item.key, flow_run_id=run)
                    except PrefectHTTPStatusError as exc:
                        if exc.response.status_code != 404:  # 404: already gone (another attempt deleted it)
                            raise
                    deleted += 1
        return deleted
    except Exception as exc:  # noqa: BLE001 - the decision is applied and recorded; only the server's copy is at stake
        log.warning("could not delete the reviewer's answers of flow run %s: %s", flow_run_id, type(exc).__name__)
        return 0
