"""The local stack's gateway as MCP clients and people meet it (issue 32, items 7, 8 and 11).

- A wrong or missing API key, through the official Python client and the Inspector CLI, ends in a
  message naming the key header (a 401 made both start or expect OAuth and hid the gateway's text).
- A foreign `Host` or `Origin` is refused, with or without the key (DNS rebinding); the stack's own
  loopback names and the operator's `GATEWAY_ALLOWED_HOSTS` pass.
- The official MCP conformance suite (tests/conformance, pinned) runs the scenarios that apply to a
  stateless one-tool server against `/mcp`, and every check passes.
- noVNC opened without a valid ticket says what is missing and how to get one, in a real browser.

One stack for this module (deploy/local/up on free ports, `down` at the end); every address is on
loopback. The operator's extra name below is only ever sent as a header, never resolved.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

import harness
import stack as st
from server import Binaries

pytestmark = pytest.mark.stack

POLICY: dict = {}
# An operator's extra name for the gateway (sent as Host/Origin only; nothing resolves it).
EXTRA_HOST = "browser-shell-gw.example:8443"
TOOLS_LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INSPECTOR_BIN = harness.REPO_ROOT / "tests" / "inspector" / "node_modules" / ".inspector-bin"
CONFORMANCE_BIN = harness.REPO_ROOT / "tests" / "conformance" / "node_modules" / ".conformance-bin"
# The conformance scenarios that apply to this server: a stateless hub in front of one tool. The
# others need the suite's fixture tools, resources, prompts, logging, sampling or elicitation (which
# a one-tool server does not have by design) or a stateful hub (the SSE scenarios). Three more pass
# without saying anything about this server: tools-call-error and tools-call-simple-text because the
# hub turns the unknown tool's JSON-RPC error into an isError result, completion-complete because the
# hub answers completion/complete itself (empty values, for a prompt that does not exist).
CONFORMANCE_SCENARIOS = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"]


@pytest.fixture(scope="module")
def stack(binaries: Binaries) -> Iterator[st.Stack]:
    try:
        with st.running_stack(binaries.server, POLICY, extra_env={"GATEWAY_ALLOWED_HOSTS": EXTRA_HOST}) as running:
            yield running
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


def wrong_key(stack: st.Stack) -> str:
    return stack.api_key[:-1] + ("A" if stack.api_key[-1] != "A" else "B")


# =========================================================================== 7. a wrong key, through real clients


def python_client_error(stack: st.Stack, headers: dict[str, str]) -> str:
    """Initialize with the official Python client; the MCPError message it raises."""

    async def main() -> None:
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(stack.mcp_url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    with anyio.fail_after(30):
                        await session.initialize()

    try:
        anyio.run(main)
    except BaseException as exc:  # noqa: BLE001 - the client raises an ExceptionGroup around it
        found = [e for e in _leaves(exc) if isinstance(e, MCPError)]
        assert found, f"no MCPError in {exc!r}"
        return str(found[0])
    raise AssertionError("initialize succeeded without a valid key")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


@pytest.mark.parametrize("credential", ["wrong-key", "wrong-bearer", "none"])
def test_the_python_client_without_a_valid_key_is_told_which_header_to_send(stack, credential):
    headers = {
        "wrong-key": {"X-AIO-API-Key": wrong_key(stack)},
        "wrong-bearer": {"Authorization": f"Bearer {wrong_key(stack)}"},
        "none": {},
    }[credential]
    message = python_client_error(stack, headers)
    assert "X-AIO-API-Key: <key>" in message and "Authorization: Bearer" in message, message
    assert "api-key" in message, message


def run_inspector(stack: st.Stack, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not (INSPECTOR_BIN / "node").exists():
        pytest.fail(f"the MCP Inspector is not installed in {INSPECTOR_BIN.parent.parent}: run tests/inspector/install", pytrace=False)
    argv = [str(INSPECTOR_BIN / "node"), str(INSPECTOR_BIN / "inspector"), "--cli", stack.mcp_url, "--transport", "http", *args]
    home.mkdir(parents=True, exist_ok=True)
    run = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "HOME": str(home)}
    )
    print(f"\n[e2e] inspector {' '.join(args[:1])}... -> exit {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    return run


@pytest.mark.parametrize("credential", ["wrong-key", "none"])
def test_the_inspector_cli_without_a_valid_key_is_told_which_header_to_send(stack, tmp_path, credential):
    header = ["--header", f"X-AIO-API-Key: {wrong_key(stack)}"] if credential == "wrong-key" else []
    run = run_inspector(stack, tmp_path / "home", *header, "--method", "tools/list")
    said = run.stdout + run.stderr
    assert run.returncode != 0, said
    assert "X-AIO-API-Key: <key>" in said and "Authorization: Bearer" in said, said
    assert "OAuth" not in said.replace("no OAuth", ""), said


def test_the_inspector_cli_with_the_key_lists_the_one_tool(stack, tmp_path):
    """Positive control of the test above: the same client and transport, with the key."""
    run = run_inspector(stack, tmp_path / "home", "--header", f"X-AIO-API-Key: {stack.api_key}", "--method", "tools/list", "--format", "json")
    assert run.returncode == 0, run.stdout + run.stderr
    assert [t["name"] for t in json.loads(run.stdout)["result"]["tools"]] == ["browser-shell"], run.stdout


def test_mcp_refuses_a_missing_key_with_a_json_rpc_error_and_other_routes_keep_the_401(stack):
    for line in ("POST /mcp HTTP/1.1", "GET /mcp HTTP/1.1"):
        reply = st.raw_http(stack.public, line, MCP_HEADERS, TOOLS_LIST if line.startswith("POST") else b"")
        assert reply.status == 403 and reply.headers["content-type"] == "application/json", (line, reply)
        assert "www-authenticate" not in reply.headers, reply.headers
        body = json.loads(reply.body)
        assert body["jsonrpc"] == "2.0" and body["id"] is None and "X-AIO-API-Key" in body["error"]["message"], body
    # Logged as itself, not as the page that answered it.
    assert '"POST /mcp HTTP/1.1" 403 ' in stack.log("nginx").read_text()
    # Routes that MCP clients never use keep the text/plain 401.
    tickets = st.raw_http(stack.public, "POST /tickets HTTP/1.1")
    assert tickets.status == 401 and tickets.headers["content-type"].startswith("text/plain"), tickets
    assert b"X-AIO-API-Key" in tickets.body and b"vnc-url" in tickets.body, tickets.body


# =========================================================================== 11. Host and Origin


FOREIGN = [
    {"Host": "evil.example.com"},
    {"Host": "evil.example.com:{0}"},  # the stack's port under another name ({0}: filled in below)
    {"Host": "127.0.0.2:{0}"},
    {"Host": "127.0.0.1:1"},
    {"Origin": "http://evil.example.com"},
    {"Origin": "null"},
    {"Origin": "http://127.0.0.1:1"},
    {"Host": "evil.example.com", "Origin": "http://evil.example.com"},
]


@pytest.mark.parametrize("foreign", FOREIGN, ids=lambda h: " ".join(f"{k}={v}" for k, v in h.items()))
def test_a_foreign_host_or_origin_is_refused_even_with_the_key(stack, foreign):
    headers = {k: v.format(stack.public) for k, v in foreign.items()}
    key = {"X-AIO-API-Key": stack.api_key}
    reply = st.raw_http(stack.public, "POST /mcp HTTP/1.1", {**MCP_HEADERS, **key, **headers}, TOOLS_LIST)
    assert reply.status == 403, (headers, reply)
    assert "DNS rebinding" in json.loads(reply.body)["error"]["message"], reply.body
    # Every route of the gateway, not only /mcp.
    assert st.raw_http(stack.public, "POST /tickets HTTP/1.1", {**key, **headers}).status == 403
    assert st.raw_http(stack.public, "GET /vnc/vnc.html HTTP/1.1", headers).status == 403
    status, ws = st.WebSocket.connect(stack.public, f"/websockify?ticket={ticket(stack)}", headers)
    assert status == 403 and ws is None, status


@pytest.mark.parametrize(
    "names",
    [
        {"Host": "localhost:{0}"},
        {"Host": "LOCALHOST:{0}", "Origin": "http://localhost:{0}"},
        {"Host": "[::1]:{0}", "Origin": "http://[::1]:{0}"},
        {"Host": "127.0.0.1:{0}", "Origin": "http://127.0.0.1:{0}"},
        {"Host": EXTRA_HOST},
        {"Host": EXTRA_HOST, "Origin": f"https://{EXTRA_HOST}"},
    ],
    ids=lambda h: " ".join(f"{k}={v}" for k, v in h.items()),
)
def test_the_stacks_own_names_and_the_operators_pass(stack, names):
    headers = {k: v.format(stack.public) for k, v in names.items()}
    reply = st.raw_http(stack.public, "POST /mcp HTTP/1.1", {**MCP_HEADERS, "X-AIO-API-Key": stack.api_key, **headers}, TOOLS_LIST)
    assert reply.status == 200, (headers, reply)
    assert [t["name"] for t in json.loads(reply.body)["result"]["tools"]] == ["browser-shell"]


def test_the_conformance_suite_passes_the_scenarios_that_apply(stack, tmp_path):
    """The official suite, pinned in tests/conformance, against the gateway's /mcp (the API key is
    added to its requests by a preload: the suite has no option for headers)."""
    if not (CONFORMANCE_BIN / "node").exists():
        pytest.fail(f"the MCP conformance suite is not installed in {CONFORMANCE_BIN.parent.parent}: run tests/conformance/install", pytrace=False)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CONFORMANCE_API_KEY_FILE": str(stack.run_dir / "api-key")}
    failures: list[str] = []
    for scenario in CONFORMANCE_SCENARIOS:
        out = tmp_path / scenario
        argv = [
            str(CONFORMANCE_BIN / "node"), "--import", str(CONFORMANCE_BIN / "with-api-key.mjs"), str(CONFORMANCE_BIN / "conformance"),
            "server", "--url", stack.mcp_url, "--scenario", scenario, "-o", str(out),
        ]  # fmt: skip
        run = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
        print(f"\n[e2e] conformance {scenario} -> exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-2000:]}")
        checks = [c for f in sorted(out.rglob("checks.json")) for c in json.loads(f.read_text())]
        if not checks:
            failures.append(f"{scenario}: no checks.json (exit {run.returncode}): {run.stdout[-1500:]} {run.stderr[-1500:]}")
            continue
        bad = [c for c in checks if c["status"] not in ("SUCCESS", "INFO")]
        if run.returncode != 0 or bad:
            failures.append(f"{scenario}: exit {run.returncode}, " + "; ".join(f"{c['id']}: {c['status']} {c.get('errorMessage', '')}" for c in bad))
    assert not failures, "\n".join(failures)


# =========================================================================== 8. noVNC without a ticket


def ticket(stack: st.Stack) -> str:
    reply = st.raw_http(stack.public, "POST /tickets HTTP/1.1", {"X-AIO-API-Key": stack.api_key})
    assert reply.status == 200, reply
    return json.loads(reply.body)["ticket"]


def test_the_novnc_page_carries_the_ticket_help(stack):
    page = st.raw_http(stack.public, "GET /vnc/vnc.html HTTP/1.1")
    assert page.status == 200 and b"noVNC" in page.body, page.status
    assert page.body.count(b"browser-shell-ticket-help") == 1, "the help script is added once"
    assert b"deploy/local/vnc-url" in page.body and b"POST /tickets" in page.body


def novnc_url(stack: st.Stack, ticket_value: str | None) -> str:
    path = "websockify" if ticket_value is None else f"websockify?ticket={ticket_value}"
    url = f"http://127.0.0.1:{stack.public}/vnc/vnc.html?autoconnect=1&path={urllib.parse.quote(path, safe='')}"
    return f"{url}#password={st.vnc_password(stack, control=False)}"


STATE_JS = """JSON.stringify({
  help: (document.getElementById("browser-shell-ticket-help") || {}).innerText || null,
  connected: document.documentElement.classList.contains("noVNC_connected"),
  status: (document.getElementById("noVNC_status") || {}).textContent || ""
})"""


def browser_state(chromium_port: int, url: str, done, timeout: float = 30) -> dict:
    """Open `url` in a new tab of a real (headless) Chromium and read the page's state until
    `done(state)` holds or `timeout` passes; the last state."""
    import websockets

    req = urllib.request.Request(f"http://127.0.0.1:{chromium_port}/json/new?{urllib.parse.quote(url, safe='')}", method="PUT")
    with urllib.request.urlopen(req, timeout=10) as resp:
        target = json.loads(resp.read())

    async def run() -> dict:
        state: dict = {}
        async with websockets.connect(target["webSocketDebuggerUrl"], max_size=None) as ws:
            deadline = time.monotonic() + timeout
            n = 0
            while True:
                n += 1
                await ws.send(json.dumps({"id": n, "method": "Runtime.evaluate", "params": {"expression": STATE_JS, "returnByValue": True}}))
                while True:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    if message.get("id") == n:
                        break
                value = message.get("result", {}).get("result", {}).get("value")
                state = json.loads(value) if isinstance(value, str) else {}
                if (state and done(state)) or time.monotonic() > deadline:
                    return state
                await asyncio.sleep(0.2)

    try:
        return asyncio.run(run())
    finally:
        with urllib.request.urlopen(f"http://127.0.0.1:{chromium_port}/json/close/{target['id']}", timeout=10):
            pass


def test_in_a_browser_novnc_without_a_valid_ticket_says_how_to_get_one(stack, tmp_path):
    """A person's view, in real Chromium: noVNC with no ticket, and with one already used (a
    reload), shows the help naming deploy/local/vnc-url; with a fresh ticket it connects and shows
    none (positive control)."""
    used = ticket(stack)
    status, ws = st.WebSocket.connect(stack.public, f"/websockify?ticket={used}")
    assert status == 101 and ws is not None
    ws.close()
    with harness.run_chromium(tmp_path) as chromium:
        for label, value in (("no ticket", None), ("a used ticket", used)):
            state = browser_state(chromium.port, novnc_url(stack, value), lambda s: s["help"] and "Failed" in s["status"])
            assert state.get("help") and "deploy/local/vnc-url" in state["help"], (label, state)
            assert "POST /tickets" in state["help"] and "reloading this page" in state["help"], (label, state)
            assert "Failed to connect" in state["status"] and not state["connected"], (label, state)
        state = browser_state(chromium.port, novnc_url(stack, ticket(stack)), lambda s: s["connected"])
        assert state.get("connected") and state["help"] is None, state

