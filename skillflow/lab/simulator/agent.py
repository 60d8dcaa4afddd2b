"""The simulated agent: picks a request, picks a procedure, executes it, records the run like a real agent."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from skillflow.capture.outcome import Workflow
from skillflow.kernel.models import RunInput, utcnow
from skillflow.lab.simulator.domain import BreakMode, Tools
from skillflow.lab.simulator.procedures import Procedure, procedures_for
from skillflow.lab.simulator.scenarios import INTENT_WEIGHTS, INTENTS, execute, new_task
from skillflow.runtime import Skillflow

DEFAULT_AGENT_ID = "sim-airline"
GOOD_RATE = 0.55  # how often the un-steered agent happens to use the good procedure


@dataclass(frozen=True)
class SkillHint:
    """What a ``skills_for_query`` hook returns: skills that were in context, and optionally the procedure
    they steer to (a procedure name or its tool sequence)."""

    skill_ids: tuple[str, ...] = ()
    preferred: str | Sequence[str] | None = None


SkillsForQuery = Callable[[str], SkillHint | Sequence[str] | None]


def business_outcome(workflow: Workflow) -> bool | None:
    """Was the task really achieved? A declined payment or a cancellation that did not cancel is a failure.

    The simulator's ``workflow_outcome_evaluator``: it reads only the recorded steps, as a product's own
    callback would. Runs without tool calls keep their execution outcome.
    """
    if not workflow.steps:
        return None
    for key, step in workflow.steps.items():
        result = step.get("result")
        if not isinstance(result, Mapping):
            continue
        if result.get("accepted") is False:
            return False
        if key.split(":", 1)[-1].strip() == "cancel_reservation" and result.get("status") != "cancelled":
            return False
    return True


@dataclass(frozen=True)
class SimRun:
    run_id: str
    intent: str
    procedure: str
    query: str
    canonical_hash: str | None
    outcome: str | None
    answer_correct: bool
    broken: bool


@dataclass
class SimReport:
    runs: int = 0
    stored: int = 0
    with_identity: int = 0
    answers_correct: int = 0
    broken_runs: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    by_intent: Counter[str] = field(default_factory=Counter)
    by_procedure: Counter[str] = field(default_factory=Counter)
    records: list[SimRun] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "stored": self.stored,
            "with_identity": self.with_identity,
            "answers_correct": self.answers_correct,
            "broken_runs": self.broken_runs,
            "rejected": dict(self.rejected),
            "outcomes": dict(self.outcomes),
            "by_intent": dict(self.by_intent),
            "by_procedure": dict(self.by_procedure),
        }


def _steered(options: list[Procedure], preferred: str | Sequence[str] | None) -> Procedure | None:
    if preferred is None:
        return None
    if isinstance(preferred, str):
        return next((p for p in options if p.name == preferred), None)
    wanted = tuple(preferred)
    exact = next((p for p in options if p.tools == wanted), None)
    return exact or next((p for p in options if set(p.tools) == set(wanted)), None)


def _hint(hook: SkillsForQuery | None, query: str) -> SkillHint:
    raw = hook(query) if hook is not None else None
    if raw is None:
        return SkillHint()
    if isinstance(raw, SkillHint):
        return raw
    return SkillHint(skill_ids=tuple(raw))


def _is_broken(spec: tuple[str, int | datetime] | None, index: int, at: datetime) -> bool:
    if spec is None:
        return False
    after = spec[1]
    return at >= after if isinstance(after, datetime) else index >= after


def simulate_runs(
    sf: Skillflow,
    n: int,
    seed: int,
    *,
    user_id: str = "shared",
    start: datetime | None = None,
    step: timedelta = timedelta(minutes=1),
    skills_for_query: SkillsForQuery | None = None,
    break_tool: tuple[str, int | datetime] | None = None,
    break_mode: BreakMode = "error",
    good_rate: float = GOOD_RATE,
    progress: Callable[[int, int], None] | None = None,
) -> SimReport:
    """Generate ``n`` runs (deterministic for ``seed``) and store them through ``sf.record``.

    Runs are ``step`` apart starting at ``start`` (default: so that the last one is "now"). Run ids are
    derived from agent, user, seed and the break knob, so re-running the same command converges.
    ``break_tool=(tool, k)`` makes ``tool`` fail from run index ``k`` (or from a datetime) on.
    """
    if break_tool is not None and break_tool[0] not in Tools.NAMES:
        raise ValueError(f"unknown tool to break: {break_tool[0]}")
    sf.register_tools(Tools.NAMES)
    rng = random.Random(seed)
    start = start or utcnow() - step * max(n - 1, 0)
    digest = hashlib.sha1(f"{sf.agent_id}|{user_id}|{seed}|{break_tool}|{break_mode}".encode()).hexdigest()[:10]
    weights = [INTENT_WEIGHTS[i] for i in INTENTS]
    report = SimReport()
    for index in range(n):
        created = start + step * index
        intent = rng.choices(INTENTS, weights)[0]
        task = new_task(intent, rng)
        options = procedures_for(intent)
        good = next(p for p in options if p.good)
        chosen = good if rng.random() < good_rate else rng.choice([p for p in options if not p.good])
        hint = _hint(skills_for_query, task.request)
        chosen = _steered(options, hint.preferred) or chosen
        broken = _is_broken(break_tool, index, created)
        spec: dict[str, BreakMode] = {break_tool[0]: break_mode} if broken and break_tool else {}
        execution = execute(chosen, task, spec, clock=created)
        run = RunInput(
            query=task.request,
            agent_id=sf.agent_id,
            user_id=user_id,
            steps=execution.steps,
            skills_activated=hint.skill_ids,
            run_id=f"sim-{digest}-{index}",
            created_at=created,
            metadata={
                "source": "simulator",
                "seed": seed,
                "index": index,
                "intent": intent,
                "procedure": chosen.name,
                "answer_correct": execution.answer_correct,
                "broken_tool": break_tool[0] if broken and break_tool else None,
            },
        )
        result = sf.record(run)
        report.runs += 1
        report.by_intent[intent] += 1
        report.by_procedure[chosen.name] += 1
        report.answers_correct += execution.answer_correct
        report.broken_runs += broken
        if result.stored:
            report.stored += 1
            report.with_identity += result.canonical_hash is not None
            report.outcomes[result.outcome or "unknown"] += 1
        else:
            report.rejected[result.error or "unknown error"] += 1
        report.records.append(
            SimRun(
                result.run_id or run.run_id or "",
                intent,
                chosen.name,
                task.request,
                result.canonical_hash,
                result.outcome,
                execution.answer_correct,
                broken,
            )
        )
        if progress is not None:
            progress(index + 1, n)
    return report
