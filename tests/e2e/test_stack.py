"""The local stack (deploy/local/up), running for real: nginx with the image's gateway files, the
MCP hub (mcp-proxy) spawning browser-shell, the auth stand-in, headed Chromium on Xvfb, x11vnc and
websockify. One stack for this module, on free ports and a free display, in a fresh run dir;
`deploy/local/down` at teardown (also when something failed).

Clients are real too: the official Python MCP client over Streamable HTTP, raw sockets for the
gateway probes (nothing normalises `//mcp` or `/%6dcp` on the way), and an RFB client reading the
framebuffer over the WebSocket nginx serves at /websockify, as noVNC does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import os
import re
import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import harness
import stack as st
from server import Binaries, call, describe, unmarked
from stack import reply_matches, skill_examples

pytestmark = pytest.mark.stack

SKILL = harness.REPO_ROOT / "skills" / "browser-shell" / "SKILL.md"
DEMO_ORIGIN = "http://127.0.0.1:8000"  # SKILL.md's demo site; the tests serve it from the fixture server
COLOR = (0xFF, 0x00, 0xAA)
# Only the fixture server's address is allowed (no allow_hosts: every other private or loopback
# address, 127.0.0.2 included, is refused as address.private).
POLICY = {"open": {"allow_private_cidrs": ["127.0.0.1/32"]}}


def with_payments(web: harness.WebServer) -> dict[str, Any]:
    """POLICY, and a click on the demo checkout's "Pay" button waits for a person: on the stack (the
    hub asks its clients nothing), through the dialog on the display, answered over VNC. Only on that
    page: a click by selector elsewhere (SKILL.md's) cannot be named, and doubt would match."""
    rule = {"name": "payments", "subcommands": ["click"], "element_roles": ["button"], "element_words": ["pay"],
            "page_url_prefixes": [web.url("/checkout")]}
    return {**POLICY, "approvals": {"wait_sec": 60, "rules": [rule]}}
APPROVE_RGB, DENY_RGB = (0x1A, 0x7F, 0x37), (0xB4, 0x23, 0x18)
# The operator's secret, given to `up` as BROWSER_SHELL_SECRETS_FILE.
SECRET = "stack-s3cret-value"
SECRETS = {
    "stack_login": {"value": SECRET, "hosts": ["127.0.0.1"]},
    # SKILL.md's login example types this one on the demo site.
    "demo_login": {"value": "demo-s3cret-value", "hosts": ["127.0.0.1"]},
}


# =========================================================================== fixtures and helpers


@pytest.fixture(scope="module")
def stack(binaries: Binaries, web: harness.WebServer) -> Iterator[st.Stack]:
    try:
        with st.running_stack(binaries.server, with_payments(web), secrets_json=SECRETS) as running:
            yield running
            pids = running.pids()
            dirs = [Path(running.env_file[k]) for k in ("STACK_STATE_DIR", "STACK_OUTPUT_DIR")]
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    # down stopped exactly the recorded process groups, and left no state or output dir behind.
    left = {name: pid for name, pid in pids.items() if _group_alive(pid)}
    assert not left, f"deploy/local/down left these process groups running: {left}"
    assert not [d for d in dirs if d.exists()], f"deploy/local/down left {[d for d in dirs if d.exists()]}"


def _group_alive(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _pgid(int(entry)) == pgid and not harness.is_zombie(int(entry)):
            return True
    return False


def _pgid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rpartition(")")[2].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def with_session(stack: st.Stack, fn, headers: dict[str, str] | None = None) -> Any:
    """Run `await fn(session)` in an MCP session over Streamable HTTP through the gateway."""

    async def main() -> Any:
        async with create_mcp_http_client(headers=headers or {"X-AIO-API-Key": stack.api_key}) as http:
            async with streamable_http_client(stack.mcp_url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    with anyio.fail_after(30):
                        await session.initialize()
                    return await fn(session)

    return anyio.run(main)


def ok(session: ClientSession, sid: str, argv: list[str], timeout_sec: int | None = None):
    async def go() -> dict[str, Any]:
        with anyio.fail_after(120):
            is_error, reply = await call(session, sid, argv, timeout_sec)
        assert not is_error and reply["exit_code"] == 0, f"{argv}: {describe(reply)}"
        return json.loads(reply["stdout"])

    return go()


def ticket(stack: st.Stack) -> str:
    reply = st.raw_http(stack.public, "POST /tickets HTTP/1.1", {"X-AIO-API-Key": stack.api_key})
    assert reply.status == 200, reply
    return json.loads(reply.body)["ticket"]


# =========================================================================== MCP over HTTP


def test_tools_list_over_the_gateway_is_exactly_browser_shell(stack):
    async def go(session: ClientSession) -> list[str]:
        return [tool.name for tool in (await session.list_tools()).tools]

    assert with_session(stack, go) == ["browser-shell"]
    # The same with the other documented header.
    assert with_session(stack, go, headers={"Authorization": f"Bearer {stack.api_key}"}) == ["browser-shell"]


def test_smoke_flow_over_http_mcp_submits_the_form_to_the_fixture_server(stack, web: harness.WebServer):
    value = "stack smoke"
    before = len(web.submitted())

    async def go(session: ClientSession) -> str:
        sid = "stack-smoke"
        opened = await ok(session, sid, ["open", web.url("/form")])
        assert opened["url"] == web.url("/form"), opened
        snap = await ok(session, sid, ["snapshot", "-i"])
        refs = re.findall(r'textbox "Query" \[ref=(e\d+)\]', snap["snapshot"])
        assert len(refs) == 1, snap
        await ok(session, sid, ["fill", f"@{refs[0]}", value])
        await ok(session, sid, ["click", f"@{refs[0]}"])
        await ok(session, sid, ["press", "Enter"])
        await ok(session, sid, ["wait", "--url", "**/submit**"], 20)
        url = (await ok(session, sid, ["get", "url"]))["url"]
        assert (await ok(session, sid, ["close"]))["closed"] is True
        return url

    url = with_session(stack, go)
    assert url == web.url("/submit?q=stack+smoke"), url
    assert web.submitted()[before:] == [value], web.submitted()


def test_a_screenshot_through_the_gateway_is_an_image_whose_digest_is_on_record(stack, web: harness.WebServer):
    """What the issue asked for, through nginx and the hub: the agent gets the picture, decodes it to the
    page's size, and the outcome record in the stack's audit log names that image's SHA-256."""
    sid = "stack-shot"

    async def go(session: ClientSession) -> tuple[dict[str, Any], Any]:
        # A pooled tab waits in the background, where Chromium sizes it like the window's front tab: the
        # first tab's --no-sandbox infobar makes that 56 px shorter. A command that needs rendering brings
        # the tab forward first, so the page is measured at the size the screenshot will have.
        await ok(session, sid, ["wait", "50"])
        await ok(session, sid, ["open", web.url("/measure?w=640&h=480")])
        metrics = json.loads(unmarked(await ok(session, sid, ["get", "title"]))["title"])
        with anyio.fail_after(120):
            result = await session.call_tool("browser-shell", {"session_id": sid, "argv": ["screenshot", "gw.png"]})
        await ok(session, sid, ["close"])
        return metrics, result

    metrics, result = with_session(stack, go)
    assert result.structured_content["exit_code"] == 0, result.structured_content
    assert [c.type for c in result.content] == ["text", "image"], result.content
    png = base64.b64decode(result.content[1].data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", png[:16]
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (round(metrics["iw"] * metrics["dpr"]), round(metrics["ih"] * metrics["dpr"])), metrics
    log = [json.loads(line) for line in (stack.run_dir / "audit.jsonl").read_text().splitlines()]
    shots = {r["call_id"] for r in log if r["phase"] == "intent" and r.get("session_id") == sid and r["argv"][0] == "screenshot"}
    outcomes = [r for r in log if r["phase"] == "outcome" and r["call_id"] in shots]
    assert len(outcomes) == 1, outcomes
    assert outcomes[0]["image_sha256"] == hashlib.sha256(png).hexdigest(), outcomes[0]
    assert outcomes[0]["page_url"] == web.url("/measure?w=640&h=480"), outcomes[0]
    # The stack runs the default, self-sized pool: it warms a daemon once sessions have come.
    started = [r for r in log if r.get("outcome") == "started"]
    assert started and all(r["detail"]["limits"]["pool"] == "auto" for r in started), started
    # Its children start as the small trampoline the stack installed beside the server.
    assert all((r["detail"]["trampoline"]["path"] or "").endswith("/hardening-trampoline") for r in started), started
    deadline = time.monotonic() + 30
    while not any(json.loads(line).get("outcome") == "pooled"
                  for line in (stack.run_dir / "audit.jsonl").read_text().splitlines()):
        assert time.monotonic() < deadline, "the stack's server never warmed a pooled daemon"
        time.sleep(0.2)


def test_python_client_uses_only_post_on_the_stateless_hub(stack):
    """The hub is stateless: no Mcp-Session-Id, so the client opens no GET stream and sends no
    DELETE on close (which the gateway would refuse). Read from the gateway's access log."""
    log = stack.log("nginx")
    start = log.stat().st_size

    async def go(session: ClientSession) -> int:
        return len((await session.list_tools()).tools)

    assert with_session(stack, go) == 1
    lines = [line for line in log.read_bytes()[start:].decode().splitlines() if " /mcp " in line]
    requests = [re.search(r'"(\S+) /mcp HTTP/1.1" (\d+)', line).groups() for line in lines]
    assert requests, f"no /mcp request in {log}"
    assert {method for method, _ in requests} == {"POST"}, requests
    assert {status for _, status in requests} <= {"200", "202"}, requests


# =========================================================================== VNC


def test_vnc_through_the_gateway_shows_the_page_the_agent_opened(stack, web: harness.WebServer):
    """The human's view: noVNC's path (a ticket, the WebSocket at /websockify, x11vnc) shows the
    page browser-shell opened, and goes on showing it once the pool has warmed a daemon after the
    session's call (each opens a window of its own, which would cover the page). Positive
    control: the colour is absent before `open`."""
    status, ws = st.WebSocket.connect(stack.public, f"/websockify?ticket={ticket(stack)}")
    assert status == 101 and ws is not None, status
    rfb = st.Rfb(ws, st.vnc_password(stack, control=False))
    try:
        assert (rfb.width, rfb.height) == (1280, 800), (rfb.width, rfb.height)
        box = (440, 350, 400, 200)  # the middle of the screen: page content, below the toolbar
        before = st.share_of(rfb.grab(*box), COLOR)
        assert before < 0.01, f"{before:.0%} of the box already has the colour before open"

        async def go(session: ClientSession) -> None:
            await ok(session, "stack-vnc", ["open", web.url("/solid?rgb=ff00aa")])

        with_session(stack, go)
        share = harness.poll(lambda: st.share_of(rfb.grab(*box), COLOR) > 0.95, within=15, interval=0.3)
        assert share, f"the colour did not appear on the VNC framebuffer (last share {st.share_of(rfb.grab(*box), COLOR):.0%})"
        refilled = harness.poll(lambda: pool_refilled_after(stack, "stack-vnc"), within=30, interval=0.3)
        assert refilled, "the pool warmed no daemon after the session's first call"
        time.sleep(0.5)  # the refill's window has been mapped and the session's tab raised again
        after = st.share_of(rfb.grab(*box), COLOR)
        assert after > 0.95, f"a pooled daemon's window covers the agent's page ({after:.0%} of the box has its colour)"
    finally:
        rfb.close()

        async def close(session: ClientSession) -> None:
            await ok(session, "stack-vnc", ["close"])

        with_session(stack, close)


def rfb_through_gateway(stack: st.Stack, password: str) -> st.Rfb:
    status, ws = st.WebSocket.connect(stack.public, f"/websockify?ticket={ticket(stack)}")
    assert status == 101 and ws is not None, status
    return st.Rfb(ws, password)


def button_on_screen(rfb: st.Rfb, rgb: tuple[int, int, int]) -> tuple[int, int] | None:
    """The centre of the block of `rgb` pixels on the screen, as a person finds the button."""
    pixels = rfb.grab(0, 0, rfb.width, rfb.height)
    hits = [(i % rfb.width, i // rfb.width) for i, p in enumerate(pixels) if p == rgb]
    if len(hits) < 200:
        return None
    xs, ys = sorted(x for x, _ in hits), sorted(y for _, y in hits)
    return xs[len(xs) // 2], ys[len(ys) // 2]


def test_on_the_stack_a_pay_click_waits_for_a_click_on_the_display_over_vnc(
    stack, web: harness.WebServer, binaries: Binaries
):
    """The hub opens no elicitation, so the stack asks by a dialog on the browser's display: a VNC
    client that may only watch (the view password) cannot answer it; one with the control password
    clicks Approve (found on the screen by its colour) and the payment runs; Deny refuses the next."""
    import threading

    sid, since = "stack-pay", len(web.seen_paths())

    async def refs_of(session: ClientSession) -> dict[str, str]:
        await ok(session, sid, ["open", web.url("/checkout")])
        snap = (await ok(session, sid, ["snapshot", "-i"]))["snapshot"]
        return {name: ref for name, ref in re.findall(r'"([^"]+)" \[ref=(e\d+)\]', snap)}

    log = stack.run_dir / "audit.jsonl"

    def pay(refs: dict[str, str]) -> dict[str, Any]:
        async def go(session: ClientSession) -> dict[str, Any]:
            return (await call(session, sid, ["click", "@" + refs["Pay 12 €"]]))[1]

        return with_session(stack, go)

    for answer, rgb in (("approve", APPROVE_RGB), ("deny", DENY_RGB)):
        refs, before = with_session(stack, refs_of), len(web.seen_paths())
        done: list[dict[str, Any]] = []
        waiting = threading.Thread(target=lambda: done.append(pay(refs)))
        waiting.start()
        watcher = rfb_through_gateway(stack, st.vnc_password(stack, control=False))
        try:
            at = harness.poll(lambda: button_on_screen(watcher, rgb), within=20, interval=0.3)
            assert at, "no approval dialog appeared on the display"
            watcher.click(*at)  # a view-only client: x11vnc drops its input
            time.sleep(1.5)
            assert waiting.is_alive() and not any(p.startswith("/paid") for p in web.seen_paths()[before:])
        finally:
            watcher.close()
        with pytest.raises(st.RfbRefused):
            rfb_through_gateway(stack, "not-it")  # a ticket (the API key) and no password: no entry
        person = rfb_through_gateway(stack, st.vnc_password(stack, control=True))

        def answered() -> bool:
            trail = [json.loads(line) for line in log.read_text().splitlines()]
            asked = [r for r in trail if r.get("phase") == "approval" and r.get("session_id") == sid]
            return bool(asked) and asked[-1].get("outcome") != "requested"

        def click_while_shown() -> bool:
            if answered():
                return True
            if shown := button_on_screen(person, rgb):
                person.click(*shown)
            return False

        try:
            # Click the button while it shows, and stay connected, until the server has the answer, as
            # a person would: x11vnc may not have passed a click on yet when a client leaves, and a
            # window mapped over the dialog (the pool's next warm-up) takes a click until the dialog
            # raises itself again.
            assert harness.poll(click_while_shown, within=30, interval=0.5), f"no answer ({answer}) on record"
            gone = harness.poll(lambda: button_on_screen(person, rgb) is None, within=20, interval=0.3)
            assert gone, f"the approval dialog stayed on the display after the answer ({answer})"
        finally:
            person.close()
        waiting.join(30)
        if not done:
            trail = [json.loads(line) for line in log.read_text().splitlines()]
            mine = [r for r in trail if r.get("session_id") == sid][-8:]
            raise AssertionError(f"the call did not come back after the click ({answer}); its last records: {mine}")
        (reply,) = done
        trail = [json.loads(line) for line in log.read_text().splitlines()]
        asked = [r for r in trail if r.get("phase") == "approval" and r.get("session_id") == sid]
        assert asked[-2]["outcome"] == "requested" and asked[-2]["approval"]["channel"] == "display", asked[-2]
        assert asked[-1]["approval"]["by"] == {"channel": "display", "display": stack.env_file["DISPLAY"]}, asked[-1]
        if answer == "approve":
            assert reply["exit_code"] == 0 and asked[-1]["outcome"] == "granted", (reply, asked[-1])

            async def paid(session: ClientSession) -> None:
                await ok(session, sid, ["wait", "--url", "**/paid**"], 20)

            with_session(stack, paid)
        else:
            assert reply["exit_code"] == 126 and "approval.denied" in reply["stderr"], reply
            assert asked[-1]["outcome"] == "denied", asked[-1]
    assert sum(p.startswith("/paid") for p in web.seen_paths()[since:]) == 1
    verified = subprocess.run([str(binaries.server), "audit", "verify", str(log)], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # The report's approvals view says who could have answered: whoever clicked on that display.
    html = subprocess.run([str(binaries.server), "audit", "report", str(log), "--format", "html"],
                          capture_output=True, text=True).stdout
    view = html.split('<h2 id="approvals">', 1)[1].split("</table>", 1)[0]
    assert f"whoever clicked on display {stack.env_file['DISPLAY']}" in view, view[:3000]


def x11_setup(display: str, cookie: bytes | None) -> tuple[int, bytes]:
    """Open `display` as any X client does, through its unix socket, with `cookie` (MIT-MAGIC-COOKIE-1)
    or none: the server's answer, 1 for a connection or 0, and its reason."""
    name = b"MIT-MAGIC-COOKIE-1" if cookie else b""
    data = cookie or b""
    pad = lambda b: b + b"\0" * (-len(b) % 4)  # noqa: E731
    request = struct.pack("<BxHHHHxx", ord("l"), 11, 0, len(name), len(data)) + pad(name) + pad(data)
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(f"/tmp/.X11-unix/X{display}")
        s.sendall(request)
        head = s.recv(8, socket.MSG_WAITALL)
        reason = s.recv(head[1], socket.MSG_WAITALL) if head[0] == 0 else b""
    return head[0], reason


def stack_cookie(path: Path) -> bytes:
    """The cookie in the stack's Xauthority file (its one entry: family, address, display, name, data)."""
    raw, fields = path.read_bytes(), []
    at = 2
    for _ in range(4):
        (length,) = struct.unpack(">H", raw[at:at + 2])
        fields.append(raw[at + 2:at + 2 + length])
        at += 2 + length
    assert fields[2] == b"MIT-MAGIC-COOKIE-1", fields
    return fields[3]


def test_on_the_stack_the_display_takes_no_client_without_the_stacks_cookie(stack):
    """Any local process may open a unix socket, a confined agent-browser child included: the stack's X
    display asks for the cookie `up` made, which only Chromium, x11vnc and browser-shell get, so a process
    without it can neither draw on the display nor click the approval dialog's buttons."""
    display = stack.env_file["DISPLAY"].lstrip(":")
    status, reason = x11_setup(display, None)
    assert status == 0 and b"uthoriz" in reason, (status, reason)
    status, reason = x11_setup(display, b"\0" * 16)
    assert status == 0, "a wrong cookie was let in"
    cookie = stack.run_dir / "xauthority"
    assert cookie.stat().st_mode & 0o777 == 0o600, oct(cookie.stat().st_mode)
    status, reason = x11_setup(display, stack_cookie(cookie))
    assert status == 1, (status, reason)


def pool_refilled_after(stack, session: str) -> bool:
    """Has a daemon whose warm-up began after `session`'s first call been pooled? Each warm-up opens
    a window. The session may have taken a ready daemon or, when its call came while a warm-up was
    still under way, started its own; either way the pool warms one afterwards."""
    records = [json.loads(line) for line in (stack.run_dir / "audit.jsonl").read_text().splitlines()]
    mine = [i for i, r in enumerate(records) if r.get("session_id") == session]
    later = records[mine[0]:] if mine else []
    warmed = {r["detail"]["daemon"] for r in later if r.get("outcome") == "warming"}
    return any(r.get("outcome") == "pooled" and r["detail"]["daemon"] in warmed for r in later)


def test_vnc_websocket_needs_a_fresh_ticket(stack):
    t = ticket(stack)
    status, ws = st.WebSocket.connect(stack.public, f"/websockify?ticket={t}")
    assert status == 101 and ws is not None
    ws.close()
    assert st.WebSocket.connect(stack.public, f"/websockify?ticket={t}")[0] == 401, "a ticket is single-use"
    assert st.WebSocket.connect(stack.public, "/websockify")[0] == 401
    assert st.WebSocket.connect(stack.public, "/websockify?ticket=made-up")[0] == 401
    assert st.WebSocket.connect(stack.public, "/websockify?x=.png")[0] == 401, "bypass 2"


# =========================================================================== gateway probes

# (request line, extra headers): refused even WITH the API key.
PROBES = [
    ("GET /v1/sandbox HTTP/1.1", {"Host": "8091-x"}),
    ("GET /json/version HTTP/1.1", {"Host": "9222-x"}),
    ("GET /api/servers HTTP/1.1", {"Host": "8079-x"}),
    ("GET /json/version HTTP/1.1", {}),
    ("GET /json/list HTTP/1.1", {}),
    ("GET /devtools/page/x HTTP/1.1", {}),
    ("GET /devtools/browser HTTP/1.1", {}),
    ("GET /cdp/json/version?x=.js HTTP/1.1", {}),
    ("POST /v1/shell/exec HTTP/1.1", {}),
    ("GET /v1/file/read HTTP/1.1", {}),
    ("GET /v1/file/download?path=/etc/shadow&x=.js HTTP/1.1", {}),
    ("GET /mcp/../v1 HTTP/1.1", {}),
    ("GET //mcp HTTP/1.1", {}),
    ("POST //mcp HTTP/1.1", {}),
    ("POST /%6dcp HTTP/1.1", {}),
    ("POST /MCP HTTP/1.1", {}),
    ("POST /mcp/ HTTP/1.1", {}),
    ("GET /code-server/ HTTP/1.1", {}),
    ("GET /jupyter/ HTTP/1.1", {}),
    ("GET /servers/browser-shell/mcp HTTP/1.1", {}),
    ("GET /status HTTP/1.1", {}),
    ("GET /sse HTTP/1.1", {}),
    ("PUT /mcp HTTP/1.1", {}),
    ("DELETE /mcp HTTP/1.1", {}),
    ("PATCH /mcp HTTP/1.1", {}),
    ("OPTIONS /mcp HTTP/1.1", {}),
    ("GET /tickets HTTP/1.1", {}),
    ("POST /tickets?ticket=x HTTP/1.1", {}),
    ("GET /vnc/../mcp HTTP/1.1", {}),
]


@pytest.mark.parametrize(("request_line", "headers"), PROBES, ids=[f"{h.get('Host', '')} {r.rsplit(' ', 1)[0]}".strip() for r, h in PROBES])
def test_gateway_probe_is_refused_with_and_without_the_key(stack, request_line, headers):
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}' if request_line.startswith(("POST", "PUT", "PATCH")) else b""
    common = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers}
    with_key = st.raw_http(stack.public, request_line, {**common, "X-AIO-API-Key": stack.api_key}, body)
    assert with_key.status in (403, None), f"{request_line} {headers} with the key: {with_key.status} {with_key.body[:200]!r}"
    without = st.raw_http(stack.public, request_line, common, body)
    assert without.status in (401, 403, None), f"{request_line} {headers} without a key: {without.status}"


def test_the_gateway_lets_keyed_mcp_calls_vnc_files_and_keyed_ticket_requests_through(stack):
    """The positive controls of the probes above: with the key POST /mcp answers, without it or
    with a wrong one it is refused (403 with a JSON-RPC error: a 401 sends MCP clients into OAuth);
    noVNC's page and scripts need no key; a keyed POST /tickets mints a ticket, an unkeyed one is
    refused."""
    key = {"X-AIO-API-Key": stack.api_key}
    mcp_headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    tools_list = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    reply = st.raw_http(stack.public, "POST /mcp HTTP/1.1", {**mcp_headers, **key}, tools_list)
    assert reply.status == 200, reply
    assert [t["name"] for t in json.loads(reply.body)["result"]["tools"]] == ["browser-shell"]
    assert st.raw_http(stack.public, "POST /mcp HTTP/1.1", mcp_headers, tools_list).status == 403
    wrong = {"X-AIO-API-Key": stack.api_key[:-1] + ("A" if stack.api_key[-1] != "A" else "B")}
    assert st.raw_http(stack.public, "POST /mcp HTTP/1.1", {**mcp_headers, **wrong}, tools_list).status == 403

    page = st.raw_http(stack.public, "GET /vnc/vnc.html HTTP/1.1")
    assert page.status == 200 and b"noVNC" in page.body, page.status
    script = st.raw_http(stack.public, "GET /vnc/app/ui.js HTTP/1.1")
    assert script.status == 200 and "javascript" in script.headers.get("content-type", ""), script.headers

    minted = st.raw_http(stack.public, "POST /tickets HTTP/1.1", key)
    assert minted.status == 200, minted
    data = json.loads(minted.body)
    assert isinstance(data["ticket"], str) and len(data["ticket"]) >= 20 and data["expires_in"] > 0, data
    assert st.raw_http(stack.public, "POST /tickets HTTP/1.1").status in (401, 403)


def test_mcp_answers_json_to_a_post_that_accepts_it_and_406_otherwise(stack):
    """As documented in deploy/README.md: the hub answers JSON (not SSE); a POST must accept
    application/json (406 otherwise), a GET must accept text/event-stream (406 otherwise)."""
    key = {"X-AIO-API-Key": stack.api_key, "Content-Type": "application/json"}
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    json_only = st.raw_http(stack.public, "POST /mcp HTTP/1.1", {**key, "Accept": "application/json"}, body)
    assert json_only.status == 200 and json_only.headers["content-type"].startswith("application/json"), json_only
    no_accept = st.raw_http(stack.public, "POST /mcp HTTP/1.1", key, body)
    assert no_accept.status == 406, no_accept
    assert st.raw_http(stack.public, "POST /mcp HTTP/1.1", {**key, "Accept": "text/event-stream"}, body).status == 406
    assert st.raw_http(stack.public, "GET /mcp HTTP/1.1", {"X-AIO-API-Key": stack.api_key}).status == 406


# =========================================================================== listening sockets


def test_every_listening_socket_of_the_stack_is_on_loopback(stack):
    recorded = set(stack.pids().values())
    state_sock = f"AGENT_BROWSER_SOCKET_DIR={stack.env_file['STACK_STATE_DIR']}/sock"
    ours: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if _pgid(pid) in recorded:
            ours.add(pid)
            continue
        env = harness.proc_environ(pid)
        if f"AGENT_BROWSER_SOCKET_DIR={env.get('AGENT_BROWSER_SOCKET_DIR')}" == state_sock:
            ours.add(pid)  # agent-browser daemons of this stack (they leave the hub's group)
    out = subprocess.run(["ss", "-H", "-ltnp"], capture_output=True, text=True, check=True).stdout
    seen: dict[int, str] = {}
    for line in out.splitlines():
        fields = line.split()
        local = fields[3]
        pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        port = int(local.rsplit(":", 1)[1])
        if pids & ours or port in stack.ports.values():
            assert local.rsplit(":", 1)[0] in ("127.0.0.1", "[::1]"), f"not loopback: {line}"
            seen[port] = local
    # Positive control: every port of the stack was found (and attributed to the stack).
    assert set(stack.ports.values()) <= set(seen), f"ports {stack.ports} vs listening {seen}"


# =========================================================================== SKILL.md examples


async def settle(web: harness.WebServer, quiet: float = 0.3, limit: float = 5.0) -> None:
    """Wait until the demo site has seen no new request for `quiet` seconds (at most `limit`)."""
    deadline = anyio.current_time() + limit
    seen, since = len(web.seen_paths()), anyio.current_time()
    while anyio.current_time() < deadline:
        await anyio.sleep(0.05)
        if len(web.seen_paths()) != seen:
            seen, since = len(web.seen_paths()), anyio.current_time()
        elif anyio.current_time() - since >= quiet:
            return


def test_skill_md_examples_run_as_documented(stack, web: harness.WebServer):
    text = SKILL.read_text()
    assert DEMO_ORIGIN in text
    origin = web.url("").rstrip("/")
    examples = [
        (json.loads(json.dumps(c).replace(DEMO_ORIGIN, origin)), r and json.loads(json.dumps(r).replace(DEMO_ORIGIN, origin)))
        for c, r in skill_examples(text)
    ]
    # The doc is not empty of what it promises: flows, refusals, and shown replies.
    subcommands = {c["argv"][0] for c, _ in examples}
    assert {"open", "snapshot", "click", "fill", "press", "wait", "get", "select", "check", "screenshot", "close", "eval"} <= subcommands, subcommands
    refusals = [r for _, r in examples if r and r["exit_code"] == 126]
    assert len(refusals) >= 3 and len([r for _, r in examples if r]) >= 10, examples

    async def go(session: ClientSession) -> list[str]:
        failures: list[str] = []
        for call_args, expected in examples:
            if expected and expected["exit_code"] == 126:
                # A navigation started by an earlier command (a click on a submit button) may
                # reach the demo site after that command returned; let it land first, so only
                # requests made during the refused call are counted against it.
                await settle(web)
            seen_before = len(web.seen_paths())
            with anyio.fail_after(120):
                result = await session.call_tool("browser-shell", call_args)
            actual = result.structured_content
            want = expected or {"session_id": call_args["session_id"], "exit_code": 0}
            if not reply_matches(want, actual):
                failures.append(f"{json.dumps(call_args)}\n  documented: {json.dumps(want)}\n  actual:     {json.dumps(actual)}")
            if call_args["argv"][0] == "screenshot" and actual["exit_code"] == 0:
                # As SKILL.md says: the picture follows the JSON, through the hub and the gateway.
                images = [c for c in result.content[1:] if c.type == "image" and c.mime_type == "image/png"]
                if len(images) != 1 or base64.b64decode(images[0].data)[:8] != b"\x89PNG\r\n\x1a\n":
                    failures.append(f"{json.dumps(call_args)}: no PNG image after the JSON: {[c.type for c in result.content]}")
            if want["exit_code"] == 126 and len(web.seen_paths()) != seen_before:
                failures.append(f"{json.dumps(call_args)} was refused but the demo site saw {web.seen_paths()[seen_before:]}")
        return failures

    failures = with_session(stack, go)
    assert not failures, f"{len(failures)} of {len(examples)} SKILL.md examples do not behave as documented:\n" + "\n".join(failures)
    # The form flow really reached the demo site.
    assert any(p.startswith("/thanks?email=me%40example.com&country=NL&terms=yes") for p in web.seen_paths())



# =========================================================================== the policy of a running stack


def test_up_allow_changes_what_the_running_stack_may_reach_without_a_restart(stack, binaries: Binaries):
    """`deploy/local/up --allow URL` on a running stack: its server reloads the policy (audited),
    the same server process answers (no session lost), and `--allow none` takes it back."""
    policy = stack.run_dir.parent / f"{stack.run_dir.name}.policy.json"
    env = st.stack_env(stack.run_dir, stack.ports, policy, binaries.server)
    audit_log = stack.run_dir / "audit.jsonl"

    def up_allow(value: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(st.UP), "--allow", value], env=env, capture_output=True, text=True, timeout=60)

    def open_other(session: ClientSession, url: str):
        async def go():
            with anyio.fail_after(120):
                return await call(session, "allow-1", ["open", url])

        return go()

    with harness.run_web_server("127.0.0.2") as other:
        url = other.url("/form")
        is_error, reply = with_session(stack, lambda s: open_other(s, url))
        assert is_error and reply["stderr"].startswith("refused [address.private]"), describe(reply)

        run = up_allow(f"http://127.0.0.2:{other.port}")
        assert run.returncode == 0 and "reloaded" in run.stdout, run.stdout + run.stderr
        is_error, reply = with_session(stack, lambda s: open_other(s, url))
        assert not is_error and json.loads(reply["stdout"])["url"] == url, describe(reply)
        assert "/form" in other.seen_paths()

        run = up_allow("none")
        assert run.returncode == 0 and "reloaded" in run.stdout, run.stdout + run.stderr
        is_error, reply = with_session(stack, lambda s: open_other(s, url))
        assert is_error and reply["stderr"].startswith("refused [address.private]"), describe(reply)

    records = [json.loads(line) for line in audit_log.read_text().splitlines()]
    life = [r["outcome"] for r in records if r["phase"] == "lifecycle" and r.get("outcome") in ("started", "reloaded")]
    assert life.count("started") == 1 and life.count("reloaded") == 2, life

    bad = up_allow("http://intranet.example:8765/")
    assert bad.returncode != 0 and "only IP literals and localhost" in bad.stderr, bad.stderr


def test_the_stacks_chromium_profile_forbids_downloads(stack):
    """Beside browser-shell's CDP deny: the profile the stack's Chromium runs with blocks downloads."""
    prefs = json.loads((stack.run_dir / "chromium-profile" / "Default" / "Preferences").read_text())
    assert prefs.get("download_restrictions") == 3, sorted(prefs)


def type_secret_through_the_gateway(stack: st.Stack, web: harness.WebServer, sid: str, value: str) -> None:
    """Fill `{{secret:stack_login}}` and submit, through /mcp; the page must receive `value`, and no reply
    and no audit record may carry it."""
    replies: list[str] = []

    async def go(session: ClientSession) -> None:
        for argv in (["open", web.url("/form")], ["fill", "#q", "{{secret:stack_login}}"], ["click", "#go"]):
            replies.append(json.dumps(await ok(session, sid, argv)))

    async def close(session: ClientSession) -> None:
        replies.append(json.dumps(await ok(session, sid, ["close"])))

    with_session(stack, go)
    # The form's submission may land after the click returned; `close` ends the session's browser
    # context, and whatever it still had in flight with it, so it waits for the submission.
    deadline = time.monotonic() + 10
    while value not in web.submitted() and time.monotonic() < deadline:
        time.sleep(0.1)
    with_session(stack, close)
    assert value in web.submitted(), web.submitted()
    assert not any(value in r for r in replies), replies
    assert value not in (stack.run_dir / "audit.jsonl").read_text()


def test_a_secret_given_to_up_is_typed_through_the_gateway_and_never_shown(stack, web: harness.WebServer):
    """`up` with BROWSER_SHELL_SECRETS_FILE: the agent types `{{secret:stack_login}}` through /mcp, and the
    page receives the value; a changed file reaches the running server with `up --allow` (its policy
    reload), sessions kept."""
    type_secret_through_the_gateway(stack, web, "stack-secret", SECRET)
    assert oct((stack.run_dir / "secrets.json").stat().st_mode & 0o777) == "0o600"
    changed = "stack-s3cret-rotated"
    source = Path(stack.env["BROWSER_SHELL_SECRETS_FILE"])
    source.write_text(json.dumps({"stack_login": {"value": changed, "hosts": ["127.0.0.1"]}}))
    again = subprocess.run([str(st.UP), "--allow", "none"], env=stack.env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    type_secret_through_the_gateway(stack, web, "stack-secret-2", changed)


# =========================================================================== the newcomer's first calls


def test_the_readmes_quick_start_call_and_verify_work_on_moved_ports(stack, binaries: Binaries):
    """The README's quick start, from its port line to `audit verify`, run as written on this stack
    (whose ports are not the defaults): the call opens a page, and verify names no side file."""
    text = (harness.REPO_ROOT / "README.md").read_text()
    block = text.split("## 60-second quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("port="))
    verify = next(i for i, line in enumerate(lines) if "audit verify" in line)
    call_lines = [line for line in lines[start:verify] if not line.startswith("deploy/local/")]
    script = "\n".join([*call_lines, lines[verify].replace("target/release/browser-shell", str(binaries.server))])
    env = {**os.environ, "STACK_RUN_DIR": str(stack.run_dir)}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    # The hub answers JSON (an SSE event's data line, where a server chooses SSE), then verify speaks.
    body = done.stdout[done.stdout.index("{"):]
    reply, _ = json.JSONDecoder().raw_decode(body)
    assert reply["result"]["structuredContent"]["exit_code"] == 0, reply
    assert "INTACT" in done.stdout, done.stdout
    assert "skipped" not in done.stderr, done.stderr


def test_up_ends_with_a_first_call_that_works_on_its_own_port(stack):
    printed = stack.up_log.read_text()
    assert f"http://127.0.0.1:{stack.public}/mcp" in printed
    assert f'"url": "http://127.0.0.1:{stack.public}/mcp"' in printed, "no client config for this stack's port"
    lines = printed.split("A first call", 1)[1].splitlines()[1:4]
    command = "\n".join(line.strip() for line in lines)
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and '"exit_code":0' in done.stdout.replace(" ", ""), done.stdout + done.stderr
