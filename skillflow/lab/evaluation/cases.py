"""Evaluation cases: held-out simulator requests with their expected trajectory, class and answer."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from skillflow.kernel import canonical
from skillflow.kernel.models import Step
from skillflow.lab.simulator import Task, execute, good_procedure, held_out_requests

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


def build_cases(intents: Iterable[str] = DEFAULT_INTENTS, per_intent: int = 4, seed: int = 0) -> list[EvalCase]:
    """``per_intent`` held-out tasks per intent, phrased with templates the training traffic never uses."""
    cases: list[EvalCase] = []
    for intent in intents:
        for i, task in enumerate(held_out_requests(intent, per_intent, seed)):
            reference = execute(good_procedure(intent), task)
            if reference.answer != task.expected_answer:  # the simulator's own contract; fail loudly
                raise RuntimeError(f"held-out task {intent}#{i} is not reproducible")
            cases.append(
                EvalCase(f"{intent}-{i:02d}", intent, task, trajectory_hash(reference.steps), task.expected_tools)
            )
    return cases
