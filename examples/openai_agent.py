"""A real OpenAI tool-calling loop wired to skillflow: prepare → call the model → run tools → record the run.

    skillflow migrate && OPENAI_API_KEY=... python examples/openai_agent.py "Where is order A1?" alice
OPENAI_BASE_URL points it at any OpenAI-compatible server; SKILLFLOW_DATABASE_URL at the database.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from openai import OpenAI

from skillflow.runtime import Skillflow
from skillflow.injection.skill_tools import OPENAI_TOOLS, TOOL_NAMES, dispatch


def lookup_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "shipped"}


TOOLS = {"lookup_order": lookup_order}
ARGS = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
SCHEMAS = [
    {"type": "function", "function": {"name": "lookup_order", "description": "Look up an order", "parameters": ARGS}}
]


def run_agent(sf: Skillflow, client: OpenAI, query: str, user_id: str, model: str = "gpt-4o-mini") -> str:
    prepared = sf.prepare(query, user_id, provider="openai", system_prompt="You are a concise support agent.")
    request, steps, answer = prepared.request, [], ""  # request["messages"] is ours to extend
    for _ in range(8):
        reply = client.chat.completions.create(model=model, **request, tools=SCHEMAS + OPENAI_TOOLS).choices[0].message
        request["messages"].append(reply.model_dump(exclude_none=True))
        answer = reply.content or ""
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            name, args = call.function.name, json.loads(call.function.arguments or "{}")
            if name in TOOL_NAMES:  # reading a skill is not part of the procedure: not recorded as a step
                result = dispatch(name, args, engine=sf.engine, agent_id=sf.agent_id, user_id=user_id)
            else:
                step: dict[str, Any] = {"tool": name, "arguments": args}
                try:
                    result = step["result"] = TOOLS[name](**args)
                except Exception as exc:  # noqa: BLE001 - a tool error is reported to the model and recorded
                    result = {"error": str(exc)}
                    step.update(error=str(exc), error_class=type(exc).__name__)
                steps.append(step)
            request["messages"].append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    sf.record_run(query, user_id, steps, skills_activated=prepared.skill_ids)  # exactly the rendered ACTIVE ids
    return answer


if __name__ == "__main__":
    print(run_agent(Skillflow(agent_id="support-agent", continual_learning=True), OpenAI(), sys.argv[1], sys.argv[2]))
