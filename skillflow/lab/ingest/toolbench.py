"""ToolBench DFSDT answer files → one run per file: the chosen path of the decision tree.

The chosen path is the last list of ``answer_generation.train_messages``: each assistant
``function_call`` is a step, its result the ``function`` message that follows. ``Finish`` is the
search's pseudo-function that ends a branch, not a tool: it is dropped. A call errs when the
observation's ``error`` field is non-empty. Files without ``train_messages`` (the search found no
answer) have no chosen path and are skipped with that reason.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from skillflow.kernel.models import RunInput, Step
from skillflow.lab.ingest.common import (
    DEFAULT_USER_ID,
    IngestReport,
    OutcomeMode,
    Progress,
    corpus_item,
    decode_arguments,
    decode_json,
    error_class_for,
    reward_evaluator,
    with_timestamps,
    write_runs,
)
from skillflow.runtime import Skillflow

DEFAULT_AGENT_ID = "toolbench"
FINISH = "Finish"
NO_PATH = "no chosen path (train_messages absent)"
# Observations are cut at 1,024 characters, so some are not valid JSON; the error field comes first.
_TRUNCATED_ERROR = re.compile(r'^\s*\{\s*"error"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _function_call(message: Mapping[str, Any]) -> Mapping[str, Any] | None:
    call = message.get("function_call")
    if isinstance(call, str):  # some exports store the call as a Python-literal string
        call = decode_json(call)
    return call if isinstance(call, Mapping) else None


def _step(call: Mapping[str, Any], reply: Mapping[str, Any] | None) -> Step:
    name = str(call.get("name") or "")
    arguments = decode_arguments(call.get("arguments"))
    if reply is None or reply.get("role") != "function":
        return Step(tool=name, arguments=arguments, error="no tool result recorded", error_class="Error:no_result")
    content = reply.get("content")
    result = decode_json(content)
    error = result.get("error") if isinstance(result, Mapping) else None
    if not isinstance(result, Mapping) and isinstance(content, str):
        match = _TRUNCATED_ERROR.match(content)
        error = decode_json(f'"{match.group(1)}"') if match else None
    if error:
        return Step(
            tool=name, arguments=arguments, result=result, error=str(error), error_class=error_class_for(str(error))
        )
    return Step(tool=name, arguments=arguments, result=result)


def chosen_path(messages: list[Mapping[str, Any]]) -> list[Step]:
    """The steps of one ``train_messages`` list, ``Finish`` dropped."""
    steps = []
    for i, message in enumerate(messages):
        call = _function_call(message) if message.get("role") == "assistant" else None
        if call is None or call.get("name") == FINISH:
            continue
        steps.append(_step(call, messages[i + 1] if i + 1 < len(messages) else None))
    return steps


def _answer_files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(p for p in path.rglob("*.json") if "answer" in p.parent.name)


def parse_toolbench(
    path: Path, agent_id: str = DEFAULT_AGENT_ID, user_id: str = DEFAULT_USER_ID
) -> tuple[list[RunInput], set[str], Counter[str]]:
    """Runs, every tool name seen (offered or called, ``Finish`` excluded), and skipped files by reason."""
    path = Path(path)
    runs: list[RunInput] = []
    tools: set[str] = set()
    skipped: Counter[str] = Counter()
    for file in _answer_files(path):
        with corpus_item(file.name):  # a value of another shape: one error naming the file
            doc = json.loads(file.read_text(encoding="utf-8"))
            gen = doc.get("answer_generation") if isinstance(doc, Mapping) else None
            if not isinstance(gen, Mapping):
                skipped["not an answer file"] += 1
                continue
            tools.update(str(f.get("name")) for f in gen.get("function") or [] if f.get("name") != FINISH)
            messages = gen.get("train_messages") or []
            if not messages:
                skipped[NO_PATH] += 1
                continue
            steps = chosen_path(messages[-1])
            tools.update(s.tool for s in steps)
            rel = file.relative_to(path.parent if path.is_file() else path).as_posix()
            group = file.parent.name.split("_")[0]
            runs.append(
                RunInput(
                    query=str(gen.get("query") or "").strip(),
                    agent_id=agent_id,
                    user_id=user_id,
                    steps=tuple(steps),
                    run_id=f"toolbench-{group}-{file.stem.split('_')[0]}-{hashlib.sha1(rel.encode()).hexdigest()[:8]}",
                    metadata={
                        "source": "toolbench",
                        "file": rel,
                        "win": bool(doc.get("win")),
                        "finish_type": gen.get("finish_type"),
                        "reward": 1.0 if doc.get("win") else 0.0,
                    },
                )
            )
    return runs, tools, skipped


def ingest_toolbench(
    path: Path,
    sf: Skillflow,
    outcome: OutcomeMode = "execution",
    user_id: str = DEFAULT_USER_ID,
    end: datetime | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Parse and store ToolBench answers; ``outcome="reward"`` applies the ``win`` label."""
    runs, tools, skipped = parse_toolbench(path, sf.agent_id, user_id)
    writer = replace(sf, workflow_outcome_evaluator=reward_evaluator if outcome == "reward" else None)
    report = IngestReport("toolbench", sf.agent_id, user_id, outcome, skipped=skipped)
    return write_runs(writer, with_timestamps(runs, end), report, tools, progress, (DEFAULT_AGENT_ID, DEFAULT_USER_ID))
