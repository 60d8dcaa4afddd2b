"""API-Bank reference dialogs → one run per user turn (a ``User`` line plus the lines up to the next one).

Tool = ``api_name``, arguments = ``param_dict``, result = ``result.output``, error = ``result.exception``.
The dialogs are gold references without success labels, so only execution outcomes exist.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from skillflow.kernel.models import RunInput, Step
from skillflow.lab.ingest.common import (
    DEFAULT_USER_ID,
    IngestReport,
    Progress,
    corpus_item,
    error_class_for,
    with_timestamps,
    write_runs,
)
from skillflow.runtime import Skillflow

DEFAULT_AGENT_ID = "api-bank"


def _step(record: Mapping[str, Any]) -> Step:
    raw = record.get("result")
    result: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    exception = result.get("exception")
    return Step(
        tool=str(record.get("api_name") or ""),
        arguments=record.get("param_dict") if record.get("param_dict") is not None else {},
        result=result.get("output"),
        error=str(exception) if exception not in (None, "") else None,
        error_class=error_class_for(str(exception)) if exception not in (None, "") else None,
    )


def _turns(records: list[Mapping[str, Any]]) -> Iterator[tuple[str, list[Step]]]:
    query: str | None = None
    steps: list[Step] = []
    for record in records:
        role = record.get("role")
        if role == "User":
            if query is not None:
                yield query, steps
            query, steps = str(record.get("text") or ""), []
        elif role == "API" and query is not None:
            steps.append(_step(record))
    if query is not None:
        yield query, steps


def chat_messages(records: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A dialog as OpenAI chat messages: ``User``/``AI`` lines as user/assistant turns, each ``API`` line as an
    assistant tool call and its tool reply (``Error: …`` when the call raised), in dialog order."""
    out: list[dict[str, Any]] = []
    for n, record in enumerate(records):
        role = record.get("role")
        if role in ("User", "AI"):
            out.append({"role": "user" if role == "User" else "assistant", "content": str(record.get("text") or "")})
        elif role == "API":
            step = _step(record)
            call = {"id": f"call-{n}", "type": "function",
                    "function": {"name": step.tool, "arguments": json.dumps(step.arguments, default=str)}}  # fmt: skip
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            reply = f"Error: {step.error}" if step.error else json.dumps(step.result, default=str)
            out.append({"role": "tool", "tool_call_id": f"call-{n}", "content": reply})
    return out


def parse_api_bank(path: Path, agent_id: str = DEFAULT_AGENT_ID, user_id: str = DEFAULT_USER_ID) -> list[RunInput]:
    """Every user turn of every ``.jsonl`` dialog under ``path`` (sorted), as runs without ``created_at``.

    Run ids are ``apibank-{sha1(relative path)[:12]}-{turn}`` (file names can exceed the id length).
    """
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.rglob("*.jsonl"))
    runs: list[RunInput] = []
    for file in files:
        rel = file.relative_to(path.parent if path.is_file() else path).as_posix()
        records = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        digest = hashlib.sha1(rel.encode()).hexdigest()[:12]
        with corpus_item(rel):  # a value of another shape: one error naming the dialog
            turns = list(_turns(records))
        for turn, (query, steps) in enumerate(turns):
            runs.append(
                RunInput(
                    query=query.strip(),
                    agent_id=agent_id,
                    user_id=user_id,
                    steps=tuple(steps),
                    run_id=f"apibank-{digest}-{turn}",
                    metadata={"source": "api-bank", "file": rel, "turn": turn},
                )
            )
    return runs


def ingest_api_bank(
    path: Path,
    sf: Skillflow,
    user_id: str = DEFAULT_USER_ID,
    end: datetime | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Parse and store API-Bank dialogs (execution outcomes only: the corpus has no labels)."""
    runs = with_timestamps(parse_api_bank(path, sf.agent_id, user_id), end)
    tools = {s.tool for r in runs for s in r.steps}
    report = IngestReport("api-bank", sf.agent_id, user_id, "execution")
    return write_runs(sf, runs, report, tools, progress, (DEFAULT_AGENT_ID, DEFAULT_USER_ID))
