"""An agent-only install (README, "Installing": no pipeline extra, so no typer) can create its schema.

The runtime refuses a database without the schema and names ``skillflow migrate``; the console script must
run that command there too, and say which extra any other command needs in one line instead of a traceback.
The pipeline's modules are blocked in a subprocess, and the console script is loaded as installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from tests.support import first_line_then_leave

PIPELINE_ONLY = ("typer", "rich", "click", "prefect", "great_expectations", "openai", "anthropic", "sklearn")


def _skillflow(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The ``skillflow`` console script's entry point, called as installed, without the pipeline's modules."""
    return subprocess.run(_argv(*args), capture_output=True, text=True, cwd=cwd, timeout=120)


def _argv(*args: str) -> list[str]:
    code = (
        "import sys\n"
        "from importlib.metadata import entry_points\n"
        "class Block:\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name.split('.')[0] in {PIPELINE_ONLY!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "(ep,) = [e for e in entry_points(group='console_scripts') if e.name == 'skillflow']\n"
        f"sys.argv = ['skillflow', *{list(args)!r}]\n"
        "sys.exit(ep.load()())\n"
    )
    return [sys.executable, "-c", code]


def test_migrate_runs_without_the_pipeline_and_the_runtime_then_records(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    done = _skillflow("migrate", "--db", url, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["applied"] and out["current"] == []
    again = json.loads(_skillflow("migrate", "--db", url, "--json", cwd=tmp_path).stdout)
    assert again["applied"] == [] and again["current"] == out["applied"]

    from skillflow.runtime import Skillflow

    sf = Skillflow(agent_id="support-agent", database_url=url)
    result = sf.record_run("refund my order", "alice", [{"tool": "lookup_order", "args": {}, "result": {}}])
    assert result.stored and not result.spooled
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("select count(*) from workflow_memory")).scalar() == 1
    engine.dispose()


def test_another_command_names_the_extra_in_one_line(tmp_path: Path) -> None:
    done = _skillflow("cycle", "--force", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
    assert "pipeline" in done.stderr and "skillflow migrate" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_database_url_is_one_line_without_the_pipeline(tmp_path: Path) -> None:
    done = _skillflow("migrate", "--db", str(tmp_path / "agent.db"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "sqlite:///" in done.stderr and "Traceback" not in done.stderr


def test_help_without_the_pipeline_lists_what_it_can_run(tmp_path: Path) -> None:
    done = _skillflow("--help", cwd=tmp_path)
    assert done.returncode == 0 and "migrate" in done.stdout and "pipeline" in done.stdout


def test_with_the_pipeline_the_console_script_is_the_whole_cli() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "skillflow"]
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; from {ep.module} import {ep.attr} as m; sys.argv=['skillflow','--help']; m()",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "demo" in done.stdout and "activate" in done.stdout


def test_a_reader_that_leaves_early_is_not_an_error_without_the_pipeline(tmp_path: Path) -> None:
    """``migrate --print-oracle | head -1`` said "connection failed: [Errno 32] Broken pipe" here too (exit 1)."""
    line, code, stderr = first_line_then_leave(_argv("migrate", "--print-oracle"), cwd=tmp_path)
    assert line.startswith(b"-- ===== 001_")
    assert code == 141 and stderr == b"", stderr.decode()


def test_debug_shows_the_traceback_without_the_pipeline(tmp_path: Path) -> None:
    """``--debug`` (as the whole CLI's) keeps the traceback of a failure; a command it cannot run stays one line."""
    done = _skillflow("--debug", "migrate", "--db", str(tmp_path / "x.db"), cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" in done.stderr, done.stderr
    done = _skillflow("--debug", "cycle", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "`skillflow cycle`" in done.stderr
