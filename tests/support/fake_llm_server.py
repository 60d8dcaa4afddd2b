"""A scripted local LLM server on 127.0.0.1 (random port) speaking OpenAI chat completions and Anthropic messages.

Each request is recorded (path, headers, parsed JSON body) and answered by the next scripted ``Reply``:
a text answer, an HTTP error (429, 500 …) or a slow answer (``delay`` seconds before responding).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    text: str = ""
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Raw:
    """A reply whose body is these bytes, whatever they are (malformed JSON, an empty body)."""

    body: bytes
    status: int = 200


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: str


def _openai_body(reply: Reply, model: str) -> dict[str, Any]:
    if reply.status != 200:
        return {"error": {"message": f"scripted {reply.status}", "type": "scripted_error", "code": reply.status}}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _anthropic_body(reply: Reply, model: str) -> dict[str, Any]:
    if reply.status != 200:
        return {"type": "error", "error": {"type": "scripted_error", "message": f"scripted {reply.status}"}}
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": reply.text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


class FakeLLMServer:
    """``with FakeLLMServer() as srv: srv.script(Reply("…")); … srv.received``."""

    def __init__(self) -> None:
        self._script: deque[Reply] = deque()
        self.received: list[Received] = []
        self._lock = threading.Lock()
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
                    reply = server.next_reply(body)
                if isinstance(reply, Reply) and reply.delay:
                    time.sleep(reply.delay)
                model = str(body.get("model", ""))
                status, headers = reply.status, reply.headers if isinstance(reply, Reply) else {}
                if isinstance(reply, Raw):
                    data = reply.body
                elif self.path.endswith("/chat/completions"):
                    data = json.dumps(_openai_body(reply, model)).encode("utf-8")
                elif self.path.endswith("/messages"):
                    data = json.dumps(_anthropic_body(reply, model)).encode("utf-8")
                else:
                    status, data = 404, b'{"error": {"message": "unknown path"}}'
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def next_reply(self, body: dict[str, Any]) -> Reply | Raw:
        """The answer to a request (called under the lock): the next scripted reply, else a 500."""
        return self._script.popleft() if self._script else Reply(status=500)

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
