"""Downloads: Chromium is not confined, so a download is a write of the page's choosing (name and
contents) into Chromium's downloads directory. Every session's downloads are denied, and each attempt
is an audit record naming the session. Real Chromium and agent-browser, loopback only."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.chromium


def downloads_dirs(chromium) -> list[Path]:
    """Where Chromium would put a download: its HOME's Downloads, and its profile."""
    environ = Path(f"/proc/{chromium.pid}/environ").read_bytes().split(b"\0")
    home = next((e[5:].decode() for e in environ if e.startswith(b"HOME=")), os.path.expanduser("~"))
    return [Path(home) / "Downloads", Path(chromium.user_data_dir)]


def test_a_page_cannot_download_and_each_attempt_is_recorded(server, chromium) -> None:
    tag = uuid.uuid4().hex[:8]
    names = [f"bs-attach-{tag}.txt", f"bs-data-{tag}.bashrc", f"bs-blob-{tag}.txt"]
    page = (
        "<!doctype html><meta charset=utf-8><title>Downloads</title>"
        f'<a id="attach" href="/file">attachment</a>'
        f'<a id="data" download="{names[1]}" href="data:text/plain,echo%20pwned">data</a>'
        f'<a id="blob" download="{names[2]}" href="#">blob</a>'
        "<script>document.getElementById('blob').href = URL.createObjectURL("
        "new Blob(['evil'], {type: 'text/plain'}));</script>"
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/file":
                body = b"contents the page chose"
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Disposition", f'attachment; filename="{names[0]}"')
            else:
                body = page
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        server.ok("dl", ["open", f"http://127.0.0.1:{httpd.server_address[1]}/"])
        for link in ("#attach", "#data", "#blob"):
            server.call("dl", ["click", link])
        server.call("dl", ["wait", "1500"])
    finally:
        httpd.shutdown()

    written = [p for d in downloads_dirs(chromium) if d.exists() for p in d.rglob("*") if tag in p.name]
    assert not written, written
    deadline = time.monotonic() + 10
    while True:
        records = [json.loads(line) for line in server.cfg.audit_log.read_text().splitlines()]
        denied = [r for r in records if r["phase"] == "denied" and "download" in r.get("reason", "")]
        if len(denied) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(denied) >= 3, [r.get("reason") for r in records if r["phase"] == "denied"]
    assert all(r["session_id"] for r in denied), denied
    for name in names:
        assert any(name in r["reason"] for r in denied), (name, [r["reason"] for r in denied])
