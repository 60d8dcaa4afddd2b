"""What one model run produced, tool execution against a fresh world, and the offline token estimate."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from skillflow.kernel.models import Step
from skillflow.lab.simulator import Task, Tools
from skillflow.lab.simulator.domain import SimToolError

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English + JSON with BPE tokenizers (documented estimate)


def estimate_tokens(value: Any) -> int:
    """ceil(len(compact JSON or text) / 4): the offline mode's documented token estimate."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


@dataclass
class ModelRun:
    """One answered request: executed steps, final answer and what the model cost."""

    answer: str
    steps: list[Step] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    inference_latency_ms: float = 0.0
    error: str | None = None
    note: str = ""  # where the procedure came from (offline) or why the loop stopped


class Model(Protocol):
    """Answers one request: ``request`` is the provider-shaped SDK kwargs from ``Skillflow.prepare``."""

    name: str
    provider: str
    label: str

    def run(self, request: dict[str, Any], task: Task) -> ModelRun: ...


class ToolBox:
    """Executes tool calls for real on a fresh copy of the task's world and records them as steps."""

    def __init__(self, task: Task) -> None:
        self.tools = Tools(copy.deepcopy(task.world))
        self.steps: list[Step] = []

    def call(self, name: str, arguments: Any) -> tuple[Any, str | None]:
        """``(result, None)`` or ``(None, error text)``; a failed call is a step with its error class."""
        args = dict(arguments) if isinstance(arguments, dict) else {}
        if not isinstance(arguments, dict):
            error, error_class = "arguments must be a JSON object", "InvalidArgumentsError"
            self.steps.append(Step(name, args, None, error, error_class, None))
            return None, error
        try:
            result = self.tools.call(name, args)
        except SimToolError as exc:
            self.steps.append(Step(name, args, None, str(exc), type(exc).__name__, None))
            return None, f"{type(exc).__name__}: {exc}"
        self.steps.append(Step(name, args, result, None, None, None))
        return result, None


def tool_result_text(result: Any, error: str | None) -> str:
    return json.dumps({"error": error} if error else {"result": result}, sort_keys=True, default=str)
