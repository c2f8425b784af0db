"""A headless Chromium driven over the Chrome DevTools protocol, for the viewer's page.

Chromium comes from Debian's packages (``apt-get install chromium``, in the
Makefile's DEB_PACKAGES); the protocol is spoken over ``websockets`` (no browser
download, no driver binary). Used by tests/rollout/inspect/test_viewer_browser.py and
benchmarks/bench_viewer.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.request import urlopen

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
START_GUARD_S = 60.0
"""How long to wait for the browser to come up before giving up (a hang guard)."""


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(RuntimeError):
    pass


@dataclass
class Page:
    """One tab: send protocol commands, evaluate JavaScript, collect page errors."""

    socket: Any
    next_id: int = 0
    exceptions: list[str] = field(default_factory=list)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        ask = self.next_id
        self.socket.send(json.dumps({"id": ask, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=START_GUARD_S))
            if message.get("method") == "Runtime.exceptionThrown":
                details = message["params"]["exceptionDetails"]
                self.exceptions.append(
                    str(details.get("exception", {}).get("description") or details.get("text"))
                )
            if message.get("id") == ask:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, guard_s: float = START_GUARD_S) -> Any:
        """Poll until ``expression`` is truthy (a hang guard, not a speed check)."""
        deadline = time.monotonic() + guard_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"still false after {guard_s:g}s: {expression}")
            time.sleep(0.02)

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element (press and release)."""
        box = self.evaluate(
            f"(function () {{ var e = document.querySelector({json.dumps(selector)});"
            " if (!e) return null; e.scrollIntoView({block: 'center'});"
            " var r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise BrowserError(f"nothing matches {selector}")
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def set_viewport(self, width: int, height: int) -> None:
        """The window's size in CSS pixels (a laptop screen, say), before navigating."""
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def screenshot(self) -> bytes:
        """What the viewport shows, as PNG bytes."""
        import base64

        return base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])

    def key(self, key: str) -> None:
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key=key, text=key)


@contextmanager
def open_browser() -> Iterator[Page]:
    """A fresh headless Chromium with one blank tab; killed (by its pid) afterwards."""
    from websockets.sync.client import connect

    binary = chromium_binary()
    if binary is None:
        raise BrowserError("chromium is not installed (apt-get install chromium)")
    profile = Path(tempfile.mkdtemp(prefix="agentenvs-chromium-"))
    proc = subprocess.Popen(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port = _debugging_port(profile, proc)
        page_url = _page_socket(port)
        with connect(page_url, max_size=None, open_timeout=START_GUARD_S) as socket:
            page = Page(socket)
            page.send("Runtime.enable")
            page.send("Page.enable")
            yield page
    finally:
        proc.kill()
        proc.wait(30)
        shutil.rmtree(profile, ignore_errors=True)


def _debugging_port(profile: Path, proc: subprocess.Popen) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_GUARD_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrowserError(f"chromium exited with status {proc.returncode}")
        if marker.exists():
            first = marker.read_text().split("\n", 1)[0].strip()
            if first.isdigit():
                return int(first)
        time.sleep(0.05)
    raise BrowserError("chromium did not open its debugging port")


def _page_socket(port: int) -> str:
    deadline = time.monotonic() + START_GUARD_S
    while time.monotonic() < deadline:
        with urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            targets = json.load(answer)
        pages = [t for t in targets if t.get("type") == "page"]
        if pages:
            return str(pages[0]["webSocketDebuggerUrl"])
        time.sleep(0.05)
    raise BrowserError("chromium opened no page")
