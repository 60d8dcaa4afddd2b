"""τ-bench historical trajectories → one run per procedure (default) or per user turn.

``unit="conversation"`` (the default) segments each conversation into procedures anchored on state-changing
calls (:func:`skillflow.capture.segments.segment_conversation`, tool-name verb rule): the runs carry the
conversation id and segment index. ``unit="turn"`` keeps the per-user-turn unit: a user turn is a ``user``
message plus the assistant and tool messages up to the next user message; its steps are the tool calls the
assistant made in that span, each paired with the message that directly follows it (call ids are not unique
within a conversation). Turns without a tool call are recorded too; they have no trajectory identity.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from skillflow.capture.segments import segment_conversation
from skillflow.kernel.models import RunInput, Step
from skillflow.kernel.state import changes_state
from skillflow.lab.ingest.common import (
    DEFAULT_USER_ID,
    IngestReport,
    OutcomeMode,
    Progress,
    corpus_item,
    decode_arguments,
    decode_json,
    error_class_for,
    reward_outcome,
    with_timestamps,
    write_runs,
)
from skillflow.runtime import Skillflow

Unit = Literal["conversation", "turn"]
DEFAULT_AGENT_ID = "tau-bench-airline"
STOP_MARKER = "###STOP###"
ERROR_PREFIX = "Error: "
# The airline toolbox's hand-off: τ-bench's airline agent may transfer "only if the user explicitly asks for a
# human agent, or if the user's issue cannot be resolved with the available tools", and the call ends the
# episode. An airline agent declares it a hand-off, so no skill teaches it (docs/guide/promotion.md, "Gates").
HANDOFF_TOOLS = frozenset({"transfer_to_human_agents"})


def _step(call: Mapping[str, Any], reply: Mapping[str, Any] | None) -> Step:
    function = call.get("function") or {}
    name = str(function.get("name") or "")
    arguments = decode_arguments(function.get("arguments"))
    content = reply.get("content") if reply is not None and reply.get("role") == "tool" else None
    if content is None:
        return Step(tool=name, arguments=arguments, error="no tool result recorded", error_class="Error:no_result")
    if isinstance(content, str) and content.startswith(ERROR_PREFIX):
        return Step(tool=name, arguments=arguments, error=content, error_class=error_class_for(content))
    return Step(tool=name, arguments=arguments, result=decode_json(content))


def _turns(traj: list[Mapping[str, Any]]) -> Iterator[tuple[str, list[Step]]]:
    query: str | None = None
    steps: list[Step] = []
    for i, message in enumerate(traj):
        role = message.get("role")
        if role == "user":
            if query is not None:
                yield query, steps
            query, steps = str(message.get("content") or ""), []
        elif role == "assistant" and message.get("tool_calls") and query is not None:
            reply = traj[i + 1] if i + 1 < len(traj) else None
            # Every call list in the corpus has exactly one element; a longer list would share one reply.
            for call in message["tool_calls"]:
                steps.append(_step(call, reply))
    if query is not None:
        yield query, steps


def _segments(episode: Mapping[str, Any], agent_id: str, user_id: str) -> list[RunInput]:
    """One run per procedure of an episode: id ``tau-{task}-{trial}-s{index}``, conversation ``tau-{task}-{trial}``."""
    traj = [
        {**m, "content": str(m.get("content") or "").replace(STOP_MARKER, "").strip()} if m.get("role") == "user" else m
        for m in episode.get("traj") or []
    ]
    task = (episode.get("info") or {}).get("task") or {}
    conversation = f"tau-{episode.get('task_id')}-{episode.get('trial')}"
    runs = []
    for seg in segment_conversation(traj):
        steps = tuple(
            replace(s, error_class=s.error_class or error_class_for(s.error)) if s.error else s for s in seg.steps
        )
        runs.append(
            RunInput(
                query=seg.query,
                agent_id=agent_id,
                user_id=user_id,
                steps=steps,
                run_id=f"{conversation}-s{seg.index}",
                conversation_id=conversation,
                segment_index=seg.index,
                metadata={
                    "source": "tau-bench",
                    "task_id": episode.get("task_id"),
                    "trial": episode.get("trial"),
                    "segment": seg.index,
                    "intent": seg.intent,
                    "customer_id": task.get("user_id"),
                    "reward": episode.get("reward"),
                },
            )
        )
    return runs


def parse_tau_bench(
    path: Path, agent_id: str = DEFAULT_AGENT_ID, user_id: str = DEFAULT_USER_ID, unit: Unit = "conversation"
) -> list[RunInput]:
    """Every procedure (``unit="conversation"``) or user turn of every conversation, in file order, as runs
    without ``created_at``.

    Per procedure see :func:`_segments`. Per turn, the run id is ``tau-{task_id}-{trial}-{turn}`` (re-ingesting
    converges). The simulated customer's id, the task, trial, turn index and episode reward go to run metadata;
    the query is the user's message with the simulator's ``###STOP###`` marker removed.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError("a τ-bench trajectory file is a JSON array of runs")
    runs: list[RunInput] = []
    for position, episode in enumerate(data):
        with corpus_item(f"run {position} of {Path(path).name}"):
            runs.extend(_episode(episode, agent_id, user_id, unit))
    return runs


def _episode(episode: Mapping[str, Any], agent_id: str, user_id: str, unit: Unit) -> list[RunInput]:
    """One episode's runs: per procedure (:func:`_segments`) or per user turn."""
    if unit == "conversation":
        return _segments(episode, agent_id, user_id)
    runs: list[RunInput] = []
    task = (episode.get("info") or {}).get("task") or {}
    for turn, (query, steps) in enumerate(_turns(episode.get("traj") or [])):
        runs.append(
            RunInput(
                query=query.replace(STOP_MARKER, "").strip(),
                agent_id=agent_id,
                user_id=user_id,
                steps=tuple(steps),
                run_id=f"tau-{episode.get('task_id')}-{episode.get('trial')}-{turn}",
                metadata={
                    "source": "tau-bench",
                    "task_id": episode.get("task_id"),
                    "trial": episode.get("trial"),
                    "turn": turn,
                    "customer_id": task.get("user_id"),
                    "reward": episode.get("reward"),
                },
            )
        )
    return runs


def ingest_tau_bench(
    path: Path,
    sf: Skillflow,
    outcome: OutcomeMode = "execution",
    user_id: str = DEFAULT_USER_ID,
    end: datetime | None = None,
    progress: Progress | None = None,
    unit: Unit = "conversation",
) -> IngestReport:
    """Parse and store a τ-bench file through ``sf``; ``outcome="reward"`` makes the episode reward the outcome
    of the episode's conversation, so of each of its runs (:func:`~skillflow.lab.ingest.common.reward_outcome`,
    the path of ``record_conversation(..., outcome=...)``).

    The toolbox is registered with each tool's state-changing flag declared by the verb rule the procedures are
    segmented with, as an airline agent declares its writes, and :data:`HANDOFF_TOOLS` declared hand-offs: so
    the promotion gates hold back read-only and hand-off classes (docs/guide/promotion.md, "Gates")."""
    runs = with_timestamps(parse_tau_bench(path, sf.agent_id, user_id, unit), end)
    writer = replace(sf, workflow_outcome_evaluator=None)
    tools = {s.tool for r in runs for s in r.steps}
    report = IngestReport("tau-bench", sf.agent_id, user_id, outcome)
    outcome_of = reward_outcome if outcome == "reward" else None
    declared = {tool: changes_state(tool) for tool in tools}
    tenant = (DEFAULT_AGENT_ID, DEFAULT_USER_ID)
    return write_runs(writer, runs, report, tools, progress, tenant, outcome_of, declared, HANDOFF_TOOLS)
