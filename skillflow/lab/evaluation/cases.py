"""Evaluation cases: held-out simulator requests with their expected trajectory, class and answer."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from skillflow.kernel import canonical
from skillflow.kernel.models import Step
from skillflow.lab.simulator import Task, execute, good_procedure, held_out_requests, new_task

DEFAULT_INTENTS: tuple[str, ...] = ("cancel_reservation", "refund_order", "book_flight")


def trajectory_hash(steps: Sequence[Step]) -> str | None:
    """The canonical hash of executed tool calls (the identity the promotion loop uses)."""
    return canonical.canonical_hash(canonical.signature(list(steps)))


@dataclass(frozen=True)
class EvalCase:
    """One held-out request. ``expected_hash`` is the reference execution's trajectory (the good procedure
    on this task's world); ``expected_answer`` is that execution's deterministic answer."""

    case_id: str
    intent: str
    task: Task
    expected_hash: str | None
    expected_tools: tuple[str, ...]

    @property
    def request(self) -> str:
        return self.task.request

    @property
    def expected_answer(self) -> str:
        return self.task.expected_answer


def seen_phrasing_requests(intent: str, n: int, seed: int = 0) -> list[Task]:
    """New tasks (fresh worlds and ids) phrased with the training traffic's own templates."""
    rng = random.Random(f"seen:{intent}:{seed}")
    return [new_task(intent, rng) for _ in range(n)]


def build_cases(
    intents: Iterable[str] = DEFAULT_INTENTS, per_intent: int = 4, seed: int = 0, phrasing: str = "held_out"
) -> list[EvalCase]:
    """``per_intent`` new tasks per intent, phrased with templates the training traffic never uses
    (``held_out``, the default) or with its own templates (``seen``: a request phrased as before)."""
    if phrasing not in ("held_out", "seen"):
        raise ValueError(f"phrasing must be held_out or seen, got {phrasing!r}")
    draw = held_out_requests if phrasing == "held_out" else seen_phrasing_requests
    cases: list[EvalCase] = []
    for intent in intents:
        for i, task in enumerate(draw(intent, per_intent, seed)):
            reference = execute(good_procedure(intent), task)
            if reference.answer != task.expected_answer:  # the simulator's own contract; fail loudly
                raise RuntimeError(f"held-out task {intent}#{i} is not reproducible")
            cases.append(
                EvalCase(f"{intent}-{i:02d}", intent, task, trajectory_hash(reference.steps), task.expected_tools)
            )
    return cases
