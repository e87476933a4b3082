"""Logins without secrets in the model's context (`--secrets`): a `{{secret:NAME}}` placeholder in
`fill`/`type` text is typed as the value only on the secret's hosts, and the value never comes back
in a reply, an audit record, the OTLP export or the server's stderr. Real Chromium, the fixture
server on 127.0.0.1, a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import harness
import pytest
from server import describe, unmarked

pytestmark = pytest.mark.chromium

VALUE = "s3cr3t-Value-42"


@contextmanager
def otlp_receiver() -> Iterator[list[bytes]]:
    """An OTLP/HTTP endpoint on 127.0.0.1 that keeps every export request's body."""
    bodies: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            bodies.append(self.path.encode() + b"\n" + body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield bodies, server.server_address[1]
    finally:
        server.shutdown()


def secrets_file(hosts: list[str]) -> Path:
    directory = Path(tempfile.mkdtemp(prefix="bs-secrets-", dir="/var/tmp"))
    path = directory / "secrets.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"login": {"value": VALUE, "hosts": hosts}}, fh)
    return path


def test_a_secret_is_typed_on_its_host_and_never_comes_back(start_server, web: harness.WebServer) -> None:
    replies: list[dict] = []
    with otlp_receiver() as (bodies, port), harness.run_web_server("127.0.0.1") as other:
        srv = start_server(
            extra_args=["--secrets", str(secrets_file([f"127.0.0.1:{web.port}"]))],
            env_extra={
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
        )

        def call(argv: list[str], sid: str = "sec-1") -> tuple[bool, dict]:
            is_error, reply = srv.call(sid, argv)
            replies.append(reply)
            return is_error, reply

        # On the secret's host: typed, and the page (its server) receives the value.
        assert not call(["open", web.url("/form")])[0]
        is_error, reply = call(["fill", "#q", "{{secret:login}}"])
        assert not is_error and reply["exit_code"] == 0, describe(reply)
        is_error, reply = call(["get", "value", "#q"])
        assert not is_error and "{{secret:login}}" in reply["stdout"], describe(reply)
        is_error, reply = call(["click", "#go"])
        assert not is_error, describe(reply)
        deadline = time.monotonic() + 10
        while VALUE not in web.submitted() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert VALUE in web.submitted(), web.submitted()
        for argv in (["get", "url"], ["snapshot"], ["get", "text", "body"]):
            is_error, reply = call(argv)
            assert not is_error and "{{secret:login}}" in reply["stdout"], (argv, describe(reply))

        # Another host (another port): nothing is typed.
        assert not call(["open", other.url("/form")], "sec-2")[0]
        is_error, reply = call(["fill", "#q", "{{secret:login}}"], "sec-2")
        assert is_error and reply["exit_code"] == 126, describe(reply)
        assert reply["stderr"].startswith("refused [secret.host]"), describe(reply)
        assert f"127.0.0.1:{web.port}" in reply["stderr"], reply["stderr"]
        is_error, reply = call(["get", "value", "#q"], "sec-2")
        assert not is_error and unmarked(json.loads(reply["stdout"])) == {"value": ""}, describe(reply)

        # Unknown, malformed, or anywhere but fill/type text: refused before anything runs.
        for argv in (
            ["fill", "#q", "{{secret:nope}}"],
            ["type", "#q", "{{secret:login"],
            ["open", web.url("/form?x={{secret:login}}")],
            ["select", "#q", "{{secret:login}}"],
        ):
            is_error, reply = call(argv, "sec-2")
            assert is_error and reply["stderr"].startswith("refused [secret.unknown]"), (argv, describe(reply))
        assert other.submitted() == []
        srv.stop()

    assert bodies, "the OTLP receiver got nothing: the check below would prove nothing"
    assert any(b"browser_shell.audit" in body for body in bodies)
    leaks = {
        "replies": any(VALUE in json.dumps(r) for r in replies),
        "audit log": VALUE in srv.cfg.audit_log.read_text(),
        "OTLP": any(VALUE.encode() in body for body in bodies),
        "stderr": VALUE in srv.cfg.stderr_log.read_text(),
    }
    assert not any(leaks.values()), leaks

    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    fill = next(r for r in records if r["phase"] == "intent" and r["argv"][0] == "fill")
    assert fill["argv"][2]["secrets"] == ["login"] and fill["argv"][2]["redacted"], fill["argv"]
    refused = [r for r in records if r.get("rule") == "secret.host"]
    assert [r["phase"] for r in refused] == ["outcome"] and refused[0]["outcome"] == "refused", refused
    started = next(r for r in records if r.get("outcome") == "started")
    assert started["detail"]["policy"]["secrets"] == {"login": f"127.0.0.1:{web.port}"}
