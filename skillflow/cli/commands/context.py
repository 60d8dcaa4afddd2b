"""``skillflow context``: the exact request a model would receive for a query, and the skill ids in it."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.panel import Panel
from rich.text import Text

from skillflow.cli.app import DbOption, JsonOption, app, console, engine_for, fail, print_json
from skillflow.injection.prompting import PROVIDERS, assemble, to_provider


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
    db: DbOption = None,
    json: JsonOption = False,
) -> None:
    """Print the request ``prepare`` would build for QUERY (ACTIVE skills of exactly this agent and user)."""
    if provider not in PROVIDERS:
        fail(f"--provider must be one of {', '.join(PROVIDERS)}, got {provider!r}")
    from skillflow.runtime import Skillflow

    sf = Skillflow(agent_id=agent_id, engine=engine_for(db), continual_learning=True)
    try:
        skills = sf.retrieve_skills(query, user_id)  # unlike prepare() in an agent, errors are shown
    except Exception as exc:  # noqa: BLE001 - reported to the operator, not swallowed
        fail(f"retrieval failed: {type(exc).__name__}: {exc}")
    assembled = assemble(query, skills=skills, system_prompt=system_prompt)
    request = to_provider(assembled, provider)
    if json:
        print_json(
            {
                "provider": provider,
                "request": request,
                "skill_ids": list(assembled.skill_ids),
                "skills": [
                    {"id": s.skill_id, "name": s.name, "version": s.version, "score": s.score, "role": s.injection_role}
                    for s in assembled.skills
                ],
            }
        )
        return
    if "system" in request:
        console.print(Panel(Text(request["system"]), title="system (top-level parameter)", expand=False))
    for i, message in enumerate(request["messages"]):
        console.print(Panel(Text(str(message.get("content", ""))), title=f"{i}: {message['role']}", expand=False))
    if not assembled.skills:
        console.print("activated skill ids: none (no ACTIVE skill of this tenant matched)")
        return
    console.print("activated skill ids (pass to record_run(skills_activated=...)):")
    for s in assembled.skills:
        console.print(f"  {s.skill_id}  {s.name} v{s.version}  match {s.score:.2f}  authority {s.injection_role}")
