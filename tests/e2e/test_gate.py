"""The browser gate, spoken to directly as a compromised agent-browser would: everything a child can
ask of Chromium goes through it, and what reaches outside a page — or another session's tab — is
refused and audited. (That the child can reach nothing else, Chromium's own port included, is
test_confinement's.)

This module's server runs with `--child-uids off`: the test speaks to the gate as root, under any
session name, which is what a child could do before each daemon had a uid of its own. So every CDP
check here is proven to hold even for a connection whose session the gate cannot tell; that the
gate tells it by uid is test_session_separation's."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import websockets

import harness
from server import BlockingServer

pytestmark = pytest.mark.chromium


@pytest.fixture
def server(start_server: Any) -> BlockingServer:
    return start_server(extra_args=["--child-uids", "off"])


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


def test_a_session_sees_and_can_touch_only_its_own_contexts_targets(server, web: harness.WebServer) -> None:
    server.ok("tab-owner", ["open", web.url("/form")])
    theirs = json.loads((server.cfg.state_dir / "sock" / "tab-owner.target").read_text())["targetId"]
    # A compromised child asks for every target there is, then for the other session's tab by id.
    listed, every, info, attach, activate, close = ask(
        gate_url(server, "tab-intruder"),
        {"method": "Target.getTargets", "params": {}},
        {"method": "Target.getTargets", "params": {"filter": [{}]}},
        {"method": "Target.getTargetInfo", "params": {"targetId": theirs}},
        {"method": "Target.attachToTarget", "params": {"targetId": theirs, "flatten": True}},
        {"method": "Target.activateTarget", "params": {"targetId": theirs}},
        {"method": "Target.closeTarget", "params": {"targetId": theirs}},
    )
    for answer in (listed, every):
        assert theirs not in [t["targetId"] for t in answer["result"]["targetInfos"]], answer
    for answer in (info, attach, activate, close):
        assert refused(answer) and "not in this session's browser context" in answer["error"]["message"], answer
    # Each attempt is an audited refusal naming the intruder; the owner's tab lives on, listed to it alone.
    deadline = time.monotonic() + 10
    while denied_rules(server, "tab-intruder").count("cdp.refused") < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert denied_rules(server, "tab-intruder").count("cdp.refused") == 4, denied_rules(server, "tab-intruder")
    (mine,) = ask(gate_url(server, "tab-owner"), {"method": "Target.getTargets", "params": {}})
    assert theirs in [t["targetId"] for t in mine["result"]["targetInfos"]], mine
    assert server.ok("tab-owner", ["get", "url"])["url"] == web.url("/form")


def test_a_session_the_connection_never_attached_is_refused(server) -> None:
    (answer,) = ask(
        gate_url(server, "ghost"),
        {"method": "Runtime.evaluate", "params": {"expression": "1"}, "sessionId": "0123456789ABCDEF"},
    )
    assert refused(answer, "cdp.unwarded"), answer


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_idle_connections_to_the_gate_are_capped_and_closed_and_spawns_go_on(server) -> None:
    """A child that opens connections and never handshakes cannot use up the server's descriptors."""
    server.ok("fd-before", ["get", "url"])
    port = int((server.cfg.state_dir / "gate.port").read_text())
    before = open_fds(server.pid)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(600)]
    try:
        time.sleep(1.0)
        during = open_fds(server.pid)
        assert during - before <= 256 + 16, (before, during)
        # Each is closed by the server: at once past the cap, after the handshake timeout otherwise.
        for conn in idle:
            conn.settimeout(15)
            try:
                assert conn.recv(1) == b""
            except ConnectionResetError:
                pass
        assert open_fds(server.pid) - before <= 16, (before, open_fds(server.pid))
        server.ok("fd-after", ["get", "url"])
    finally:
        for conn in idle:
            conn.close()
    # The server's soft limit on open files is its hard limit.
    limits = Path(f"/proc/{server.pid}/limits").read_text()
    soft, hard = re.search(r"Max open files\s+(\S+)\s+(\S+)", limits).groups()
    assert soft == hard, limits


def test_a_child_that_never_reads_cannot_grow_the_server(server) -> None:
    """Large answers a stand-in child asks Chromium for, through the gate, and never reads."""
    server.ok("mem-before", ["get", "url"])
    start = rss_mib(server.pid)
    peak = start

    async def flood() -> bool:
        nonlocal peak
        async with websockets.connect(gate_url(server, "mem-hog"), max_size=None, max_queue=1) as ws:

            async def answer(i: int) -> dict[str, Any]:
                while True:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    if message.get("id") == i:
                        return message

            await ws.send(json.dumps({"id": 1, "method": "Target.createTarget", "params": {"url": "about:blank"}}))
            target = (await answer(1))["result"]["targetId"]
            await ws.send(json.dumps({"id": 2, "method": "Target.attachToTarget", "params": {"targetId": target, "flatten": True}}))
            session = (await answer(2))["result"]["sessionId"]
            big = {"expression": "'x'.repeat(8 << 20)", "returnByValue": True}
            for i in range(3, 43):
                await ws.send(json.dumps({"id": i, "method": "Runtime.evaluate", "params": big, "sessionId": session}))
            # Never read; watch the server for longer than it waits for room.
            for _ in range(60):
                await asyncio.sleep(0.25)
                peak = max(peak, rss_mib(server.pid))
            return ws.close_code is not None or ws.state.name != "OPEN"

    asyncio.run(flood())
    assert peak - start < 120, f"the server grew from {start:.0f} to {peak:.0f} MiB"
    server.ok("mem-after", ["get", "url"])
