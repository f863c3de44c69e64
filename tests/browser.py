"""A page in headless Chromium through its DevTools pipe: evaluate JavaScript in it and take a full-page screenshot at a
given window width (the command line's --screenshot takes the window only)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """`with Page(url, width, profile_dir) as page:` then `page.eval(js)` and `page.screenshot(path)`."""

    def __init__(self, url: str, width: int, profile_dir, height: int = 900, timeout_s: float = 120.0):
        self.url, self.width, self.height, self.timeout_s = url, width, height, timeout_s
        self.profile_dir, self._id, self._buffer = str(profile_dir), 0, b""

    def __enter__(self):
        cmd_r, self._cmd_w = os.pipe()  # the browser reads commands on its fd 3, answers on its fd 4
        self._out_r, out_w = os.pipe()

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                 f"--user-data-dir={self.profile_dir}", f"--window-size={self.width},{self.height}", "about:blank"]
        # The shell puts the pipes on fds 3 and 4 (a preexec dup2 could land on subprocess's own error pipe).
        self.proc = subprocess.Popen(["bash", "-c", f'exec "$0" "$@" 3<&{cmd_r} 4>&{out_w}', chromium(), *flags],
                                     pass_fds=(cmd_r, out_w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        target = self._send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self._send("Emulation.setDeviceMetricsOverride", session=True, width=self.width, height=self.height,
                   deviceScaleFactor=1, mobile=False)
        self._send("Page.enable", session=True)
        self._send("Page.navigate", session=True, url=self.url)
        self._wait_event("Page.loadEventFired")
        return self

    def __exit__(self, *exc):
        for fd in (self._cmd_w, self._out_r):
            os.close(fd)
        self.proc.kill()
        self.proc.wait(timeout=30)

    def eval(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        result = self._send("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path) -> tuple:
        """The whole page (not only the window) as a PNG at the window's width; returns (width, height) in CSS px."""
        size = self._send("Page.getLayoutMetrics", session=True)["cssContentSize"]
        width, height = self.width, int(size["height"]) + 1
        shot = self._send("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        return width, height

    # --- the protocol: JSON messages ending in a NUL byte -----------------------------------------------------------

    def _send(self, method: str, session: bool = False, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._cmd_w, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _wait_event(self, name: str) -> dict:
        while True:
            reply = self._read()
            if reply.get("method") == name:
                return reply.get("params", {})

    def _read(self) -> dict:
        import select

        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._out_r], [], [], self.timeout_s)
            if not ready:
                raise TimeoutError(f"chromium sent nothing for {self.timeout_s} s")
            chunk = os.read(self._out_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)
