"""A refused request names who made it, where that can be known: a page of the session (its load
failed, and the page said so), or "unknown" when no page reported it (Chromium's own services,
which reach the proxy through the session's context like its pages do) — never the page by default.
Records, the report and OCSF agree, and a refused connection names its destination.

Real Chromium and agent-browser, loopback only: the page reaches for 127.0.0.2 (outside the
allowed range); the request no page made is this test dialling the session's egress proxy itself,
the way Chromium's own services do (a real service would resolve an outside name)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from server import Binaries
from test_egress import Watched

pytestmark = pytest.mark.chromium


def site(elsewhere: str) -> ThreadingHTTPServer:
    page = (
        "<!doctype html><meta charset=utf-8><title>who</title>"
        f'<img src="http://{elsewhere}/img.png">'
        f"<script>fetch('http://{elsewhere}/fetched', {{mode: 'no-cors'}}).catch(() => {{}});</script>"
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def refusal(srv: Any, needle: str, timeout: float = 15) -> dict:
    """The `request.blocked` record whose reason holds `needle`."""
    deadline = time.monotonic() + timeout
    while True:
        for line in srv.cfg.audit_log.read_text().splitlines():
            record = json.loads(line)
            if record.get("rule") == "request.blocked" and needle in record.get("reason", ""):
                return record
        assert time.monotonic() < deadline, f"no refusal naming {needle!r}"
        time.sleep(0.2)


def dial_proxy(port: int, target: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        return conn.recv(200)


def test_a_refused_request_names_who_made_it_and_where_it_went(start_server, binaries: Binaries) -> None:
    elsewhere = Watched("127.0.0.2")
    target = f"127.0.0.2:{elsewhere.port}"
    httpd = site(target)
    allowed = httpd.server_address[1]
    srv = start_server(policy_json={"open": {"allow_private_cidrs": [f"127.0.0.1:{allowed}"]}})
    try:
        srv.ok("who", ["open", f"http://127.0.0.1:{allowed}/"])
        by_page = refusal(srv, f"http://{target}/img.png")
        fetched = refusal(srv, f"http://{target}/fetched")
        for record in (by_page, fetched):
            assert record["session_id"] == "who", record
            assert record["requester"] == "page", record
            assert record["destination"] == {"hostname": "127.0.0.2", "port": elsewhere.port}, record

        # A connection no page asked for, on the session's own proxy.
        memo = json.loads((srv.cfg.state_dir / "contexts.json").read_text())
        (port,) = {entry["port"] for entry in memo.values()}
        assert b" 403 " in dial_proxy(port, "127.0.0.3:443")
        unasked = refusal(srv, "connection to 127.0.0.3:443")
        assert unasked["session_id"] == "who", unasked
        assert unasked["requester"] == "unknown", unasked
        assert unasked["destination"] == {"hostname": "127.0.0.3", "port": 443}, unasked
        assert elsewhere.accepted == 0
    finally:
        srv.stop()
        httpd.shutdown()
        elsewhere.close()

    log = str(srv.cfg.audit_log)
    ocsf = subprocess.run([str(binaries.server), "audit", "report", log, "--format", "ocsf"],
                          capture_output=True, text=True, timeout=60)
    events = [json.loads(line) for line in ocsf.stdout.splitlines()]
    by_uid = {e["metadata"]["uid"]: e for e in events}
    page_event, unknown_event = by_uid[by_page["id"]], by_uid[unasked["id"]]
    assert "web page" in page_event["actor"]["app_name"], page_event["actor"]
    assert "web page" not in unknown_event["actor"]["app_name"], unknown_event["actor"]
    assert "unknown" in unknown_event["actor"]["app_name"], unknown_event["actor"]
    assert page_event["dst_endpoint"] == {"hostname": "127.0.0.2", "port": elsewhere.port}, page_event
    assert unknown_event["dst_endpoint"] == {"hostname": "127.0.0.3", "port": 443}, unknown_event

    report = subprocess.run([str(binaries.server), "audit", "report", log, "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    rows = {r.get("seq"): r for r in json.loads(report.stdout)["timeline"]}
    assert rows[by_page["seq"]]["requester"] == "page"
    assert rows[by_page["seq"]]["flag"]["level"] == "alert"
    assert rows[unasked["seq"]]["requester"] == "unknown"
    assert rows[unasked["seq"]]["flag"]["level"] == "warn", "not in the red of what the agent or a page did"


def test_a_refusal_made_as_the_server_stops_is_recorded_before_its_last_record(start_server) -> None:
    """The page's word is waited for, but not past the stop: a connection refused just before the
    client leaves is in the log, before the server's `stopped` record."""
    srv = start_server()
    srv.ok("late", ["open", "about:blank"])
    memo = json.loads((srv.cfg.state_dir / "contexts.json").read_text())
    (port,) = {entry["port"] for entry in memo.values()}
    assert b" 403 " in dial_proxy(port, "127.0.0.3:443")
    srv.stop()
    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    refused = [i for i, r in enumerate(records) if "connection to 127.0.0.3:443" in r.get("reason", "")]
    stopped = [i for i, r in enumerate(records) if r.get("outcome") == "stopped"]
    assert refused and stopped and refused[0] < stopped[-1], [r.get("outcome") or r.get("rule") for r in records]
