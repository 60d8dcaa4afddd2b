"""``skillflow`` command line: every module in ``skillflow.cli.commands`` registers its commands."""

from __future__ import annotations

import importlib
import pkgutil

from skillflow.cli import commands
from skillflow.cli.app import app

for _mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
    importlib.import_module(f"{commands.__name__}.{_mod}")

__all__ = ["app"]
