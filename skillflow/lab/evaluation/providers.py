"""Real tool-calling loops through the official OpenAI and Anthropic SDKs.

The request comes from ``Skillflow.prepare`` (already mapped for the provider: OpenAI keeps the native
``developer`` role, Anthropic receives developer skills in ``system``). Each tool call the model makes is
executed for real against a fresh copy of the task's world; usage tokens and the time spent inside the
SDK calls are summed over the loop.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from skillflow.lab.evaluation.execution import ModelRun, ToolBox, tool_result_text
from skillflow.lab.evaluation.toolschema import anthropic_tools, openai_tools
from skillflow.lab.simulator import Task
from skillflow.promotion.llm import LLMOptions, with_retries

# Retries of a model call under evaluation: the provider wrapper's (docs/RELIABILITY.md, "Retries"), as the
# SDKs' own 3 did before (their retries are off, so a call is never retried by two layers).
EVAL_RETRIES = 3

MAX_TURNS = 8


def _arguments(raw: str | None) -> Any:
    try:
        return json.loads(raw or "{}")
    except json.JSONDecodeError:
        return None  # recorded as a failed call: the model sent invalid JSON


class OpenAIToolModel:
    """Chat completions with function tools (official API or an OpenAI-compatible ``base_url``)."""

    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        temperature: float | None = None,
        max_turns: int = MAX_TURNS,
    ) -> None:
        import openai

        self.name = model
        self.label = f"openai model {model}" + (" (custom base URL)" if base_url else "")
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)
        self.retry = LLMOptions(model=model, max_retries=EVAL_RETRIES)
        self.temperature = temperature
        self.max_turns = max_turns

    def run(self, request: dict[str, Any], task: Task) -> ModelRun:
        box = ToolBox(task)
        messages: list[dict[str, Any]] = copy.deepcopy(list(request["messages"]))
        out = ModelRun(answer="")
        extra: dict[str, Any] = {} if self.temperature is None else {"temperature": self.temperature}
        for _ in range(self.max_turns):
            started = time.perf_counter()
            resp = with_retries(
                lambda: self.client.chat.completions.create(
                    model=self.name,
                    messages=messages,  # type: ignore[arg-type]  # provider-shaped dicts from prepare()
                    tools=openai_tools(),  # type: ignore[arg-type]  # JSON schema dicts
                    **extra,
                ),
                self.retry,
                "openai tool call",
            )
            out.inference_latency_ms += (time.perf_counter() - started) * 1000
            out.llm_calls += 1
            if resp.usage is not None:
                out.prompt_tokens += resp.usage.prompt_tokens
                out.completion_tokens += resp.usage.completion_tokens
            if not resp.choices:
                out.error = "no choices"
                break
            message = resp.choices[0].message
            calls = [c for c in (message.tool_calls or []) if getattr(c, "function", None) is not None]
            if not calls:
                out.answer = message.content or ""
                break
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.function.name, "arguments": c.function.arguments},  # type: ignore[union-attr]  # filtered above
                        }
                        for c in calls
                    ],
                }
            )
            for c in calls:
                result, error = box.call(c.function.name, _arguments(c.function.arguments))  # type: ignore[union-attr]  # filtered above
                messages.append({"role": "tool", "tool_call_id": c.id, "content": tool_result_text(result, error)})
        else:
            out.error = f"no final answer after {self.max_turns} turns"
        out.steps = box.steps
        out.note = out.error or "answered"
        return out


class AnthropicToolModel:
    """Anthropic Messages with tools; ``system`` carries the contract and any developer-authority skill."""

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        temperature: float | None = None,
        max_turns: int = MAX_TURNS,
        max_tokens: int = 1024,
    ) -> None:
        import anthropic

        self.name = model
        self.label = f"anthropic model {model}" + (" (custom base URL)" if base_url else "")
        self.client = anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)
        self.retry = LLMOptions(model=model, max_retries=EVAL_RETRIES)
        self.temperature = temperature
        self.max_turns = max_turns
        self.max_tokens = max_tokens

    def run(self, request: dict[str, Any], task: Task) -> ModelRun:
        box = ToolBox(task)
        messages: list[dict[str, Any]] = copy.deepcopy(list(request["messages"]))
        out = ModelRun(answer="")
        extra: dict[str, Any] = {} if self.temperature is None else {"temperature": self.temperature}
        for _ in range(self.max_turns):
            started = time.perf_counter()
            resp = with_retries(
                lambda: self.client.messages.create(
                    model=self.name,
                    system=request.get("system", ""),
                    messages=messages,  # type: ignore[arg-type]  # provider-shaped dicts from prepare()
                    tools=anthropic_tools(),  # type: ignore[arg-type]  # JSON schema dicts
                    max_tokens=self.max_tokens,
                    **extra,
                ),
                self.retry,
                "anthropic tool call",
            )
            out.inference_latency_ms += (time.perf_counter() - started) * 1000
            out.llm_calls += 1
            out.prompt_tokens += resp.usage.input_tokens
            out.completion_tokens += resp.usage.output_tokens
            uses = [b for b in resp.content if b.type == "tool_use"]
            text = "".join(getattr(b, "text", "") for b in resp.content if b.type == "text")
            if not uses:
                out.answer = text
                break
            content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            content += [{"type": "tool_use", "id": b.id, "name": b.name, "input": b.input} for b in uses]
            messages.append({"role": "assistant", "content": content})
            results = []
            for b in uses:
                result, error = box.call(b.name, b.input)
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": b.id,
                        "content": tool_result_text(result, error),
                        "is_error": error is not None,
                    }
                )
            messages.append({"role": "user", "content": results})
        else:
            out.error = f"no final answer after {self.max_turns} turns"
        out.steps = box.steps
        out.note = out.error or "answered"
        return out
