"""The offline scripted model: follows the procedure it finds in its context, executing tools for real.

It cannot read language, so it is told the request's intent and slots (the task); it takes the
*procedure* only from the provider request it is given: the first learned skill (developer message
first, then the user's context block) whose Procedure section's tool order is a known procedure for the
intent; else the most common tool sequence among the successful workflow records in context; else a
naive default (act on what the customer stated, without verification). Tokens are an estimate
(:func:`~skillflow.lab.evaluation.execution.estimate_tokens`) over a reconstructed tool-calling
conversation, one LLM call per tool call plus the final answer.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skillflow.lab.evaluation.execution import ModelRun, estimate_tokens, tool_result_text
from skillflow.lab.evaluation.toolschema import openai_tools
from skillflow.lab.simulator import Procedure, Task, Tools, execute, procedures_for

OFFLINE_LABEL = "offline scripted model: measures the plumbing, not a model's behaviour"

_SKILL = re.compile(r'<skill name="(?P<name>[^"]*)"[^>]*?authority="(?P<role>\w+)"[^>]*>(?P<body>.*?)</skill>', re.S)
_PROCEDURE = re.compile(r"^## Procedure\s*$(?P<body>.*?)(?=^## |\Z)", re.S | re.M)
_TICKED = re.compile(r"`([a-z_][a-z0-9_]*)`")
_WORKFLOW = re.compile(r"^- workflow (?P<id>\S+)(?P<rest>.*)$", re.M)
_OUTCOME = re.compile(r"\boutcome=(\w+)")
_TOOLS = re.compile(r"\btools=(?P<tools>.*?)(?= request=|$)")


@dataclass(frozen=True)
class Choice:
    procedure: Procedure
    source: str  # "skill:<name>", "workflows" or "default"


def _texts(request: Mapping[str, Any]) -> tuple[str, str]:
    """(developer-level text, user text) of an OpenAI- or Anthropic-shaped request."""
    messages = list(request.get("messages", []))
    developer = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "developer")
    developer += "\n" + str(request.get("system", ""))  # Anthropic: developer skills live in `system`
    users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
    return developer, users[-1] if users else ""


def skill_procedures(request: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """(skill name, procedure tool order) of every rendered skill, developer authority first."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for text in _texts(request):
        for m in _SKILL.finditer(text):
            section = _PROCEDURE.search(m.group("body"))
            body = section.group("body") if section else ""
            tools = tuple(t for t in _TICKED.findall(body) if t in Tools.NAMES)
            out.append((m.group("name"), tools))
    return out


def workflow_sequences(request: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Tool sequences of the successful workflow records in the user's context block."""
    _, user = _texts(request)
    out = []
    for m in _WORKFLOW.finditer(user):
        outcome, tools = _OUTCOME.search(m.group("rest")), _TOOLS.search(m.group("rest"))
        if outcome and outcome.group(1) == "success" and tools:
            out.append(tuple(t.strip() for t in tools.group("tools").split(" > ") if t.strip()))
    return out


def choose_procedure(request: Mapping[str, Any], intent: str) -> Choice:
    options = procedures_for(intent)
    by_tools = {p.tools: p for p in options}
    for name, tools in skill_procedures(request):
        if tools in by_tools:
            return Choice(by_tools[tools], f"skill:{name}")
    sequences = workflow_sequences(request)
    if sequences:
        common = Counter(sequences).most_common(1)[0][0]
        if common in by_tools:
            return Choice(by_tools[common], "workflows")
    return Choice(next(p for p in options if not p.good), "default")


class ScriptedModel:
    """The offline model (see the module docstring); deterministic."""

    name = "scripted"
    provider = "offline"
    label = OFFLINE_LABEL

    def run(self, request: dict[str, Any], task: Task) -> ModelRun:
        started = time.perf_counter()
        choice = choose_procedure(request, task.intent)
        decided = (time.perf_counter() - started) * 1000
        execution = execute(choice.procedure, task)
        base: list[Any] = [request.get("system", ""), request.get("messages", []), openai_tools()]
        transcript: list[Any] = []
        prompt = completion = 0
        for step in execution.steps:
            call = {"name": step.tool, "arguments": step.arguments}
            prompt += estimate_tokens(base + transcript)
            completion += estimate_tokens(call)
            transcript += [call, tool_result_text(step.result, step.error)]
        prompt += estimate_tokens(base + transcript)
        completion += estimate_tokens(execution.answer)
        return ModelRun(
            answer=execution.answer,
            steps=list(execution.steps),
            prompt_tokens=prompt,
            completion_tokens=completion,
            llm_calls=len(execution.steps) + 1,
            inference_latency_ms=decided,
            note=choice.source,
        )
