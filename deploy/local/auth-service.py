#!/usr/bin/env python3
"""The local stack's auth service: a STAND-IN for AIO's closed-source one.

In the AIO image, nginx's public server asks gem-server (1.0.0.x, :8088) or
python-server (1.9.x, :8091) whether a request may pass (`auth_request` to
`/auth`), and `POST /tickets` mints tickets for the VNC WebSocket, which a
browser cannot send headers on. Neither service is open source, so the local
stack runs this one, which implements the contract the gateway files in
deploy/aio/nginx/ rely on, and nothing more:

  any method /auth      2xx iff the request nginx is asking about carries the
                        API key (`X-AIO-API-Key: <key>` or
                        `Authorization: Bearer <key>`), or it is
                        `GET /websockify?ticket=<t>` (from X-Original-Method and
                        X-Original-URI) with a valid, unexpired ticket, which is
                        then used up (single use). Otherwise 401.
  POST /tickets         with the API key: 200 {"ticket": ..., "expires_in": TTL}.
                        Without it: 401.
  anything else         404.

Deliberately stricter than AIO's (see deploy/README.md): tickets are single-use
and open the VNC WebSocket only (AIO's are reusable within their TTL and open
any route), no JWTs, no `?api_key=`. Listens on 127.0.0.1 only. Logs go to
stderr without query strings or header values, so neither tickets nor the key
reach a log.

    auth-service.py --port 8088 --key-file .run/api-key [--ticket-ttl 30]
"""

from __future__ import annotations

import argparse
import hmac
import json
import secrets
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_TICKETS = 256


class Tickets:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._live: dict[str, float] = {}

    def mint(self) -> str:
        ticket = secrets.token_urlsafe(24)
        now = time.monotonic()
        with self._lock:
            self._live = {t: exp for t, exp in self._live.items() if exp > now}
            if len(self._live) >= MAX_TICKETS:
                # Bounded: the oldest outstanding ticket is dropped.
                oldest = min(self._live, key=self._live.__getitem__)
                del self._live[oldest]
            self._live[ticket] = now + self.ttl
        return ticket

    def redeem(self, ticket: str) -> bool:
        with self._lock:
            expires = self._live.pop(ticket, None)
        return expires is not None and expires > time.monotonic()


def make_handler(key: str, tickets: Tickets) -> type[BaseHTTPRequestHandler]:
    key_bytes = key.encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "browser-shell-local-auth"
        sys_version = ""

        def log_message(self, fmt: str, *args: object) -> None:
            pass  # see _log: no query strings, no header values

        def _log(self, status: int, why: str) -> None:
            path = urllib.parse.urlsplit(self.path).path
            original = urllib.parse.urlsplit(self.headers.get("X-Original-URI", "")).path
            print(
                f"[auth] {self.command} {path} original={self.headers.get('X-Original-Method', '-')} "
                f"{original or '-'} -> {status} ({why})",
                file=sys.stderr,
                flush=True,
            )

        def _reply(self, status: int, body: bytes = b"", ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _has_key(self) -> bool:
            candidates = [self.headers.get("X-AIO-API-Key", "")]
            auth = self.headers.get("Authorization", "")
            if auth[:7].lower() == "bearer ":
                candidates.append(auth[7:].strip())
            # compare_digest on every candidate: no early exit on the first.
            matched = [hmac.compare_digest(c.encode(), key_bytes) for c in candidates if c]
            return any(matched)

        def _ticket_ok(self) -> bool:
            original = urllib.parse.urlsplit(self.headers.get("X-Original-URI", ""))
            if self.headers.get("X-Original-Method", "") != "GET" or original.path != "/websockify":
                return False
            values = urllib.parse.parse_qs(original.query, keep_blank_values=True).get("ticket", [])
            return len(values) == 1 and bool(values[0]) and tickets.redeem(values[0])

        def _auth(self) -> None:
            if self._has_key():
                self._log(204, "api key")
                self._reply(204)
            elif self._ticket_ok():
                self._log(204, "ticket")
                self._reply(204)
            else:
                self._log(401, "no valid credential")
                self._reply(401, b"unauthorized\n")

        def _dispatch(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            if path == "/auth":
                self._auth()
            elif path == "/tickets" and self.command == "POST":
                if not self._has_key():
                    self._log(401, "tickets need the api key")
                    self._reply(401, b"unauthorized\n")
                    return
                body = json.dumps({"ticket": tickets.mint(), "expires_in": int(tickets.ttl)}).encode()
                self._log(200, "ticket minted")
                self._reply(200, body, "application/json")
            else:
                self._log(404, "unknown")
                self._reply(404, b"not found\n")

        # nginx's auth subrequest keeps the original request's method.
        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _dispatch

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--ticket-ttl", type=float, default=30.0)
    args = parser.parse_args()
    with open(args.key_file, encoding="utf-8") as fh:
        key = fh.read().strip()
    if len(key) < 16:
        parser.error(f"the API key in {args.key_file} is shorter than 16 characters")
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(key, Tickets(args.ticket_ttl)))
    httpd.daemon_threads = True
    print(f"[auth] listening on 127.0.0.1:{args.port} (stand-in for AIO's auth service)", file=sys.stderr, flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
