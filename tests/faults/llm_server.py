"""The scripted local LLM server (tests/support/fake_llm_server.py), routed per trajectory class, with raw bodies.

A cycle distils several classes, possibly in parallel partitions, so one FIFO script cannot say which
answer goes to which class. Here each request is routed by a marker (a tool name) in the signature of the
evidence it carries to that class's own script (the shared server's ``next_reply`` hook; raw-byte replies
such as malformed JSON or an empty body are the shared server's ``Raw``).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from tests.support.fake_llm_server import FakeLLMServer, Raw, Reply


def _signature_tools(body: dict[str, Any]) -> list[str]:
    """The tools of the class's signature, from the evidence in the last message (the toolbox lists them all)."""
    try:
        sent = json.loads(body["messages"][-1]["content"])
        return [str(unit["tool"]) for unit in sent["evidence"]["signature"]]
    except (KeyError, IndexError, TypeError, ValueError):
        return []


class RoutedLLMServer(FakeLLMServer):
    """``with RoutedLLMServer() as srv: srv.route("refund_429", Reply(status=429), Reply("…"))``."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[str, deque[Reply | Raw]] = {}

    def next_reply(self, body: dict[str, Any]) -> Reply | Raw:
        """The next reply of the class whose signature holds a routed marker (a 500 when none is left)."""
        tools = _signature_tools(body)
        marker = next((m for m in self.routes if m in tools), None)
        script = self.routes.get(marker) if marker else None
        return script.popleft() if script else Reply(status=500)

    def route(self, marker: str, *replies: Reply | Raw) -> None:
        with self._lock:
            self.routes.setdefault(marker, deque()).extend(replies)

    def requests_for(self, marker: str) -> int:
        """How many requests the class whose signature holds ``marker`` sent."""
        return sum(1 for r in self.received if marker in _signature_tools(r.body))
