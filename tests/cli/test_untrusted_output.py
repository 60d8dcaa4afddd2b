"""Untrusted stored values reach the operator's terminal as literal, visible text (docs/SECURITY.md).

Tool names and sequences recorded from agent runs, queries, reviewers' ``--reason``/``--actor``, demotion reasons,
judge reasons, skill names, descriptions and contents, tenant ids: none of them is Rich markup (``[/]`` must not
crash a command, ``[conceal]`` must not hide text, ``[link=…]`` must not make a link, ``:skull:`` must not become
an emoji) and none may send a control character to the terminal (ESC sequences, OSC 8 links, bidi overrides):
each is shown as an escape (``\\x1b``, ``\\u202e``). ``--json`` keeps the exact stored data.

Every value is planted straight into the database (what an older version, an import or another writer may have
stored), so the test does not depend on what capture or the lifecycle accept today.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, update
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.kernel.models import utcnow
from skillflow.lifecycle.decisions import demote_skill
from skillflow.promotion import cycle
from skillflow.promotion.report import GateRow, PromotionReport
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import metadata, skill_events, skillbox, workflow_memory
from tests.support.promotion import AGENT, agent, cancel_history, record_cancel

# payload -> how the operator must see it
PAYLOADS: dict[str, tuple[str, str]] = {
    "close-tag": ("lookup[/]", "lookup[/]"),
    "style": ("[bold green]security-team (approved)[/]", "[bold green]security-team (approved)[/]"),
    "conceal": ("cancel[conceal] (hidden)[/conceal]", "cancel[conceal] (hidden)[/conceal]"),
    "link": ("[link=http://evil.example]click[/link]", "[link=http://evil.example]click[/link]"),
    "emoji": (":skull: :warning:", ":skull: :warning:"),
    "backslash": ("end\\", "end\\"),
    "escaped-tag": ("a\\[bold]b", "a\\[bold]b"),
    "esc": ("a\x1b[8mhidden\x1b[0m", "a\\x1b[8mhidden\\x1b[0m"),
    "osc8": (
        "\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\",
        "\\x1b]8;;http://evil.example\\x1b\\link\\x1b]8;;\\x1b\\",
    ),
    "bidi": ("abc\u202egnp.exe", "abc\\u202egnp.exe"),
    "zero-width": ("ad\u200bmin\u2066x", "ad\\u200bmin\\u2066x"),
    "c1-del": ("x\x9b31my\x7fz\x07", "x\\x9b31my\\x7fz\\x07"),
    "newline": ("one\ntwo\rthree", "one\\ntwo\\rthree"),
}
RAW = ("\x1b", "\x9b", "\x07", "\x7f", "\u202e", "\u200b", "\u2066")
FIELDS = ("agent", "user", "tool", "query", "name", "description", "demotion", "actor", "reason", "editor", "content")


def value(field: str, payload: str) -> str:
    return f"{field} {payload}"


def plant(url: str, payload: str) -> str:
    """A tenant with one demoted skill (events, two revisions) whose every untrusted column holds ``payload``."""
    engine, sf = cancel_history(url)
    [skill_id] = cycle.run_partition(engine, AGENT, "u1", sf.config).promoted
    demote_skill(engine, skill_id, "placeholder reason", actor="placeholder-actor")
    for i in range(10, 12):  # runs after the demotion: the class is listed again
        record_cancel(sf, "u1", i, when=utcnow() + timedelta(seconds=i))
    v = {field: value(field, payload) for field in FIELDS}
    now = utcnow()
    with engine.begin() as conn:
        conn.execute(update(workflow_memory).values(tool_sequence=v["tool"], query=v["query"]))
        conn.execute(update(metadata.tables["class_stats"]).values(tool_sequence=v["tool"]))
        conn.execute(
            update(skillbox).values(
                name=v["name"], description=v["description"], demotion_reason=v["demotion"], tools=[v["tool"]],
                content=f"---\nname: cancel\n---\n# Steps\n\n1. {v['content']}\n",
            )
        )  # fmt: skip
        conn.execute(update(skill_events).values(actor=v["actor"], reason=v["reason"]))
        for revision in (1, 2):
            conn.execute(
                insert(metadata.tables["skill_revisions"]).values(
                    skill_id=skill_id, revision=revision, agent_id=AGENT, user_id="u1", name=v["name"],
                    description=v["description"], content=v["content"], editor=v["editor"], reason=v["reason"],
                    created_at=now + timedelta(seconds=revision),
                )
            )  # fmt: skip
        for table in metadata.tables.values():
            if "agent_id" in table.c:
                conn.execute(update(table).where(table.c.agent_id == AGENT).values(agent_id=v["agent"]))
            if "user_id" in table.c:
                conn.execute(update(table).where(table.c.user_id == "u1").values(user_id=v["user"]))
    engine.dispose()
    return skill_id


@pytest.fixture(scope="module", params=sorted(PAYLOADS))
def planted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    payload, shown = PAYLOADS[request.param]
    url = f"sqlite:///{tmp_path_factory.mktemp('untrusted') / 'skillflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKILLFLOW_EMBEDDER", "hashing")
        skill_id = plant(url, payload)
    yield {"url": url, "skill_id": skill_id, "payload": payload, "shown": shown}


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's consoles 500 columns wide, whatever COLUMNS was when they were made: no value is folded."""
    cli_app = importlib.import_module("skillflow.cli.app")  # the module (``skillflow.cli.app`` is the Typer app)
    for console in (cli_app.console, cli_app.err_console):
        monkeypatch.setattr(console, "_width", 500)


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"SKILLFLOW_EMBEDDER": "hashing"})


def assert_shown(output: str, shown: str, fields: tuple[str, ...]) -> None:
    for field in fields:
        if field == "content":  # a SKILL.md keeps its line breaks (each line shown in the panel)
            lines = value(field, shown).replace("\\n", "\n").splitlines()
            assert all(line in output for line in lines), f"{field} not shown literally:\n{output}"
            continue
        assert value(field, shown) in output, f"{field} not shown literally:\n{output}"
    for ch in RAW:
        assert ch not in output, f"raw {ch!r} reached the terminal:\n{output!r}"


# command -> fields whose value it must show
COMMANDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "classes": (("classes",), ("agent", "user", "tool")),
    "events": (("events",), ("agent", "user", "actor", "reason")),
    "show": (("show", "{id}"), ("agent", "user", "name", "demotion", "tool", "actor", "reason", "content")),
    "history": (("history", "{id}"), ("actor", "reason", "editor")),
    "skills": (("skills",), ("agent", "user", "name")),
    "status": (("status",), ("agent", "user")),
    "export": (("export", "{dir}", "--status", "demoted"), ()),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_untrusted_value_is_shown_literally(planted: dict[str, Any], command: str, tmp_path: Path) -> None:
    args, fields = COMMANDS[command]
    argv = [a.format(id=planted["skill_id"], dir=tmp_path / "out") for a in args]
    result = run(*argv, "--db", planted["url"])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    assert_shown(result.output, planted["shown"], fields)


@pytest.mark.parametrize("command", ["classes", "events", "show", "history", "skills", "status"])
def test_json_keeps_the_exact_stored_value(planted: dict[str, Any], command: str) -> None:
    args, fields = COMMANDS[command]
    argv = [a.format(id=planted["skill_id"]) for a in args]
    result = run(*argv, "--db", planted["url"], "--json")
    assert result.exit_code == 0, result.output
    text = json.dumps(json.loads(result.stdout))
    for field in fields:
        if field != "content":
            assert json.dumps(value(field, planted["payload"]))[1:-1] in text, field


def test_one_tenants_tool_name_does_not_take_down_the_all_tenants_view(tmp_path: Path) -> None:
    """The tester's case: a second tenant with a clean tool sequence is still listed next to a hostile one."""
    url = f"sqlite:///{tmp_path / 'two.db'}"
    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine)
    for user in ("good", "evil"):
        for i in range(3):
            record_cancel(sf, user, i)
    with engine.begin() as conn:
        conn.execute(
            update(workflow_memory).where(workflow_memory.c.user_id == "evil").values(tool_sequence="lookup[/]")
        )
        stats = metadata.tables["class_stats"]
        conn.execute(update(stats).where(stats.c.user_id == "evil").values(tool_sequence="lookup[/]"))
    engine.dispose()
    result = run("classes", "--db", url)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    assert "lookup[/]" in result.output and "get_reservation_details" in result.output


def report_with(v: str) -> PromotionReport:
    gate = GateRow(
        hash="abcdef123456", canonical_hash="abcdef123456" * 4, executions=6, success_rate=1.0, distinct_queries=6,
        last_seen_days=0, checks={"executions": True}, score=0.5, decision=f"decision {v}", reason=f"gate {v}",
    )  # fmt: skip
    return PromotionReport(
        agent_id=f"agent {v}", user_id=f"user {v}", cycle=1, promoted=[f"promoted {v}"],
        rejected=[("abcdef123456", [f"judge: {v}", f"second {v}"])], skipped=[("abcdef123456", f"skipped {v}")],
        deprecated=[(f"sk {v}", f"deprecated {v}")], review_flags=[f"flag {v}"], gates=[gate],
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_a_cycle_report_shows_judge_reasons_literally(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    from skillflow.cli.commands.promotion import print_report

    payload, shown = PAYLOADS[name]
    print_report(report_with(payload))
    out = capsys.readouterr().out
    for label in ("agent", "user", "promoted", "judge:", "second", "skipped", "sk", "deprecated", "flag", "decision"):
        assert f"{label} {shown}" in out, f"{label}:\n{out}"
    assert not any(ch in out for ch in RAW), repr(out)
    skipped = report_with(payload).model_copy(update={"partition_skipped": f"why {payload}"})
    print_report(skipped)
    out = capsys.readouterr().out
    assert f"why {shown}" in out and not any(ch in out for ch in RAW), repr(out)


def test_a_reviewers_reason_and_actor_from_the_cli(tmp_path: Path) -> None:
    """The tester's case end to end: ``reject --reason … --actor …`` then ``events``, ``show``, ``history``."""
    from tests.support.promotion import config

    url = f"sqlite:///{tmp_path / 'review.db'}"
    engine, _ = cancel_history(url)
    [skill_id] = cycle.run_partition(engine, AGENT, "u1", config(require_shadow=True)).promoted
    engine.dispose()
    actor = "[bold green]security-team (approved)[/]"
    result = run("reject", skill_id, "--reason", "duplicate of another skill [/]", "--actor", actor, "--db", url)
    assert result.exit_code == 0, result.output
    assert "rejected" in result.output
    for command in (["events"], ["show", skill_id], ["history", skill_id]):
        result = run(*command, "--db", url)
        assert result.exit_code == 0, f"{command}: {result.output}\n{result.exception!r}"
        assert actor in result.output and "[/]" in result.output, result.output


@pytest.mark.prefect
@pytest.mark.slow
def test_cycle_with_a_judge_answering_markup(prefect_harness: None, tmp_path: Path) -> None:
    """The tester's case: ``skillflow cycle`` whose LLM judge rejects with ``[/]`` in its reason exits 0."""
    from tests.support.fake_llm_server import FakeLLMServer, Reply
    from tests.support.promotion import seed_cancels

    url = f"sqlite:///{tmp_path / 'cycle.db'}"
    seed_cancels(url, "u1")
    reason = "judge: procedure fine [/]"
    with FakeLLMServer() as server:
        server.script(Reply(json.dumps({"verdict": "reject", "reasons": [reason]})))
        env = {
            "SKILLFLOW_EMBEDDER": "hashing",
            "SKILLFLOW_DISTILLER": "offline",
            "SKILLFLOW_JUDGE": "openai",
            "SKILLFLOW_LLM_BASE_URL": server.openai_base_url,
            "SKILLFLOW_OPENAI_API_KEY": "sk-test",
            "SKILLFLOW_LLM_MAX_RETRIES": "0",
        }
        result = CliRunner().invoke(app, ["cycle", "--db", url, "--set", "require_shadow=true"], env=env)
        assert server.received, "the judge was not asked"
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    assert "procedure fine [/]" in result.output


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain ascii [not markup]", "plain ascii [not markup]"),
        ("café — naïve ✓", "café — naïve ✓"),
        ("tag\U000e0041\U000e0042", "tag\\U000e0041\\U000e0042"),
        ("line\u2028sep\u2029", "line\\u2028sep\\u2029"),
        ("lone \udc80 surrogate", "lone \\udc80 surrogate"),
        ("nel\x85 nul\x00", "nel\\x85 nul\\x00"),
    ],
)
def test_visible_shows_every_control_character(raw: str, shown: str) -> None:
    from skillflow.cli.terminal import visible

    assert visible(raw) == shown


def test_multiline_keeps_line_breaks_and_tabs_only() -> None:
    from skillflow.cli.terminal import safe, visible

    assert visible("a\n\tb\r\x1b", multiline=True) == "a\n\tb\\r\\x1b"
    assert visible("a\n\tb") == "a\\n\\tb"
    assert safe("[red]x[/red] end\\") == "\\[red]x\\[/red] end\\\\"
