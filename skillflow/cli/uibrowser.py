"""Headless Chromium driven over the DevTools protocol: open a page, wait for text, click, screenshot.

``make ui-check`` needs more than ``chromium --screenshot``: the review form is a modal behind the flow
run's Resume button, and a single-page app must be waited for (a condition, not a fixed delay). This module
starts ``chromium --headless --remote-debugging-port=0`` with a profile folder the caller owns, connects to
its page over a WebSocket (``websockets``, already a Prefect dependency) and exposes the few verbs the
check needs. Only the process it started is stopped, by its id.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)
WIDTH, HEIGHT = 1600, 1200


def chromium_path() -> str | None:
    """The Chromium binary (Debian's ``chromium`` package), or None when it is not installed."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return found or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


class Page:
    """One browser tab over a DevTools WebSocket (synchronous: one command, one answer)."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._next = 0

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv(timeout=60))
            if msg.get("id") == ident:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result") or {})

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return (result.get("result") or {}).get("value")

    def goto(self, url: str, wait_text: str | None = None, timeout: float = 45.0) -> None:
        """Navigate and wait until the page body contains ``wait_text`` (or is simply loaded)."""
        self.send("Page.navigate", url=url)
        self.wait_text(wait_text or "", timeout)

    def body_text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''") or "")

    def wait_text(self, text: str, timeout: float = 45.0) -> None:
        """Wait until the rendered text contains ``text``; then a short settle for late renders."""
        deadline = time.monotonic() + timeout
        while text not in self.body_text() or self.evaluate("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never showed {text!r}; it shows: {self.body_text()[:600]!r}")
            time.sleep(0.5)
        time.sleep(1.5)

    def click_text(self, selector: str, text: str) -> None:
        """Click the first ``selector`` element whose text is ``text`` (trimmed)."""
        script = (
            f"(() => {{ const el = [...document.querySelectorAll({json.dumps(selector)})]"
            f".find(e => e.innerText.trim() === {json.dumps(text)});"
            " if (!el) return false; el.click(); return true; })()"
        )
        if not self.evaluate(script):
            raise RuntimeError(f"no {selector} with text {text!r} on the page")

    def image_sources(self) -> list[dict[str, Any]]:
        """Every ``<img>`` on the page: its source scheme, rendered size and whether it decoded."""
        script = (
            "[...document.images].map(i => ({src: i.src.slice(0, 40), w: i.naturalWidth, h: i.naturalHeight, "
            "shown: i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 0}))"
        )
        return list(self.evaluate(script) or [])

    def screenshot(self, out: Path, full_page: bool = False) -> Path:
        """Save a PNG of the viewport (or of the whole page height, capped at 6000 px)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            height = int(self.evaluate("Math.min(6000, document.documentElement.scrollHeight)") or HEIGHT)
            params["clip"] = {"x": 0, "y": 0, "width": WIDTH, "height": max(height, HEIGHT), "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", **params)["data"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out


def _debug_port(profile: Path, proc: subprocess.Popen[bytes], timeout: float) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while not marker.is_file() or not marker.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"chromium did not open its DevTools port (exit {proc.poll()})")
        time.sleep(0.2)
    return int(marker.read_text().splitlines()[0])


@contextlib.contextmanager
def browser(profile: Path, timeout: float = 60.0) -> Iterator[Page]:
    """Start headless Chromium with ``profile`` as its user-data folder and yield its first tab."""
    from websockets.sync.client import connect

    binary = chromium_path()
    if binary is None:
        raise RuntimeError("chromium is not installed: apt-get update && apt-get install -y chromium")
    profile.mkdir(parents=True, exist_ok=True)
    cmd = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", "about:blank"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port = _debug_port(profile, proc, timeout)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            targets = json.loads(resp.read())
        target = next(t for t in targets if t.get("type") == "page")
        with connect(target["webSocketDebuggerUrl"], max_size=64 * 2**20, open_timeout=timeout) as ws:
            page = Page(ws)
            page.send("Page.enable")
            page.send(
                "Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False
            )
            yield page
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
