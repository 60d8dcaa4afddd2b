"""The README keeps its promises: the two commands first, every CLI command, flow and setting documented."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from skillflow.cli import app
from skillflow.cli.commands.config_cmd import settings_markdown
from skillflow.kernel.config import PromotionConfig, Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> list[str]:
    group = typer.main.get_command(app)
    names = []
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        if hasattr(cmd, "commands"):
            names += [f"{name} {sub}" for sub in cmd.commands]
        else:
            names.append(name)
    return names


def test_first_two_commands_are_make_demo_then_make_test() -> None:
    commands = re.findall(r"^\s*(?:\$ )?(make [a-z-]+)", README, flags=re.MULTILINE)
    assert commands[:2] == ["make demo", "make test"]


def test_every_cli_command_is_documented() -> None:
    missing = []
    for name in _commands():
        if name.startswith("bench "):
            if name.split()[1] not in README or "skillflow bench" not in README:
                missing.append(name)
        elif f"skillflow {name}" not in README:
            missing.append(name)
    assert not missing, f"undocumented commands: {missing}"


def test_every_flow_is_documented() -> None:
    flows = sorted(p.stem for p in (ROOT / "flows").glob("*.py") if p.stem not in ("__init__", "serve"))
    assert flows, "no flows found"
    missing = [f for f in flows if f"`{f.replace('_', '-')}`" not in README]
    assert not missing, f"undocumented flows: {missing}"


def test_settings_table_is_in_step_with_the_models() -> None:
    assert settings_markdown() in README
    for name in PromotionConfig.model_fields:
        assert f"`{name}`" in README
    for name in Settings.model_fields:
        assert f"SKILLFLOW_{name.upper()}" in README


def test_ci_runs_make_test() -> None:
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_make_ui_and_the_fleet_docs_start_the_server_with_the_projects_server_env() -> None:
    """`make ui` starts its server as the fleet harness and `make ui-check` do (``SERVER_ENV``: leases on file),
    and the README and the operations guide tell an operator the same setting for a fleet's server."""
    from skillflow.lab.fleet import SERVER_ENV

    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    ops = (ROOT / "docs" / "guide" / "ops.md").read_text(encoding="utf-8")
    for name, value in SERVER_ENV.items():
        assert f"ui: export {name} ?= {value}\n" in makefile
        assert f"{name}={value} prefect server start" in README
        assert f"{name}={value}" in ops
