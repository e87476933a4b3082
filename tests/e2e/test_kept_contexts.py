"""A stopped server keeps its sessions (`--on-exit keep`) for the next one to adopt, browser contexts
included. Each context's only way out is its egress listener's port, which dies with the server:
whoever takes that port before the next server must receive nothing of the kept pages, and the next
server must take the port back before anything else can."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytestmark = pytest.mark.chromium

# A page that keeps asking its site for something, as a live web app does.
POLLER = (
    "<!doctype html><meta charset=utf-8><title>poller</title><script>"
    "setInterval(() => fetch('/ping?' + Date.now()).catch(() => {}), 100);"
    "</script>"
)


class Site:
    """The allowed site: serves the poller and counts its pings."""

    def __init__(self) -> None:
        self.pings = 0
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path.startswith("/ping"):
                    site.pings += 1
                body = POLLER.encode() if self.path == "/" else b"pong"
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait_for_pings(self, more_than: int, within: float) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.pings > more_than:
                return True
            time.sleep(0.05)
        return False


def squat(port: int, within: float = 10.0) -> socket.socket:
    """Listen on 127.0.0.1:`port` as soon as the stopped server has let it go."""
    deadline = time.monotonic() + within
    while True:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(16)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def connections(listener: socket.socket, seconds: float) -> int:
    listener.settimeout(0.1)
    accepted, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            conn, _ = listener.accept()
            accepted += 1
            conn.close()
        except TimeoutError:
            pass
    return accepted


def test_a_stopped_servers_kept_context_sends_nothing_to_whoever_takes_its_port_until_adopted(
    start_server,
) -> None:
    site = Site()
    policy = {"open": {"allow_private_cidrs": [f"127.0.0.1:{site.port}"]}}
    srv = start_server(policy_json=policy)
    srv.ok("kept", ["open", f"http://127.0.0.1:{site.port}/"])
    assert site.wait_for_pings(3, within=10), "the page never polled (the control)"
    memo = json.loads((srv.cfg.state_dir / "contexts.json").read_text())
    port = memo["kept"]["port"]
    srv.stop()
    listener = squat(port)
    try:
        received = connections(listener, 2.0)
    finally:
        listener.close()
    assert received == 0, f"a kept context sent {received} connections to whoever took its port"
    # The next server takes the port back at start and the page goes on as it was.
    again = start_server(policy_json=policy, base=srv.cfg.base)
    before = site.pings
    assert site.wait_for_pings(before + 3, within=10), "the adopted page did not go on polling"
    assert again.ok("kept", ["get", "url"])["url"] == f"http://127.0.0.1:{site.port}/"
