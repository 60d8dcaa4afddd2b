"""The scripted local LLM server (tests/support/fake_llm_server.py), routed per trajectory class, with raw bodies.

A cycle distils several classes, possibly in parallel partitions, so one FIFO script cannot say which
answer goes to which class. Here each request is routed by a marker (a tool name) in the signature of the
evidence it carries to that class's own script, and a reply may be raw bytes (malformed JSON, an empty
body) that the shared server never sends. Requests are recorded exactly as the shared server records them.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.fake_llm_server import FakeLLMServer, Received, Reply, _openai_body


def _signature_tools(body: dict[str, Any]) -> list[str]:
    """The tools of the class's signature, from the evidence in the last message (the toolbox lists them all)."""
    try:
        sent = json.loads(body["messages"][-1]["content"])
        return [str(unit["tool"]) for unit in sent["evidence"]["signature"]]
    except (KeyError, IndexError, TypeError, ValueError):
        return []


@dataclass(frozen=True)
class Raw:
    """A 200 answer whose body is these bytes, whatever they are."""

    body: bytes
    status: int = 200


class RoutedLLMServer(FakeLLMServer):
    """``with RoutedLLMServer() as srv: srv.route("refund_429", Reply(status=429), Reply("…"))``."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[str, deque[Reply | Raw]] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode("utf-8")
                body = json.loads(raw) if raw else {}
                with server._lock:
                    server.received.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw)
                    )
                    tools = _signature_tools(body)
                    marker = next((m for m in server.routes if m in tools), None)
                    script = server.routes.get(marker) if marker else None
                    reply: Reply | Raw = script.popleft() if script else Reply(status=500)
                if isinstance(reply, Reply) and reply.delay:
                    time.sleep(reply.delay)
                if isinstance(reply, Raw):
                    status, data, headers = reply.status, reply.body, {}
                else:
                    payload = _openai_body(reply, str(body.get("model", "")))
                    status, data, headers = reply.status, json.dumps(payload).encode("utf-8"), reply.headers
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout)

        self._httpd.RequestHandlerClass = Handler

    def route(self, marker: str, *replies: Reply | Raw) -> None:
        with self._lock:
            self.routes.setdefault(marker, deque()).extend(replies)

    def requests_for(self, marker: str) -> int:
        """How many requests the class whose signature holds ``marker`` sent."""
        return sum(1 for r in self.received if marker in _signature_tools(r.body))
