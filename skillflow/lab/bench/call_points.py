"""A recorded conversation's model calls as probes: what ``prepare`` sees before each, and what followed.

An agent calls ``prepare`` before every model call, i.e. before every ``assistant`` message. Each such
point is labelled from the conversation's procedure segmentation (the one ``record_conversation`` uses,
:func:`skillflow.capture.segments.segment_conversation`): the intent of the write that closes the procedure
span the point is in — the write the agent goes on to make without leaving the span — or ``read-only``
when the span closes without one or no call follows at all (the agent's last answers). A point is
*pre-write* when its message makes the span's closing call (read-only spans: their last call), the
protocol the per-procedure rows use (docs/BENCHMARKS.md, "Every model call").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillflow.capture.segments import READ_ONLY, segment_conversation
from skillflow.kernel.state import changes_state


@dataclass(frozen=True)
class CallPoint:
    """One model call of a conversation (the ``assistant`` message at ``index``) and its labels."""

    index: int  # position of the assistant message in the conversation's messages
    label: str  # the write closing the span the point is in, or read-only
    pre_write: bool  # this message makes the span's closing call (read-only span: its last call)
    writing: str | None  # the state-changing tool this message calls, if any (the write about to be made)
    done: frozenset[str]  # writes that succeeded since the latest user message (none before the first)


@dataclass(frozen=True)
class Dialog:
    """A recorded conversation as probes: its group (task, scenario), id, messages, call points, gold writes."""

    task: str
    conversation: str
    messages: tuple[Mapping[str, Any], ...]
    points: tuple[CallPoint, ...]
    gold: frozenset[str] | None = None  # writes a correct agent makes (τ-bench ``info.task.actions``)

    @property
    def writes(self) -> bool:
        """Whether the conversation changes state at all (any span closes with a write)."""
        return any(p.label != READ_ONLY for p in self.points)


def _calls(message: Mapping[str, Any]) -> list[str]:
    """The tool names an assistant message calls (the ones segmentation reads)."""
    out = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if isinstance(name, str) and name.strip():
            out.append(name.strip())
    return out


def call_points(messages: Sequence[Mapping[str, Any]], declared: Mapping[str, bool] | None = None) -> list[CallPoint]:
    """Every assistant message of a complete conversation as a labelled call point (see the module docstring)."""
    steps, closing, label_of = [], [], []
    for seg in segment_conversation(messages, declared):
        for j, step in enumerate(seg.steps):
            steps.append(step)
            closing.append(j == len(seg.steps) - 1)
            label_of.append(seg.intent)
    out: list[CallPoint] = []
    made = 0
    done: set[str] = set()
    for i, m in enumerate(messages):
        if m.get("role") == "user":
            done = set()
            continue
        if m.get("role") != "assistant":
            continue
        tools = _calls(m)
        mine = range(made, min(made + len(tools), len(steps)))
        writing = next((t for t in tools if changes_state(t, declared)), None)
        label = label_of[made] if made < len(steps) else READ_ONLY
        out.append(CallPoint(i, label, any(closing[c] for c in mine), writing, frozenset(done)))
        for c in mine:
            if changes_state(steps[c].tool, declared) and not steps[c].errored:
                done.add(steps[c].tool)
        made += len(tools)
    return out


def dialog(
    task: str,
    conversation: str,
    messages: Sequence[Mapping[str, Any]],
    gold: frozenset[str] | None = None,
    declared: Mapping[str, bool] | None = None,
) -> Dialog:
    return Dialog(task, conversation, tuple(messages), tuple(call_points(messages, declared)), gold)


def gold_writes(actions: Any, declared: Mapping[str, bool] | None = None) -> frozenset[str]:
    """The state-changing tools among a task's gold actions (``[{"name": ..., "kwargs": ...}]``)."""
    names = [a.get("name") for a in actions or () if isinstance(a, Mapping)]
    return frozenset(n for n in names if isinstance(n, str) and changes_state(n, declared))
