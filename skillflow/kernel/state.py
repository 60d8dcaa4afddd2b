"""Which tools change state: a declared per-tool flag, else the tool-name verb rule (docs/guide/runtime.md).

A tool is read-only when the first token of its name (split on ``_``, ``-``, ``.`` or a camelCase boundary,
lowercased) is a READ verb; ``think`` is a no-op and reads nothing. Every other name changes state, including
an unknown verb: a boundary too many only splits a procedure, a missed write merges two procedures into one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

READ_VERBS: frozenset[str] = frozenset(
    (
        "get", "list", "search", "find", "calculate", "think", "lookup", "look", "read", "fetch", "query",
        "check", "validate", "verify", "count", "describe", "show", "view", "retrieve", "compute", "estimate",
        "preview", "browse", "explain",
    )
)  # fmt: skip
# For documentation only: any verb that is not a READ verb changes state.
WRITE_VERBS: tuple[str, ...] = (
    "book", "cancel", "update", "send", "create", "delete", "remove", "modify", "transfer", "pay", "refund", "add",
    "set", "post", "put", "patch", "submit", "insert", "write", "upload", "approve", "reject", "close", "open",
    "assign", "issue", "charge", "reserve", "register", "schedule", "exchange", "return", "apply", "change", "edit",
    "move", "rename", "grant", "revoke", "enable", "disable",
)  # fmt: skip
NOOP_TOOLS: frozenset[str] = frozenset(("think",))
_SPLIT = re.compile(r"[_\-.]|(?<=[a-z])(?=[A-Z])")


def verb(tool: str) -> str:
    """The first token of a tool name, lowercased: ``getUserDetails`` → ``get``, ``book_reservation`` → ``book``."""
    return _SPLIT.split(tool.strip(), maxsplit=1)[0].lower()


def changes_state(tool: str, declared: Mapping[str, bool] | None = None) -> bool:
    """Whether ``tool`` changes state: the declared flag when there is one, else the verb rule."""
    name = tool.strip()
    if declared is not None and name in declared:
        return bool(declared[name])
    if name in NOOP_TOOLS:
        return False
    return verb(name) not in READ_VERBS
