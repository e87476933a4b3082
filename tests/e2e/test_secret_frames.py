"""A secret is typed only into a field whose own frame is on one of the secret's hosts.

The login page is on the secret's host and embeds a frame of another origin that the policy
allows, in the page's process (another port of 127.0.0.1) or out of it (127.0.0.2, another site).
`snapshot -i` gives the frame's field a ref; filling it with the secret must type nothing there
and say which origin the field was in, while the page's own field, and a frame on a host the
secret names, still take it. Real Chromium and agent-browser, loopback only."""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from server import BlockingServer, describe, unmarked

pytestmark = pytest.mark.chromium

VALUES = {"pw": "frame-test-Secret-9", "both": "frame-test-Other-7"}


@contextmanager
def site(host: str) -> Iterator[tuple[int, list[str]]]:
    """`/host?child=URL`: a field of its own and a frame; `/field`: one field. Logs every path."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.path)
            path, _, query = self.path.partition("?")
            if path == "/host":
                child = query.removeprefix("child=")
                body = (
                    "<!doctype html><meta charset=utf-8><title>Host</title>"
                    '<input id="top" aria-label="Top field">'
                    f'<iframe src="{child}" width=400 height=120></iframe>'
                )
            elif path == "/field":
                body = '<!doctype html><meta charset=utf-8><title>Frame</title><input id="other" aria-label="Frame field">'
            else:
                self.send_error(404)
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer((host, 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1], seen
    finally:
        httpd.shutdown()


def secrets_file(entries: dict[str, list[str]]) -> Path:
    directory = Path(tempfile.mkdtemp(prefix="bs-frames-", dir="/var/tmp"))
    path = directory / "secrets.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({name: {"value": VALUES[name], "hosts": hosts} for name, hosts in entries.items()}, fh)
    return path


def ref_of(srv: BlockingServer, sid: str, label: str) -> str:
    is_error, reply = srv.call(sid, ["snapshot", "-i"])
    assert not is_error, describe(reply)
    text = unmarked(json.loads(reply["stdout"]))["snapshot"]
    found = re.search(rf'"{re.escape(label)}"[^\n]*\[ref=(e\d+)\]', text)
    assert found, text
    return "@" + found.group(1)


@pytest.mark.parametrize("frame_host", ["127.0.0.1", "127.0.0.2"], ids=["same-process", "out-of-process"])
def test_a_secret_is_not_typed_into_a_frame_of_another_origin(start_server, frame_host: str) -> None:
    with site("127.0.0.1") as (top_port, _), site(frame_host) as (frame_port, frame_seen):
        top, frame = f"127.0.0.1:{top_port}", f"{frame_host}:{frame_port}"
        srv = start_server(
            extra_args=["--secrets", str(secrets_file({"pw": [top], "both": [top, frame]}))],
            policy_json={"open": {"allow_private_cidrs": ["127.0.0.1/32", "127.0.0.2/32"]}},
        )
        sid = f"frames-{frame_host}"
        is_error, reply = srv.call(sid, ["open", f"http://{top}/host?child=http://{frame}/field"])
        assert not is_error, describe(reply)
        assert any(p.startswith("/field") for p in frame_seen), frame_seen
        field = ref_of(srv, sid, "Frame field")

        # The frame is not on the secret's hosts: nothing typed, and the refusal names its origin.
        is_error, reply = srv.call(sid, ["fill", field, "{{secret:pw}}"])
        assert is_error and reply["exit_code"] != 0, describe(reply)
        assert "secret.host" in reply["stderr"] and frame in reply["stderr"], describe(reply)
        assert srv.ok(sid, ["get", "value", field]) == {"value": ""}

        # Controls: the page's own field takes it, and so does the frame for a secret it is a host of.
        srv.ok(sid, ["fill", "#top", "{{secret:pw}}"])
        assert srv.ok(sid, ["get", "value", "#top"]) == {"value": "{{secret:pw}}"}
        srv.ok(sid, ["fill", field, "{{secret:both}}"])
        assert srv.ok(sid, ["get", "value", field]) == {"value": "{{secret:both}}"}
        srv.stop()

    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    denied = [r for r in records if r.get("rule") == "secret.host" and r["phase"] == "denied"]
    assert len(denied) >= 1 and all(r["session_id"] for r in denied), denied
    assert frame in denied[0]["reason"], denied[0]
    assert not any(value in srv.cfg.audit_log.read_text() for value in VALUES.values())
