"""``skillflow context``: the exact request a model would receive for a query, and the skill ids in it."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.panel import Panel
from rich.text import Text

from skillflow.cli.app import DbOption, JsonOption, app, console, engine_for, fail, print_json
from skillflow.cli.terminal import safe, visible
from skillflow.injection.conversation import Conversation
from skillflow.injection.prompting import PROVIDERS, assemble, to_provider


def _messages(path: Path) -> list[dict[str, Any]]:
    """The conversation so far: a JSON list of OpenAI chat messages (the earlier turns and tool calls)."""
    try:
        messages = jsonlib.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        fail(f"{path} is not valid JSON: {exc}")
    if not isinstance(messages, list):
        fail(f"{path}: expected a JSON list of chat messages")
    return [m for m in messages if isinstance(m, dict)]


@app.command("context")
def context_command(
    query: Annotated[str, typer.Argument(help="The incoming user request.")],
    agent_id: Annotated[str, typer.Option("--agent-id", help="The agent (exact tenant scope).")],
    user_id: Annotated[str, typer.Option("--user-id", help="The user (exact tenant scope).")],
    provider: Annotated[
        str, typer.Option("--provider", help="Request shape: openai, anthropic, ollama or openai-compatible.")
    ] = "openai",
    system_prompt: Annotated[
        str | None, typer.Option("--system-prompt", help="The application's own system prompt (placed first).")
    ] = None,
    conversation: Annotated[
        Path | None,
        typer.Option(
            "--conversation", help="JSON list of the chat messages so far (earlier turns, tool calls already made)."
        ),
    ] = None,
    db: DbOption = None,
    json: JsonOption = False,
) -> None:
    """Print the request ``prepare`` would build for QUERY: the tenant's fitted rule or threshold picks the skill."""
    if provider not in PROVIDERS:
        fail(f"--provider must be one of {', '.join(PROVIDERS)}, got {provider!r}")
    from skillflow.runtime import Skillflow

    so_far = Conversation.from_messages(_messages(conversation)) if conversation is not None else None
    sf = Skillflow(agent_id=agent_id, engine=engine_for(db), continual_learning=True)
    try:  # the selection prepare() makes; unlike prepare() in an agent, a failure is shown
        selection = sf.select_skills(query, user_id, so_far)
    except Exception as exc:  # noqa: BLE001 - reported to the operator, not swallowed
        fail(f"skill selection failed: {type(exc).__name__}: {exc}")
    assembled = assemble(query, skills=selection.skills, system_prompt=system_prompt)
    request = to_provider(assembled, provider)
    if json:
        print_json(
            {
                "provider": provider,
                "request": request,
                "selection": {"state": selection.state, "reason": selection.reason},
                "skill_ids": list(assembled.skill_ids),
                "skills": [
                    {"id": s.skill_id, "name": s.name, "version": s.version, "score": s.score, "role": s.injection_role}
                    for s in assembled.skills
                ],
            }
        )
        return
    if "system" in request:
        system = Text(visible(request["system"], multiline=True))
        console.print(Panel(system, title="system (top-level parameter)", expand=False))
    for i, message in enumerate(request["messages"]):
        content = Text(visible(message.get("content", ""), multiline=True))
        console.print(Panel(content, title=f"{i}: {safe(message['role'])}", expand=False))
    console.print(visible(f"selection: {selection.state} ({selection.reason})"), markup=False)
    if not assembled.skills:
        console.print("activated skill ids: none")
        return
    console.print("activated skill ids (pass to record_run(skills_activated=...)):")
    for s in assembled.skills:
        name, role = safe(s.name), safe(s.injection_role)
        console.print(f"  {safe(s.skill_id)}  {name} v{s.version}  match {s.score:.2f}  authority {role}")
