"""A real OpenAI tool-calling loop wired to skillflow: prepare before EVERY model call → model → tools → record.

    skillflow migrate && OPENAI_API_KEY=... python examples/openai_agent.py "Where is order A1?" alice
OPENAI_BASE_URL points it at any OpenAI-compatible server; SKILLFLOW_DATABASE_URL at the database.

The agent keeps its own conversation (``messages``: user, assistant and tool messages, never skillflow's
framing) and asks ``prepare`` before each model call with the conversation so far: the tenant's fitted rule
then sees the earlier requests and the calls already made, and injects the skill whose procedure continues
them — typically just before the state-changing call — or nothing (docs/guide/runtime.md).

What ran is recorded however the loop ends: a provider error mid-loop (after tools already ran, writes
included) still records the conversation so far, then reaches the caller. The model's learned-skill tool calls
go through ``sf.skill_tool``, which answers ``{"error": ...}`` instead of raising when the database is down or
stalls, within the capture bound (docs/guide/runtime.md, "Learned-skill tools").
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

from openai import OpenAI

from skillflow.capture.segments import segment_conversation
from skillflow.injection.conversation import Conversation
from skillflow.injection.skill_tools import OPENAI_TOOLS, TOOL_NAMES
from skillflow.runtime import Prepared, Skillflow


def lookup_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "shipped"}


TOOLS = {"lookup_order": lookup_order}
ARGS = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
SCHEMAS = [
    {"type": "function", "function": {"name": name, "description": name.replace("_", " "), "parameters": ARGS}}
    for name in TOOLS
]
SYSTEM = "You are a concise support agent."


def request_for(sf: Skillflow, messages: list[dict[str, Any]], user_id: str) -> tuple[Prepared, list[dict[str, Any]]]:
    """The model request for the conversation so far: prepared up to the latest user message, then the calls since."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    prepared = sf.prepare(
        messages[last]["content"],
        user_id,
        conversation=Conversation.from_messages(messages),
        history=messages[:last],
        provider="openai",
        system_prompt=SYSTEM,
    )
    return prepared, prepared.request["messages"] + messages[last + 1 :]


def run_agent(sf: Skillflow, client: OpenAI, query: str, user_id: str, model: str = "gpt-4o-mini") -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": query}]
    injected: dict[int, set[str]] = {}  # procedure (segment) index -> skills rendered while it was open
    answer = ""
    try:
        for _ in range(8):
            prepared, request = request_for(sf, messages, user_id)  # before EVERY model call
            segment = len(segment_conversation(procedure_only(messages), complete=False))
            injected.setdefault(segment, set()).update(prepared.skill_ids)
            reply = client.chat.completions.create(model=model, messages=request, tools=SCHEMAS + OPENAI_TOOLS)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            answer = message.content or ""
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(run_tool(sf, call, user_id))}
                )
    finally:
        # However the loop ended (an answer, the turn limit, or a provider error after tools already ran), the
        # conversation is over: one run per procedure, each stamped with exactly the ACTIVE skills rendered while
        # it was open. Reading a skill is not part of the procedure: those calls are left out of what is recorded.
        # record_conversation never raises, so a provider error still reaches the caller unchanged.
        sf.record_conversation(
            procedure_only(messages), user_id, conversation_id=uuid.uuid4().hex, skills_activated=injected
        )
    return answer


def run_tool(sf: Skillflow, call: Any, user_id: str) -> Any:
    """One tool call's result for the model: a tool error (arguments that are not JSON included) is reported to the
    model and recorded; a learned-skill tool answers ``{"error": ...}`` when the skills cannot be read."""
    name = call.function.name
    try:
        args = json.loads(call.function.arguments or "{}")
        if name in TOOL_NAMES:  # reading a skill is not part of the procedure
            return sf.skill_tool(name, args, user_id)
        return TOOLS[name](**args)
    except Exception as exc:  # noqa: BLE001 - a tool error is reported to the model and recorded
        return {"error": str(exc)}


def procedure_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation without the learned-skill tool calls and their replies."""
    skill_calls: set[str] = set()
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("tool_calls"):
            calls = [c for c in m["tool_calls"] if c["function"]["name"] not in TOOL_NAMES]
            skill_calls |= {c["id"] for c in m["tool_calls"] if c["function"]["name"] in TOOL_NAMES}
            m = {**m, "tool_calls": calls} if calls else {k: v for k, v in m.items() if k != "tool_calls"}
        if m.get("role") == "tool" and m.get("tool_call_id") in skill_calls:
            continue
        out.append(m)
    return out


if __name__ == "__main__":
    print(run_agent(Skillflow(agent_id="support-agent", continual_learning=True), OpenAI(), sys.argv[1], sys.argv[2]))
