"""A worker that SIGKILLs itself at one point of an operation outside the promotion cycle.

``python -m tests.faults.ops_kill_worker DB_URL OPERATION POINT [ARG]`` runs the shipped composition of
``OPERATION`` with one step wrapped (the helpers of ``tests/faults/shadow_kill_worker.py``) so that the process
is killed with SIGKILL at ``POINT``:

* ``backfill`` — :func:`skillflow.operations.backfill.run_backfill` (what the ``backfill-canonical-hashes`` flow's
  task runs) in batches of :data:`BACKFILL_BATCH` under :data:`FLOW_RUN`: ``batch-open`` (the 2nd batch's rows
  updated, its transaction not committed), ``batch-committed`` (the 2nd batch committed, the 3rd not started),
  ``report`` (every batch committed, the report not written);
* ``fold`` — :func:`skillflow.storage.class_stats.fold` (what ``skillflow class-stats`` runs): ``open`` (the
  pending runs summed into ``class_stats`` and their marks cleared, the outdated classes not yet recounted: all
  in the fold's one transaction), ``committed`` (the fold's transaction committed);
* ``import`` — :func:`skillflow.lifecycle.transfer.import_skills` from the folder ``ARG`` (what ``skillflow
  import`` runs) into :data:`IMPORT_USER`: ``open`` (the first skill inserted, its vectors not written, in its
  transaction), ``committed`` (the first skill committed, the second not started);
* ``edit`` — :func:`skillflow.lifecycle.revisions.edit_skill` of skill ``ARG`` with the text of :func:`edited`
  (what ``skillflow edit`` and the review form's ``edit`` run): ``open`` (the revision and the event written,
  the vectors not, in the edit's transaction), ``committed`` (the edit committed, nothing after it);
* ``review`` — the ``activation-review`` flow for skill ``ARG`` (a flow run on the Prefect API the environment
  names, paused until the test resumes it with a decision): ``event`` (the decision applied and committed, its
  Prefect event not emitted yet);
* ``review-run`` — the flow run ``ARG`` of the ``activation-review`` deployment, run as Prefect's engine runs a
  deployment's flow run (``prefect.engine``: the run read from the API, ``run_flow`` under
  ``handle_engine_signals``), so that a retry of it is a deployment's retry. The points of the timeout path
  (nobody answers before the pause times out): ``timeout-open`` (the ``review_timeout`` row written, its
  transaction not committed), ``timeout-committed`` (that row committed, the flow not returned); of the edit
  path (the first answer an ``edit``, the second an activation of the edited revision): ``edit-open`` (the
  revision and its event written, the vectors not, in the edit's transaction), ``edit-committed`` (the edit
  committed, the task not returned), ``edit-event`` (the edit's outcome back in the flow, before its
  ``emit_review``, which sends nothing for an edit), ``activate-open`` (the activation's transition and its review
  mark written, not committed), ``activate-committed`` (the activation committed, the tenant's applicability
  rule not yet refit), ``activate-event`` (the activation applied, its Prefect event not emitted yet); and
  ``event`` as for ``review``; ``none`` arms nothing (the test kills the process while the run is paused).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from skillflow.injection import retrieval
from skillflow.kernel.config import PromotionConfig
from skillflow.lifecycle import revisions, transfer
from skillflow.operations import backfill
from skillflow.storage import class_stats
from skillflow.storage.engine import make_engine
from skillflow.storage.skills import get_skill
from tests.faults.shadow_kill_worker import after, before
from tests.support.promotion import AGENT, config

FLOW_RUN = "0f0f0f0f-fault-backfill-run"
BACKFILL_BATCH = 2
IMPORT_USER = "u2"
REASON = "clearer trigger"
REVIEW_TIMEOUT = 30


def edited(content: str) -> str:
    """A valid edit of a distilled cancel skill: a clearer description, one reworded step."""
    old = content.split("description: ", 1)[1].split("\n", 1)[0]
    better = "Use when the customer wants an existing booking cancelled and has named it; not for changes or refunds."
    return content.replace(old, f'"{better}"').replace("Check each result", "Confirm each result")


def run_backfill(engine_url: str) -> backfill.BackfillReport:
    return backfill.run_backfill(make_engine(engine_url), BACKFILL_BATCH, flow_run_id=FLOW_RUN)


def run_import(engine_url: str, src: str, cfg: PromotionConfig) -> list[transfer.Imported]:
    return transfer.import_skills(make_engine(engine_url), Path(src), AGENT, IMPORT_USER, actor="alice", config=cfg)


def run_edit(engine_url: str, skill_id: str, cfg: PromotionConfig) -> revisions.EditResult:
    engine = make_engine(engine_url)
    with engine.connect() as conn:
        content = get_skill(conn, skill_id).content
    return revisions.edit_skill(engine, skill_id, edited(content), editor="alice", config=cfg, reason=REASON)


def review_params(url: str, skill_id: str) -> Any:
    """The review flow's parameters: a pause the test answers within :data:`REVIEW_TIMEOUT` seconds. The wait is held
    in the process (``wait="pause"``), also for a deployment's run, so that the process can be killed while it
    waits; a suspended review has no process then (``tests/fleet/test_review_suspended.py``)."""
    from flows.activation_review import ActivationReviewParams

    return ActivationReviewParams(
        database_url=url, skill_id=skill_id, timeout_seconds=REVIEW_TIMEOUT, poll_interval_seconds=1, wait="pause",
        config_overrides={"require_shadow": True, "shadow_evaluation_enabled": False},
    )  # fmt: skip


def kill_review_at(point: str) -> None:
    """Arm the review flow's kill ``point`` (``review-run`` in the module's docstring)."""
    from flows import activation_review as flow
    from skillflow.lifecycle import decisions, review
    from tasks import review as review_tasks

    if point == "timeout-open":
        review.record_event = after(review.record_event, 1)  # type: ignore[attr-defined]
    elif point == "timeout-committed":
        review_tasks.log_review_event = after(review_tasks.log_review_event, 1)  # type: ignore[attr-defined]
    elif point == "edit-open":
        retrieval.write_skill_vectors = before(retrieval.write_skill_vectors, 1)  # type: ignore[assignment]
    elif point == "edit-committed":
        review.edit_skill = after(review.edit_skill, 1)  # type: ignore[attr-defined]
    elif point == "edit-event":
        flow.emit_review = before(flow.emit_review, 1)  # type: ignore[attr-defined]
    elif point == "activate-open":
        decisions._mark = after(decisions._mark, 1)  # type: ignore[attr-defined]
    elif point == "activate-committed":
        decisions.refresh_rule = before(decisions.refresh_rule, 1)  # type: ignore[attr-defined]
    elif point == "activate-event":
        flow.emit_review = before(flow.emit_review, 2)  # type: ignore[attr-defined]  # the edit's is the 1st
    elif point == "event":
        flow.emit_review = before(flow.emit_review, 1)  # type: ignore[attr-defined]
    elif point != "none":  # none: the test kills the process itself (while the run is paused)
        raise SystemExit(f"unknown review point {point!r}")


def run_deployment_flow_run(flow_run_id: str) -> None:
    """What ``python -m prefect.engine`` does with a deployment's flow run (with the flow already imported)."""
    from uuid import UUID

    from prefect.engine import handle_engine_signals
    from prefect.flow_engine import load_flow_run, run_flow

    from flows.activation_review import activation_review

    with handle_engine_signals(UUID(flow_run_id)):
        run_flow(activation_review, flow_run=load_flow_run(UUID(flow_run_id)))


def main(url: str, operation: str, point: str, arg: str = "") -> None:
    cfg = config(require_shadow=True)
    if operation == "backfill":
        if point == "batch-open":
            backfill.backfill_batch = after(backfill.backfill_batch, 2)  # type: ignore[assignment]
        elif point == "batch-committed":
            backfill.add_listener(after(lambda batch: None, 2))  # listeners hear a batch after its commit
        else:
            backfill.write_report = before(backfill.write_report, 1)  # type: ignore[attr-defined]
        run_backfill(url)
    elif operation == "fold":
        if point == "open":
            class_stats._recount_keys = before(class_stats._recount_keys, 1)  # type: ignore[assignment]
        else:
            class_stats._in_snapshot = after(class_stats._in_snapshot, 1)  # type: ignore[assignment]
        class_stats.fold(make_engine(url))
    elif operation in ("import", "edit"):
        if point == "open":
            retrieval.write_skill_vectors = before(retrieval.write_skill_vectors, 1)  # type: ignore[assignment]
        elif operation == "import":
            transfer.import_skill = after(transfer.import_skill, 1)  # type: ignore[assignment]
        else:
            revisions.edit_skill = after(revisions.edit_skill, 1)  # type: ignore[assignment]
        if operation == "import":
            run_import(url, arg, cfg)
        else:
            run_edit(url, arg, cfg)
    elif operation == "review":
        from flows import activation_review as flow

        flow.emit_review = before(flow.emit_review, 1)  # type: ignore[attr-defined]
        flow.activation_review(review_params(url, arg))
    elif operation == "review-run":
        kill_review_at(point)
        run_deployment_flow_run(arg)
    else:
        raise SystemExit(f"unknown operation {operation!r}")
    raise SystemExit(3)  # not reached: the point killed us


if __name__ == "__main__":
    main(*sys.argv[1:5])
