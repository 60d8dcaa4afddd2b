"""A local 127.0.0.1 HTTP server speaking the OpenAI chat-completions and Anthropic messages APIs.

It records the JSON body of every request it receives (so tests assert on the wire, after the real SDK
clients serialized the request) and answers from a script of replies, then with a plain text answer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class FakeProvider:
    port: int = 0
    requests: list[Recorded] = field(default_factory=list)
    # Scripted OpenAI assistant messages (dicts with "content" and/or "tool_calls"), consumed in order; an entry
    # {"status": 500} answers that HTTP error instead (the provider failing mid-loop).
    openai_script: list[dict[str, Any]] = field(default_factory=list)

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bodies(self, path_suffix: str) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if r.path.endswith(path_suffix)]


def _openai_reply(body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    msg = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        msg["tool_calls"] = message["tool_calls"]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _anthropic_reply(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _handler(state: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?")[0]
            state.requests.append(Recorded(path, body, {k.lower(): v for k, v in self.headers.items()}))
            if path.endswith("/chat/completions"):
                script = state.openai_script.pop(0) if state.openai_script else {"content": "ok"}
                if "status" in script:
                    self._error(int(script["status"]))
                    return
                reply = _openai_reply(body, script)
            elif path.endswith("/messages"):
                reply = _anthropic_reply(body)
            else:
                self.send_response(404)
                self.end_headers()
                return
            self._send(200, reply)

        def _error(self, status: int) -> None:
            self._send(status, {"error": {"message": "scripted failure", "type": "server_error", "code": None}})

        def _send(self, status: int, reply: dict[str, Any]) -> None:
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def fake_provider() -> Iterator[FakeProvider]:
    state = FakeProvider()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
