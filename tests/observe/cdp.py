"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe):
no WebSocket client needed. Enough to open a page, read it with JavaScript, and take a
screenshot, while the page keeps running (server-sent events, no reload)."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.report.test_report_page import _chromium


class Chromium:
    def __init__(self, profile: Path, width: int = 1100, height: int = 900) -> None:
        to_r, self._to_w = os.pipe()      # we write commands; Chromium reads them on fd 3
        self._from_r, from_w = os.pipe()  # Chromium writes answers on fd 4
        argv = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-quic",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", f"--window-size={width},{height}",
                "about:blank"]
        self.proc = subprocess.Popen(["bash", "-c", f'exec "$@" 3<&{to_r} 4>&{from_w}', "bash", *argv],
                                     pass_fds=(to_r, from_w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self._id = 0
        self._answers: dict[int, dict[str, Any]] = {}
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable", session=True)

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_r, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cv:
                        self._answers[msg["id"]] = msg
                        self._cv.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False,
             timeout: float = 60) -> dict[str, Any]:
        self._id += 1
        mid = self._id
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cv:
            while mid not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"chromium did not answer {method}")
                self._cv.wait(min(left, 0.5))
            answer = self._answers.pop(mid)
        if "error" in answer:
            raise AssertionError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", {"url": url}, session=True)
        deadline = time.monotonic() + 30
        while self.eval("document.readyState") != "complete" or self.eval("location.href") == "about:blank":
            assert time.monotonic() < deadline, f"{url} did not load"
            time.sleep(0.1)

    def eval(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        return res.get("result", {}).get("value")

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=True)
        path.write_bytes(base64.b64decode(data["data"]))

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except AssertionError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._to_w)
        os.close(self._from_r)
