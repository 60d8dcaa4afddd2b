"""The CLI's error layer: an expected failure is one line on stderr, an exit code and no traceback."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.cli.errors import CliError
from skillflow.kernel.models import SkillStatus
from tests.support import first_line_then_leave
from tests.support.lifecycle import database_with_skill

DOWN_PREFECT = "http://127.0.0.1:9/api"  # nothing listens on port 9


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder outside any project, with no config variable set."""
    for name in ("SKILLFLOW_CONFIG_PATH", "SKILLFLOW_HOME", "SKILLFLOW_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args: str, **env: str) -> Result:
    return CliRunner().invoke(app, list(args), env=env or None)


def one_error(result: Result, code: int) -> str:
    """The single ``error:`` line on stderr; nothing on stdout, no traceback."""
    assert result.exit_code == code, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    return lines[0]


def test_database_urls_that_cannot_work(here: Path) -> None:
    line = one_error(run("skills", "--db", "nonsense://x"), 2)
    assert "'nonsense://x'" in line and "sqlite:///" in line
    assert "use sqlite:////tmp/foo.db" in one_error(run("skills", "--db", "/tmp/foo.db"), 2)
    line = one_error(run("skills", "--db", "postgresql://postgres@127.0.0.1:1/x"), 1)
    assert line.startswith("error: database error: ") and "port 1" in line and "--db" in line


@pytest.mark.postgres
def test_a_database_server_that_answered_is_not_asked_whether_it_runs(here: Path) -> None:
    """A new-user audit (2026-12-06): `skillflow skills --db postgresql://…/no_such_db` said `FATAL: database
    "no_such_db" does not exist (is the server running? …)`: the server had answered. That hint is for a connection
    refused or a host unreachable only."""
    from sqlalchemy.engine import make_url

    from tests.conftest import PG_SKIP_REASON, POSTGRES_DSN

    if not POSTGRES_DSN:
        pytest.skip(PG_SKIP_REASON)
    url = make_url(POSTGRES_DSN).set(database="no_such_db_skillflow").render_as_string(hide_password=False)
    line = one_error(run("skills", "--db", url), 1)
    assert 'database "no_such_db_skillflow" does not exist' in line and "--db" in line, line
    assert "is the server running" not in line, line
    refused = one_error(run("skills", "--db", "postgresql://postgres@127.0.0.1:1/x"), 1)
    assert "Connection refused" in refused and "is the server running?" in refused, refused


def test_a_command_that_needs_the_schema_refuses_a_database_file_that_does_not_exist(here: Path) -> None:
    """`skillflow skills --db sqlite:////tmp/nope_dir/x.db` made the folder and a 4 KiB database, then said it had
    no schema: a mistyped path left files behind. Only the commands that migrate create one."""
    missing = here / "nope_dir" / "x.db"
    url = f"sqlite:///{missing}"
    for command in (["skills"], ["status"], ["show", "deadbeef00"], ["classes"], ["simulate", "--runs", "1"]):
        line = one_error(run(*command, "--db", url), 2)
        assert f"database file {missing} does not exist" in line and f"skillflow migrate --db {url}" in line, line
        assert not missing.parent.exists(), command
    line = one_error(run("skills"), 2)  # the default, sqlite:///.skillflow/skillflow.db, in a new folder
    assert str(here / ".skillflow" / "skillflow.db") in line and not (here / ".skillflow").exists()
    assert run("migrate", "--db", url).exit_code == 0 and missing.is_file()
    result = run("skills", "--db", url)
    assert result.exit_code == 0 and "No skills yet" in result.stdout


def test_skills_with_a_filter_that_matches_none_says_so(here: Path) -> None:
    """`skillflow skills --status shadow` said "No skills yet (run `skillflow cycle`)" beside an active skill."""
    db, skill = database_with_skill(here / "x.db")
    result = run("skills", "--status", "shadow", "--status", "demoted", "--db", db)
    assert result.exit_code == 0 and "No skills yet" not in result.stdout
    assert "No skill matches --status shadow --status demoted" in " ".join(result.stdout.split())
    result = run("skills", "--agent-id", "b", "--db", db)
    assert result.exit_code == 0 and "No skill matches --agent-id b" in result.stdout
    assert skill.id[:12] in run("skills", "--status", "active", "--db", db).stdout


def test_config_file_problems(here: Path) -> None:
    bad = here / "bad.toml"
    bad.write_text("[promotion\nmin_executions = 3\n")
    assert f"{bad} is not valid TOML" in one_error(run("config", SKILLFLOW_CONFIG_PATH=str(bad)), 2)
    bad.write_text("[promotion]\nmin_sucess_rate = 0.5\n")
    line = one_error(run("config", SKILLFLOW_CONFIG_PATH=str(bad)), 2)
    assert f"promotion.min_sucess_rate ({bad} [promotion]): unknown setting" in line
    line = one_error(run("config", SKILLFLOW_CONFIG_PATH=str(here / "gone.toml")), 2)
    assert str(here / "gone.toml") in line and "SKILLFLOW_CONFIG_PATH" in line


def test_environment_problems(here: Path) -> None:
    line = one_error(run("config", SKILLFLOW_PROMOTION__MIN_EXECUTONS="3"), 2)
    assert "SKILLFLOW_PROMOTION__MIN_EXECUTONS): unknown setting" in line
    line = one_error(run("config", SKILLFLOW_PROMOTION__MIN_EXECUTIONS="many"), 2)
    assert "SKILLFLOW_PROMOTION__MIN_EXECUTIONS" in line and "integer" in line
    line = one_error(run("config", SKILLFLOW_EMBEDDER="bert"), 2)
    assert line.startswith("error: invalid environment variable: SKILLFLOW_EMBEDDER:")


def test_debug_shows_the_traceback(here: Path) -> None:
    for result in (
        run("--debug", "skills", "--db", "nonsense://x"),
        run("skills", "--db", "x://", SKILLFLOW_DEBUG="1"),
    ):
        assert result.exit_code == 1 and isinstance(result.exception, CliError)
        assert result.exc_info is not None and result.exc_info[2] is not None


def test_config_says_which_file_it_read(here: Path) -> None:
    result = run("config")
    assert result.exit_code == 0 and result.stdout.startswith("config file: none: built-in defaults")
    (here / "config").mkdir()
    (here / "config" / "skillflow.toml").write_text("[promotion]\nrequire_shadow = true\n")
    (here / "sub").mkdir()
    result = CliRunner().invoke(app, ["config", "--json"], catch_exceptions=False)
    assert '"config_file": "' + str(here / "config" / "skillflow.toml") in result.stdout


def test_a_reader_that_leaves_early_is_not_an_error(here: Path) -> None:
    """`skillflow migrate --print-oracle | head -1` printed "error: connection failed: [Errno 32] Broken pipe" and
    exited 1 (a BrokenPipeError is a ConnectionError); it now stops silently with 141 (128 + SIGPIPE)."""
    line, code, stderr = first_line_then_leave(
        [sys.executable, "-m", "skillflow.cli.main", "migrate", "--print-oracle"], cwd=here
    )
    assert line.startswith(b"-- ===== 001_")
    assert code == 141 and stderr == b"", stderr.decode()


@pytest.fixture
def down_prefect() -> Iterator[None]:
    from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    with temporary_settings({PREFECT_API_URL: DOWN_PREFECT, PREFECT_CLIENT_MAX_RETRIES: 0}):  # fail at once
        yield


def test_an_unreachable_prefect_api(here: Path, down_prefect: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", DOWN_PREFECT)
    db = f"sqlite:///{here / 'a.db'}"
    result = run("serve", "--db", db)  # serve deploys every flow
    assert result.exit_code == 1 and "Traceback" not in result.output
    warning, error = result.stderr.strip().splitlines()
    assert warning.startswith("warning: no config file found") and "require_shadow=False" in warning
    assert error.startswith(f"error: cannot reach the Prefect API at {DOWN_PREFECT}")
    result = run("cycle", "--db", db)  # a flow run in this process
    assert result.exit_code == 1 and result.stderr.strip().splitlines()[-1].startswith(
        f"error: cannot reach the Prefect API at {DOWN_PREFECT}"
    )


@pytest.mark.parametrize("api", ["not a url", "127.0.0.1:4200/api", "ftp://127.0.0.1/api", "http:///api"])
def test_status_says_a_prefect_api_that_is_not_a_url_is_not_one(here: Path, api: str) -> None:
    """A new-user audit (2026-12-06): `skillflow status --prefect-api "not a url"` said "the Prefect API at not a url
    did not answer". A value without an http(s) scheme and a host is bad input."""
    db, _ = database_with_skill(here / "x.db")
    line = one_error(run("status", "--prefect-api", api, "--db", db), 2)
    assert line.startswith(f"error: --prefect-api {api!r} is not a URL") and "http://" in line, line


def test_export_to_a_path_that_cannot_be_written(here: Path) -> None:
    db, _ = database_with_skill(here / "x.db")
    a_file = here / "notes.txt"
    a_file.write_text("x")
    for dest in (a_file, a_file / "skills"):  # a file where the folder should be; a folder under a file
        line = one_error(run("export", str(dest), "--db", db), 2)
        assert line.startswith("error: cannot use ") and str(a_file) in line
    taken = here / "out" / "cancel-reservation" / "SKILL.md"
    taken.mkdir(parents=True)  # a directory where SKILL.md goes
    assert str(taken) in one_error(run("export", str(here / "out"), "--db", db), 2)


def test_export_checks_its_destination_with_nothing_to_export(here: Path) -> None:
    """A new-user audit (2026-12-06): `skillflow export /proc/nope` with no skill to export said "exported 0
    skill(s) to /proc/nope" (exit 0), and errored only when there were skills. The destination is checked first."""
    db, _ = database_with_skill(here / "x.db", SkillStatus.SHADOW)  # `export` takes ACTIVE skills by default
    a_file = here / "notes.txt"
    a_file.write_text("x")
    for dest in (a_file, a_file / "skills"):
        line = one_error(run("export", str(dest), "--db", db), 2)
        assert line.startswith("error: cannot use ") and str(a_file) in line, line
    done = run("export", str(here / "out"), "--db", db)
    assert done.exit_code == 0 and "exported 0 skill(s)" in done.stdout and (here / "out").is_dir(), done.output


def test_edit_of_a_file_it_cannot_read_names_the_path_once(here: Path) -> None:
    """A new-user audit (2026-12-06): `skillflow edit ID --file missing.md` said "cannot read …/missing.md: [Errno 2]
    No such file or directory: '…/missing.md'", the path twice; `ingest` says "cannot read X: No such file or
    directory"."""
    db, skill = database_with_skill(here / "x.db", SkillStatus.SHADOW)
    missing = here / "missing.md"
    line = one_error(run("edit", skill.id, "--file", str(missing), "--db", db), 2)
    assert line == f"error: cannot read {missing}: No such file or directory", line


def test_refusals_and_unknown_ids_fail_with_code_1_and_usage_with_2(here: Path) -> None:
    """Found walking the README: `show` of an unknown id and `reject` of an active skill exited 2 (wrong input),
    `readiness` of an unknown id printed "not ready" and `distill` of an unknown class a report, both exit 0; a
    URL whose driver is missing gave a traceback."""
    db, skill = database_with_skill(here / "x.db")
    config = str(Path(__file__).resolve().parents[2] / "config" / "skillflow.toml")
    assert "not found" in one_error(run("show", "deadbeef00", "--db", db), 1)
    assert "not found" in one_error(run("readiness", "deadbeef00", "--db", db), 1)
    assert "rejected" in one_error(run("reject", skill.id, "--reason", "dup", "--db", db), 1)
    tenant = ("--agent-id", "a", "--user-id", "u", "--db", db)
    assert "at least 4" in one_error(run("distill", "ab", *tenant, SKILLFLOW_CONFIG_PATH=config), 2)
    assert "no trajectory class" in one_error(run("distill", "abcd", *tenant, SKILLFLOW_CONFIG_PATH=config), 1)
    line = one_error(run("skills", "--db", "mysql://u:s3cret@h/y"), 2)
    assert "driver is not installed" in line and "s3cret" not in line


def test_every_command_takes_a_skill_id_prefix_of_six_characters_or_more(here: Path) -> None:
    """A new-user audit (2026-12-06): `show` took a 1-character prefix while every other command needed 6, and a
    shorter unique prefix said "skill e4e1 not found" of a skill that exists. One rule now: a prefix of at least 6
    characters (or the whole id); a shorter one is bad input (exit 2) and says so."""
    db, skill = database_with_skill(here / "x.db", SkillStatus.SHADOW)
    short, prefix = skill.id[:4], skill.id[:6]
    commands = (
        ["show"], ["readiness"], ["history"], ["diff"], ["review"], ["activate"], ["edit", "--file", "none.md"],
        ["reject", "--reason", "r"], ["demote", "--reason", "r"], ["rollback", "--to", "1", "--reason", "r"],
    )  # fmt: skip
    for name, *rest in commands:
        line = one_error(run(name, short, *rest, "--db", db), 2)
        expected = f"error: skill id prefix {short} is too short: give at least 6 characters (or the whole id)"
        assert line == expected, (name, line)
    shown = run("show", prefix, "--db", db, "--json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["skill"]["id"] == skill.id, shown.output
    assert run("readiness", prefix, "--db", db).exit_code == 0
    assert "not found" in one_error(run("show", "f" * 32, "--db", db), 1)


def test_a_review_without_a_prefect_api_exits_2_with_its_hint(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new-user audit (2026-12-06): `skillflow review ID` with no PREFECT_API_URL printed how to start one and
    exited 0, while `serve`, `deploy` and `automations` exit 2: a script could not tell that no review started."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    db, skill = database_with_skill(here / "x.db", SkillStatus.SHADOW)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):  # a session harness may have set it
        line = one_error(run("review", skill.id, "--db", db), 2)
        as_json = run("review", skill.id, "--db", db, "--json")
    assert "PREFECT_API_URL is unset" in line and f"skillflow activate {skill.id}" in line, line
    assert as_json.exit_code == 2, as_json.output
    answer = json.loads(as_json.stdout)
    assert answer["started"] is False and answer["skill_id"] == skill.id and "PREFECT_API_URL" in answer["hint"]


def test_a_refused_move_names_the_status_with_its_article(here: Path) -> None:
    """`skillflow reject <active id>` said "cannot move a active skill"."""
    db, skill = database_with_skill(here / "x.db")
    line = one_error(run("reject", skill.id, "--reason", "dup", "--db", db), 1)
    assert "cannot move an active skill to rejected" in line
    db, skill = database_with_skill(here / "y.db", SkillStatus.DEMOTED)
    assert "cannot move a demoted skill to rejected" in one_error(
        run("reject", skill.id, "--reason", "x", "--db", db), 1
    )


@pytest.mark.parametrize(
    ("source", "name", "doc"),
    [
        ("tau-bench", "corpus.json", '[1, 2, "x"]'),
        ("tau-bench", "corpus.json", '[{"traj": 5}]'),
        ("tau-bench", "corpus.json", '[{"traj": [1, 2]}]'),
        ("tau-bench", "corpus.json", '[{"info": 5, "traj": [{"role": "user", "content": "hi"}]}]'),
        ("tau-bench", "corpus.json", '[{"traj": [{"role": "assistant", "tool_calls": 7}]}]'),
        ("toolbench", "G1_answer/1_x.json", '{"answer_generation": {"function": [5], "train_messages": [[1]]}}'),
        ("toolbench", "G1_answer/1_x.json", '{"answer_generation": {"train_messages": 5}}'),
        ("api-bank", "level-1/x-1.jsonl", "5\n[1]\n"),
    ],
)
def test_a_corpus_of_another_shape_is_one_error_line(
    here: Path, sqlite_template: Path, source: str, name: str, doc: str
) -> None:
    """Found by an outside audit: a τ-bench array of numbers, a ``traj`` that is not a list of messages, an ``info``
    that is not an object printed a traceback (exit 1); each corpus reader now names what it could not read."""
    target = here / "corpus" / name
    target.parent.mkdir(parents=True)
    target.write_text(doc, encoding="utf-8")
    given = here / "corpus" if source != "tau-bench" else target
    shutil.copyfile(sqlite_template, here / "x.db")
    text = one_error(run("ingest", source, str(given), "--db", f"sqlite:///{here / 'x.db'}"), 2)
    assert text.startswith(f"error: cannot read {source} corpus: "), text


@pytest.mark.parametrize(
    "url",
    [
        "postgresq://app:Zq81DbPassw0rd@db.example/skillflow",  # no such dialect
        "postgresql://app:Zq81DbPassw0rd@db.example:notaport/skillflow",  # not a URL SQLAlchemy parses
        "postgresql://app@db.example/skillflow?password=Zq81DbPassw0rd&sslmode=verify",
    ],
)
def test_a_database_password_is_never_printed(here: Path, url: str) -> None:
    """Found by an outside audit: ``skillflow config --json`` printed ``$SKILLFLOW_DATABASE_URL`` whole, and a
    ``--db`` SQLAlchemy cannot use was echoed whole in its error line; CLI output ends up in CI logs."""
    shown = run("config", "--json", SKILLFLOW_DATABASE_URL=url)
    assert "Zq81DbPassw0rd" not in shown.output
    if "notaport" not in url and "sslmode" not in url:
        assert json.loads(shown.stdout)["database_url"].startswith("postgresq://app:***@")
    error = run("skills", "--db", url)
    assert error.exit_code == (1 if "sslmode" in url else 2), error.output  # a URL it reads: no such host
    assert "Zq81DbPassw0rd" not in error.output and error.stderr.startswith("error: "), error.stderr


@pytest.mark.parametrize("version", ["v0", "0", "abc", "v", "²", "v-1"])
def test_rollback_names_a_version_it_cannot_read(here: Path, version: str) -> None:
    """``--to`` takes N or vN (``diff`` and ``history`` write versions as vN; an outside audit's ``--to v1`` got a
    usage box saying "not a valid integer")."""
    text = one_error(run("rollback", "abcd1234", "--to", version, "--reason", "r", "--db", "sqlite:///x.db"), 2)
    assert text.startswith("error: --to ") and "N or vN" in text, text


@pytest.mark.prefect
def test_a_failed_partition_is_one_error_line_without_prefect_s_traceback(tmp_path: Path) -> None:
    """An outside audit (2026-12-06): with the provider down past every retry, `skillflow cycle` printed Prefect's
    17-line traceback of ``PartitionsFailed`` (its flow engine logs the flow's exception) before its own line."""
    import os
    import subprocess
    import sys

    from tests.support.promotion import seed_cancels

    db = f"sqlite:///{tmp_path / 'x.db'}"
    seed_cancels(db, "u1")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SKILLFLOW_", "PREFECT_API_URL"))},
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "SKILLFLOW_DISTILLER": "openai",
        "SKILLFLOW_OPENAI_API_KEY": "sk-test",
        "SKILLFLOW_LLM_BASE_URL": "http://127.0.0.1:9/v1",  # nothing listens: a connection error, transient
        "SKILLFLOW_LLM_MAX_RETRIES": "0",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "skillflow.cli.main", "cycle", "--db", db, "--force"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "error: 1 of 1 partition(s) failed" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "Encountered exception during execution" in proc.stderr  # Prefect's line stays, without the traceback
