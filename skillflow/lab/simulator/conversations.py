"""Simulated multi-turn conversations: a greeting, the request, the reads, a confirmation turn, the write.

Real agents talk in turns: the customer greets, states the request, the agent looks things up and asks
before it changes anything, the customer confirms ("yes, please proceed"), and only then the write
happens. :func:`simulate_conversations` executes a procedure like :func:`~skillflow.lab.simulator.agent.
simulate_runs` does, renders it as OpenAI chat messages in that shape, and stores it through
``Skillflow.record_conversation`` — one run per procedure, whose query holds every user message of its
span. A tenant's history then looks like what ``prepare(..., conversation=...)`` sees just before a write.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from skillflow.kernel.models import Step, utcnow
from skillflow.kernel.state import changes_state
from skillflow.lab.simulator.agent import GOOD_RATE, SimReport, SimRun
from skillflow.lab.simulator.domain import Tools
from skillflow.lab.simulator.procedures import procedures_for
from skillflow.lab.simulator.scenarios import INTENT_WEIGHTS, INTENTS, execute, new_task
from skillflow.runtime import Skillflow

GREETINGS = ("Hi there.", "Hello!", "Good morning.", "Hi, I need some help.", "Hello, anyone there?")
CONFIRMATIONS = ("yes, please proceed", "Yes, go ahead.", "yes please", "Confirmed, do it.", "ok, proceed")
ASK = "I found it. Shall I go ahead with {tool}?"


def _call(index: int, step: Step) -> list[dict[str, Any]]:
    """The assistant's tool call and the tool's reply (``Error: ...`` when it failed)."""
    cid = f"call_{index}"
    reply = f"Error: {step.error}" if step.error else json.dumps(step.result, sort_keys=True, default=str)
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": step.tool, "arguments": json.dumps(step.arguments, default=str)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": cid, "content": reply},
    ]


def conversation_messages(
    request: str, steps: Sequence[Step], answer: str, greeting: str, confirmation: str
) -> list[dict[str, Any]]:
    """A greeting turn, the request, the reads, a confirmation turn before the first write, the rest, the answer."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": greeting},
        {"role": "assistant", "content": "Hello! How can I help you today?"},
        {"role": "user", "content": request},
    ]
    confirmed = False
    for i, step in enumerate(steps):
        if not confirmed and changes_state(step.tool):
            messages += [
                {"role": "assistant", "content": ASK.format(tool=step.tool)},
                {"role": "user", "content": confirmation},
            ]
            confirmed = True
        messages += _call(i, step)
    messages.append({"role": "assistant", "content": answer})
    return messages


def simulate_conversations(
    sf: Skillflow,
    n: int,
    seed: int,
    *,
    user_id: str = "shared",
    start: datetime | None = None,
    step: timedelta = timedelta(minutes=1),
    good_rate: float = GOOD_RATE,
) -> SimReport:
    """Generate ``n`` conversations (deterministic for ``seed``) and store them with ``record_conversation``.

    Conversation ids derive from agent, user and seed, so re-running converges. ``SimReport`` counts
    conversations in ``runs`` and stored procedures (runs) in ``stored``.
    """
    sf.register_tools(Tools.NAMES)
    rng = random.Random(f"conversations:{seed}")
    start = start or utcnow() - step * max(n - 1, 0)
    digest = hashlib.sha1(f"{sf.agent_id}|{user_id}|{seed}|conversation".encode()).hexdigest()[:10]
    weights = [INTENT_WEIGHTS[i] for i in INTENTS]
    report = SimReport()
    for index in range(n):
        created = start + step * index
        intent = rng.choices(INTENTS, weights)[0]
        task = new_task(intent, rng)
        options = procedures_for(intent)
        good = next(p for p in options if p.good)
        chosen = good if rng.random() < good_rate else rng.choice([p for p in options if not p.good])
        execution = execute(chosen, task, clock=created)
        messages = conversation_messages(
            task.request, execution.steps, execution.answer, rng.choice(GREETINGS), rng.choice(CONFIRMATIONS)
        )
        cid = f"simconv-{digest}-{index}"
        results = sf.record_conversation(
            messages,
            user_id,
            conversation_id=cid,
            created_at=created,
            metadata={"source": "simulator", "seed": seed, "index": index, "intent": intent, "procedure": chosen.name},
        )
        report.runs += 1
        report.by_intent[intent] += 1
        report.by_procedure[chosen.name] += 1
        report.answers_correct += execution.answer_correct
        for result in results:
            if result.stored:
                report.stored += 1
                report.with_identity += result.canonical_hash is not None
                report.outcomes[result.outcome or "unknown"] += 1
            else:
                report.rejected[result.error or "unknown error"] += 1
        last = results[-1] if results else None
        report.records.append(
            SimRun(
                cid,
                intent,
                chosen.name,
                task.request,
                last.canonical_hash if last else None,
                last.outcome if last else None,
                execution.answer_correct,
                False,
            )
        )
    return report
