"""What every corpus parser shares: error classes, synthetic timestamps, the reward evaluator, the writer."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import select

from skillflow.capture.outcome import ConversationOutcome, Workflow, given_outcome
from skillflow.kernel.models import RunInput, utcnow
from skillflow.runtime import Skillflow
from skillflow.storage.schema import workflow_memory

OutcomeMode = Literal["execution", "reward"]
DEFAULT_USER_ID = "shared"
RUN_SPACING = timedelta(minutes=1)
Progress = Callable[[int, int], None]  # (done, total)


# Free-text tool errors map to the closed vocabulary ``canonical.ERROR_KINDS`` (first rule that matches).
_ERROR_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        ("timeout", r"time(?:d)?\s*out|timeout"),
        ("rate_limited", r"rate.?limit|too many requests|quota"),
        ("unauthorized", r"unauthori[sz]ed|permission|forbidden|access denied|not logged in|token|credential|login"),
        ("insufficient_funds", r"balance|insufficient|not enough (?:money|funds)"),
        ("unavailable", r"not available|unavailable|not enough seats|sold out|no seats|fully booked"),
        ("not_found", r"not found|does not exist|doesn't exist|no such|unknown|cannot find|could not find"),
        ("conflict", r"already|conflict|duplicate|exists"),
        ("not_allowed", r"cannot|can't|not allowed|not permitted|not eligible|only .* can|must not"),
        ("invalid_argument", r"invalid|must be|missing|required|wrong|malformed|format|parse|bad request|add up"),
    )
)


@contextmanager
def corpus_item(where: str) -> Iterator[None]:
    """Read one item of a corpus (a τ-bench run, a ToolBench answer file, an API-Bank dialog): a value of another
    shape than the corpus's (a number where a message is, a ``traj`` that is not a list) is a ``ValueError`` naming
    ``where`` and the error's class, which ``skillflow ingest`` prints as its one error line."""
    try:
        yield
    except (AttributeError, TypeError, KeyError, IndexError) as exc:
        raise ValueError(f"{where} is not in the corpus's format ({type(exc).__name__})") from None


def error_class_for(message: str, prefix: str = "Error") -> str:
    """A stable class for an error message from the closed vocabulary ``canonical.ERROR_KINDS``.

    The message is tool output and may carry values or an attacker's text, so no word of it is kept:
    ``"Error: payment method certificate_7504069 not found"`` → ``"Error:not_found"``; a message no rule
    recognises → ``"Error:other"``. Equal errors with different values therefore share a class.
    """
    text = message.strip()
    for kind, pattern in _ERROR_RULES:
        if pattern.search(text):
            return f"{prefix}:{kind}"
    return f"{prefix}:other"


def decode_json(text: Any) -> Any:
    """Parse JSON text when it parses; otherwise return the value unchanged."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def decode_arguments(text: Any) -> Any:
    """Tool-call arguments: a JSON string is decoded; undecodable text is kept as ``{"_raw": text}``.

    Keeping the raw text under one key makes the broken call visible in the signature (its argument shape
    is ``["_raw"]``) instead of silently looking like a call without arguments.
    """
    if not isinstance(text, str):
        return text if text is not None else {}
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return {"_raw": text}


def with_timestamps(
    runs: Sequence[RunInput], end: datetime | None = None, spacing: timedelta = RUN_SPACING
) -> list[RunInput]:
    """Deterministic synthetic ``created_at``: runs in corpus order, ``spacing`` apart, the last one at ``end``.

    The corpora carry no wall-clock times; ending at "now" keeps the recency gate meaningful.
    """
    end = end or utcnow()
    last = len(runs) - 1
    return [replace(run, created_at=end - spacing * (last - i)) for i, run in enumerate(runs)]


def reward_evaluator(workflow: Workflow) -> bool | None:
    """A business callback that reads the episode reward from run metadata: 1.0 → success, else failure.

    A run without a reward keeps its execution outcome (``None``), as the evaluator contract says
    (docs/guide/runtime.md).
    """
    reward = workflow.metadata.get("reward")
    if reward is None:
        return None
    return float(reward) >= 1.0


def reward_outcome(run: RunInput) -> ConversationOutcome | None:
    """The episode reward in a run's metadata as its conversation's outcome: 1.0 → success, else failure.

    The same path as ``record_conversation(..., outcome=...)``: every procedure of a failed episode is a
    failure, a failed execution stays a failure, and a run without a reward keeps its execution outcome.
    """
    reward = run.metadata.get("reward") if run.metadata else None
    return None if reward is None else given_outcome(float(reward) >= 1.0)


@dataclass
class IngestReport:
    """What an ingest did; counts only, no payloads."""

    source: str
    agent_id: str
    user_id: str
    outcome_mode: str
    runs: int = 0
    with_tool_calls: int = 0
    with_identity: int = 0
    stored: int = 0
    new: int = 0
    already_present: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    tools: list[str] = field(default_factory=list)
    hands_off: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "agent_id": self.agent_id,
            "user_id": self.user_id,
            "outcome_mode": self.outcome_mode,
            "runs": self.runs,
            "with_tool_calls": self.with_tool_calls,
            "with_identity": self.with_identity,
            "stored": self.stored,
            "new": self.new,
            "already_present": self.already_present,
            "rejected": dict(self.rejected),
            "skipped": dict(self.skipped),
            "outcomes": dict(self.outcomes),
            "tools": self.tools,
            "hands_off": self.hands_off,
        }


FOREIGN_ROW = "run id already stored for another agent or user"
MAX_RUN_ID = 64


def tenant_run_id(local: str, agent_id: str, user_id: str, default: tuple[str, str]) -> str:
    """The deterministic run id of a corpus run for one tenant (re-ingesting converges, tenants never collide).

    The source's default tenant keeps the bare corpus id (stores ingested before ids were scoped stay
    convergent); any other tenant gets ``{local}@{sha256(agent_id NUL user_id)[:12]}``, or a full digest
    when that would exceed 64 characters.
    """
    if (agent_id, user_id) == default:
        return local
    digest = hashlib.sha256(f"{agent_id}\x00{user_id}".encode()).hexdigest()[:12]
    scoped = f"{local}@{digest}"
    if len(scoped) <= MAX_RUN_ID:
        return scoped
    full = hashlib.sha256(f"{agent_id}\x00{user_id}\x00{local}".encode()).hexdigest()[:40]
    return f"{local.split('-', 1)[0][:20]}-{full}"


def _existing(sf: Skillflow, ids: list[str], batch: int = 500) -> dict[str, tuple[str, str]]:
    """Run id → (agent_id, user_id) for the ids already stored."""
    assert sf.engine is not None
    wm = workflow_memory.c
    found: dict[str, tuple[str, str]] = {}
    with sf.engine.connect() as conn:
        for start in range(0, len(ids), batch):
            rows = conn.execute(select(wm.id, wm.agent_id, wm.user_id).where(wm.id.in_(ids[start : start + batch])))
            found.update({row.id: (row.agent_id, row.user_id) for row in rows})
    return found


def write_runs(
    sf: Skillflow,
    runs: Sequence[RunInput],
    report: IngestReport,
    tools: Iterable[str],
    progress: Progress | None = None,
    default_tenant: tuple[str, str] | None = None,
    outcome_of: Callable[[RunInput], ConversationOutcome | None] | None = None,
    state_changing: Mapping[str, bool] | None = None,
    hands_off: Iterable[str] = (),
) -> IngestReport:
    """Register the toolbox and store every run through ``Skillflow.record`` (idempotent on run id).

    Run ids are scoped to the tenant (:func:`tenant_run_id`; ``default_tenant`` keeps bare corpus ids).
    ``outcome_of`` gives a run the outcome of the conversation (episode) it belongs to (:func:`reward_outcome`);
    ``state_changing`` and ``hands_off`` are the toolbox's declaration (``Skillflow.register_tools``).
    """
    default = default_tenant or (report.agent_id, report.user_id)
    runs = [replace(r, run_id=tenant_run_id(r.run_id, r.agent_id, r.user_id, default)) if r.run_id else r for r in runs]
    tools = set(tools)
    handoffs = sorted(set(hands_off) & tools)
    sf.register_tools(tools, state_changing=state_changing, hands_off=handoffs)
    report.tools, report.hands_off = sorted(tools), handoffs
    present = _existing(sf, [r.run_id for r in runs if r.run_id])
    for done, run in enumerate(runs, start=1):
        report.runs += 1
        if run.steps:
            report.with_tool_calls += 1
        owner = present.get(run.run_id or "")
        if owner is not None and owner != (run.agent_id, run.user_id):
            # Capture would return the other tenant's row as "stored"; say what happened instead.
            report.rejected[FOREIGN_ROW] += 1
            if progress is not None:
                progress(done, len(runs))
            continue
        result = sf.record(run, conversation=outcome_of(run) if outcome_of is not None else None)
        if result.stored:
            report.stored += 1
            if result.run_id in present:
                report.already_present += 1
            else:
                report.new += 1
            if result.canonical_hash:
                report.with_identity += 1
            report.outcomes[result.outcome or "unknown"] += 1
        else:
            report.rejected[result.error or "unknown error"] += 1
        if progress is not None:
            progress(done, len(runs))
    return report
