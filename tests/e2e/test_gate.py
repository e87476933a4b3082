"""The browser gate, spoken to directly as a compromised agent-browser would: everything a child can
ask of Chromium goes through it, and what reaches outside a page — or another session's tab — is
refused and audited. (That the child can reach nothing else, Chromium's own port included, is
test_confinement's.)"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
import websockets

import harness
from server import BlockingServer

pytestmark = pytest.mark.chromium


def gate_url(srv: BlockingServer, session: str) -> str:
    port = int((srv.cfg.state_dir / "gate.port").read_text())
    return f"ws://127.0.0.1:{port}/devtools/browser/{session}"


def ask(url: str, *commands: dict[str, Any]) -> list[dict[str, Any]]:
    """Send CDP commands (ids 1..n) on one connection; return their answers in order."""

    async def run() -> list[dict[str, Any]]:
        async with websockets.connect(url, max_size=None) as ws:
            answers: dict[int, dict[str, Any]] = {}
            for i, command in enumerate(commands, 1):
                await ws.send(json.dumps({"id": i, **command}))
                while i not in answers:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    if "id" in message:
                        answers[message["id"]] = message
            return [answers[i] for i in range(1, len(commands) + 1)]

    return asyncio.run(run())


def refused(answer: dict[str, Any], rule: str = "cdp.refused") -> bool:
    return f"[{rule}]" in answer.get("error", {}).get("message", "")


def denied_rules(srv: BlockingServer, session: str) -> list[str]:
    records = [json.loads(line) for line in srv.cfg.audit_log.read_text().splitlines()]
    return [r["rule"] for r in records if r.get("phase") == "denied" and r.get("session_id") == session]


def test_what_reaches_outside_a_page_is_refused_and_audited(server) -> None:
    url = gate_url(server, "hostile")
    answers = ask(
        url,
        {"method": "Browser.setDownloadBehavior", "params": {"behavior": "allow", "downloadPath": "/"}},
        {"method": "Target.createTarget", "params": {"url": "file:///etc/passwd"}},
        # A new tab loads before anyone can police it: only about:blank (loopback stand-in for "elsewhere").
        {"method": "Target.createTarget", "params": {"url": "http://127.0.0.2:9/"}},
        {"method": "Page.printToPDF", "params": {}},
        {"method": "Browser.close", "params": {}},
        {"method": "Browser.getVersion", "params": {}},
    )
    assert all(refused(a) for a in answers[:5]), answers
    assert "product" in answers[5]["result"], answers[5]  # an allowed method is answered by Chromium
    # The gate answers a refusal first and hands its record to the audit writer after.
    deadline = time.monotonic() + 10
    while denied_rules(server, "hostile").count("cdp.refused") < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert denied_rules(server, "hostile").count("cdp.refused") == 5, denied_rules(server, "hostile")


def test_the_gate_serves_no_plain_http_so_no_tab_opens_by_url(server) -> None:
    port = int((server.cfg.state_dir / "gate.port").read_text())
    for path in ("/json/version", "/json/new?file:///etc/passwd"):
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)) as caught:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5)
        if isinstance(caught.value, urllib.error.HTTPError):
            assert caught.value.code == 404, path


def test_a_session_sees_and_drives_only_its_own_tabs(server, web: harness.WebServer) -> None:
    server.ok("tab-owner", ["open", web.url("/form")])
    theirs = json.loads((server.cfg.state_dir / "sock" / "tab-owner.target").read_text())["targetId"]
    listed, attach = ask(
        gate_url(server, "tab-intruder"),
        {"method": "Target.getTargets", "params": {}},
        {"method": "Target.attachToTarget", "params": {"targetId": theirs, "flatten": True}},
    )
    ids = [t["targetId"] for t in listed["result"]["targetInfos"] if t["type"] == "page"]
    assert theirs not in ids, listed
    assert refused(attach) and "another session" in attach["error"]["message"], attach
    # The owner's own connection still lists it.
    (mine,) = ask(gate_url(server, "tab-owner"), {"method": "Target.getTargets", "params": {}})
    assert theirs in [t["targetId"] for t in mine["result"]["targetInfos"]], mine


def test_a_session_the_connection_never_attached_is_refused(server) -> None:
    (answer,) = ask(
        gate_url(server, "ghost"),
        {"method": "Runtime.evaluate", "params": {"expression": "1"}, "sessionId": "0123456789ABCDEF"},
    )
    assert refused(answer, "cdp.unwarded"), answer
