"""A default install (no dev extras) can run every command: the CLI imports no dev-only package."""

from __future__ import annotations

import subprocess
import sys

DEV_ONLY = ("sqlglot", "hypothesis", "pytest", "nbclient", "nbformat", "skills_ref", "ruff", "mypy")


def test_cli_loads_without_dev_extras() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name.split('.')[0] in {DEV_ONLY!r}:\n"
        "            raise ImportError('dev-only package ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from skillflow.cli import app\n"
        "import typer.main\n"
        "group = typer.main.get_command(app)\n"
        "assert 'demo' in group.commands and 'migrate' in group.commands\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
