"""MCP protocol surface: the tool listing, the reply envelope, and robustness against bad JSON-RPC."""

from __future__ import annotations

import json
import queue
import os
import re
import select
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from server import REPLY_KEYS, STDERR_LOGS, cleanup_server, new_server_config

pytestmark = pytest.mark.chromium


def test_tools_list_has_exactly_one_tool(server) -> None:
    listing = server.run(lambda session: session.list_tools())
    names = [tool.name for tool in listing.tools]
    assert names == ["browser-shell"], f"expected exactly one tool 'browser-shell', got {names}"
    tool = listing.tools[0]
    schema = tool.input_schema
    assert schema.get("type") == "object", schema
    assert schema.get("additionalProperties") is False, (
        f"inputSchema must have additionalProperties: false, got {schema.get('additionalProperties')!r}\n"
        f"{json.dumps(schema, indent=1)}"
    )
    assert set(schema.get("required", [])) >= {"session_id", "argv"}, schema.get("required")
    props = schema.get("properties", {})
    assert {"session_id", "argv", "timeout_sec"} <= set(props), sorted(props)
    assert tool.output_schema is not None, "tool declares no outputSchema"
    out_props = tool.output_schema.get("properties", {})
    assert set(REPLY_KEYS) <= set(out_props), f"outputSchema properties {sorted(out_props)} lack {REPLY_KEYS}"


def test_reply_is_exactly_the_documented_envelope(server, web) -> None:
    """structuredContent carries exactly session_id/exit_code/stdout/stderr and never echoes argv."""
    marker_url = web.url("/next?argv-echo-probe=zq9x")
    is_error, reply = server.call("env1", ["open", marker_url])
    assert not is_error and reply["exit_code"] == 0, reply
    assert set(reply) == set(REPLY_KEYS), f"unexpected keys in structuredContent: {sorted(reply)}"

    is_error, reply = server.call("env1", ["get", "url"])
    assert not is_error and reply["exit_code"] == 0, reply
    assert set(reply) == set(REPLY_KEYS), f"unexpected keys in structuredContent: {sorted(reply)}"
    assert reply["stdout"].endswith("\n"), repr(reply["stdout"])
    data = json.loads(reply["stdout"])
    assert data == {"url": marker_url}, data

    # A refused call carries a distinctive argv item; the reply must not contain it.
    probe = "argv-echo-probe-7f3a"
    is_error, reply = server.call("env1", ["frobnicate", probe])
    assert is_error and reply["exit_code"] == 126, reply
    assert probe not in json.dumps(reply), f"reply echoes the argv: {reply}"


# --------------------------------------------------------------------------- raw JSON-RPC


class RawServer:
    """browser-shell spawned with plain pipes, to speak (and mis-speak) JSON-RPC by hand."""

    def __init__(self, argv: list[str], env: dict[str, str], stderr_path: Path) -> None:
        self._stderr = open(stderr_path, "ab")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.transcript: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, raw: bytes | str) -> None:
        if isinstance(raw, str):
            raw = raw.encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw if raw.endswith(b"\n") else raw + b"\n")
        self.proc.stdin.flush()

    def read_lines(self, quiet: float, deadline: float) -> list[bytes]:
        """Collect stdout lines until none arrives for `quiet` s (or `deadline` s overall)."""
        return self._collect(deadline, quiet=quiet)

    def read_until(self, wanted, deadline: float) -> list[bytes]:
        """Collect stdout lines until one satisfies `wanted` (or `deadline` s pass): a server still
        starting on a loaded machine answers late, which a quiet period would take for silence."""
        return self._collect(deadline, wanted=wanted)

    def _collect(self, deadline: float, quiet: float | None = None, wanted=None) -> list[bytes]:
        got: list[bytes] = []
        end = time.monotonic() + deadline
        while (left := end - time.monotonic()) > 0:
            try:
                item = self.lines.get(timeout=min(left, quiet) if quiet is not None else left)
            except queue.Empty:
                break
            if item is None:
                break
            got.append(item)
            self.transcript.append(item.decode("utf-8", "replace").rstrip("\n"))
            if wanted is not None and wanted(item):
                break
        return got

    def request(self, msg: dict[str, Any], timeout: float = 15) -> dict[str, Any]:
        """Send a request and return the response with the same id (other lines are kept)."""
        self.send(json.dumps(msg))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                item = self.lines.get(timeout=max(0.05, end - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                raise AssertionError(
                    f"server closed stdout (exit={self.proc.poll()}) before answering {msg.get('method')}"
                )
            text = item.decode("utf-8", "replace").rstrip("\n")
            self.transcript.append(text)
            parsed = assert_jsonrpc_line(item)
            if parsed.get("id") == msg["id"]:
                return parsed
        raise AssertionError(f"no answer to {msg.get('method')} (id {msg['id']}) within {timeout}s")

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, OSError):
            self.proc.kill()
            self.proc.wait(timeout=5)
        finally:
            self._stderr.close()


def assert_jsonrpc_line(line: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(line)
    except ValueError as exc:
        raise AssertionError(f"server wrote a non-JSON line to stdout ({exc}): {line!r}") from None
    assert isinstance(parsed, dict) and parsed.get("jsonrpc") == "2.0", (
        f"server wrote a stdout line that is not a JSON-RPC 2.0 message: {line!r}"
    )
    return parsed


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "e2e-raw", "version": "0"},
    },
}

GARBAGE: list[tuple[str, bytes]] = [
    ("not-json", b"{not json"),
    ("wrong-shape-method-number", b'{"jsonrpc":"2.0","id":"w1","method":42}'),
    ("wrong-shape-no-jsonrpc", b'{"id":"w2","method":"tools/list"}'),
    ("json-array-of-garbage", b"[1,2,3]"),
]


@pytest.fixture
def raw_server(binaries, chromium):
    cfg = new_server_config(binaries, chromium.port, tag="bsr")
    cfg.base.mkdir(parents=True, exist_ok=True)
    STDERR_LOGS.watch(cfg.stderr_log)
    env = cfg.env()
    srv = RawServer(cfg.argv(), env, cfg.stderr_log)
    yield srv
    harness_report = "\n".join(srv.transcript)
    print(f"\n[e2e] raw JSON-RPC transcript (server stdout):\n{harness_report}")
    srv.close()
    cleanup_server(cfg)


def _send_garbage_and_check(raw: RawServer, phase: str) -> dict[str, list[str]]:
    answers: dict[str, list[str]] = {}
    for name, payload in GARBAGE:
        raw.send(payload)
        lines = raw.read_lines(quiet=0.7, deadline=5)
        for line in lines:
            assert_jsonrpc_line(line)
        answers[name] = [line.decode("utf-8", "replace").rstrip("\n") for line in lines]
        assert raw.proc.poll() is None, (
            f"server exited with {raw.proc.returncode} after {phase} garbage {name!r} ({payload!r})"
        )
    print(f"\n[e2e] {phase} garbage answers: {json.dumps(answers, indent=1)}")
    return answers


@pytest.mark.parametrize("phase", ["pre-initialize", "post-initialize"])
def test_malformed_jsonrpc_is_answered_only_in_jsonrpc_and_the_server_keeps_serving(raw_server: RawServer, phase: str) -> None:
    """Garbage before or after `initialize`: whatever the server answers must be JSON-RPC (checked
    line by line), and the same process must still be alive and serving afterwards."""
    if phase == "pre-initialize":
        _send_garbage_and_check(raw_server, phase)
    init = raw_server.request(INIT)
    assert "result" in init, f"initialize after garbage failed: {init}"
    raw_server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    if phase == "post-initialize":
        _send_garbage_and_check(raw_server, phase)
    listing = raw_server.request({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert [t["name"] for t in listing["result"]["tools"]] == ["browser-shell"], listing
    # Every stdout line seen so far was JSON-RPC (checked as it arrived); nothing else leaked.
    for line in raw_server.transcript:
        assert_jsonrpc_line(line.encode())


def test_an_unparsable_line_gets_a_jsonrpc_parse_error_with_id_null(raw_server: RawServer) -> None:
    """JSON-RPC 2.0 section 5: an unparsable message is answered with -32700 and id null."""
    raw_server.send(b"{not json")

    def parse_error(line: bytes) -> bool:
        m = assert_jsonrpc_line(line)
        return isinstance(m.get("error"), dict) and m["error"].get("code") == -32700 and m.get("id") is None

    lines = raw_server.read_until(parse_error, deadline=30)
    assert lines and parse_error(lines[-1]), (
        f"no -32700 parse-error response to a garbage line; server answered {[l.decode() for l in lines]}"
    )
    assert raw_server.proc.poll() is None, f"server exited with {raw_server.proc.returncode}"


def test_unknown_tool_name_is_a_jsonrpc_error(server) -> None:
    from mcp import MCPError

    with pytest.raises(MCPError) as info:
        server.call_raw({"session_id": "u1", "argv": ["get", "url"]}, tool="browser-shell-nope")
    assert info.value.code == -32602, f"code {info.value.code}: {info.value.message}"


# --------------------------------------------------------------------------- stdio of every kind

SCRIPT = [
    INIT,
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
     "params": {"name": "browser-shell", "arguments": {"session_id": "io1", "argv": ["eval", "1"]}}},
]


O_NONBLOCK = 0o4000


def _nonblocking(pid: int, fd: int) -> bool:
    flags = re.search(r"^flags:\s+([0-7]+)$", Path(f"/proc/{pid}/fdinfo/{fd}").read_text(), re.M)
    assert flags, f"no flags in /proc/{pid}/fdinfo/{fd}"
    return bool(int(flags.group(1), 8) & O_NONBLOCK)


def _start_wired(cfg, wiring: str, tmp: Path) -> tuple[subprocess.Popen, Any]:
    """Start the server with stdin/stdout/stderr of the kind `wiring` names. Returns the process
    and what feeds its stdin (None when stdin is a file that already holds the SCRIPT)."""
    script = "".join(json.dumps(m) + "\n" for m in SCRIPT).encode()
    env = dict(cfg.env(), RUST_LOG="debug")  # plenty of stderr, to meet stdout where they share
    stdin: Any = subprocess.PIPE
    stdout: Any = subprocess.PIPE
    stderr: Any = open(cfg.stderr_log, "ab")
    feed: Any = None
    if wiring == "stdin_file":
        (tmp / "in.jsonl").write_bytes(script)
        stdin = open(tmp / "in.jsonl", "rb")
    elif wiring == "stdin_socket":
        feed, stdin = socket.socketpair()
    elif wiring == "stdout_file":
        stdout = open(tmp / "out.jsonl", "wb")
    elif wiring == "stdout_shares_stderr":
        stderr = subprocess.STDOUT
    proc = subprocess.Popen(cfg.argv(), stdin=stdin, stdout=stdout, stderr=stderr, env=env)
    if wiring == "stdin_socket":
        stdin.close()
        feed.sendall(script)
    elif wiring != "stdin_file":
        feed = proc.stdin
        feed.write(script)
        feed.flush()
    return proc, feed


def _read_until_answered(stdout: Any, request_id: int, within: float = 20) -> bytes:
    """Read stdout (a pipe) until the answer to `request_id` has arrived; return what was read."""
    got = b""
    deadline = time.monotonic() + within
    while f'"id":{request_id}'.encode() not in got:
        left = deadline - time.monotonic()
        assert left > 0, f"no answer to id {request_id} within {within} s; stdout so far {got[:2000]!r}"
        if select.select([stdout], [], [], left)[0]:
            chunk = os.read(stdout.fileno(), 65536)
            assert chunk, f"stdout closed before the answer to id {request_id}; got {got[:2000]!r}"
            got += chunk
    return got


@pytest.mark.parametrize("wiring", ["pipes", "stdin_file", "stdin_socket", "stdout_file", "stdout_shares_stderr"])
def test_every_kind_of_stdio_is_served_and_only_pipes_of_our_own_turn_nonblocking(
    server_config, wiring: str, tmp_path: Path
) -> None:
    # Pipes are polled by the runtime (made non-blocking); a file, a socket, or a stdout pipe that
    # stderr shares stays blocking and is read or written on a blocking thread. Each way, every
    # request gets its answer as whole JSON-RPC lines, and the server exits 0 at EOF.
    cfg = server_config(tag="bsio")
    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()
    proc, feed = _start_wired(cfg, wiring, tmp_path)
    early = b""
    try:
        if wiring in ("pipes", "stdout_shares_stderr"):
            # Answered, and stdin still open: the server runs with its descriptors as set up.
            early = _read_until_answered(proc.stdout, 3)
            assert _nonblocking(proc.pid, 0), "stdin is a pipe: it should be polled, so non-blocking"
            assert _nonblocking(proc.pid, 1) is (wiring == "pipes"), (
                "stdout is made non-blocking exactly when it is a pipe that stderr does not share"
            )
        if feed is not None:
            if isinstance(feed, socket.socket):
                feed.shutdown(socket.SHUT_WR)
            else:
                feed.close()
        if wiring == "stdout_file":
            proc.wait(timeout=20)
            out = (tmp_path / "out.jsonl").read_bytes()
        else:
            proc.stdin = None  # already closed above; communicate() must not flush it
            rest, _ = proc.communicate(timeout=20)
            out = early + rest
    finally:
        if isinstance(feed, socket.socket):
            feed.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode == 0, f"{wiring}: exit {proc.returncode}"
    answers = {}
    for line in out.splitlines():
        if wiring == "stdout_shares_stderr" and not line.startswith(b"{"):
            continue  # a diagnostics line, on the same pipe by the caller's choice
        message = assert_jsonrpc_line(line + b"\n")
        answers[message.get("id")] = message
    assert set(answers) == {1, 2, 3}, f"{wiring}: answered ids {sorted(answers, key=str)}; stdout {out[:2000]!r}"
    assert [t["name"] for t in answers[2]["result"]["tools"]] == ["browser-shell"], answers[2]
    refused = answers[3]["result"]
    assert refused["isError"] is True and refused["structuredContent"]["exit_code"] == 126, refused


# --------------------------------------------------------------------------- revisions


HANDSHAKE_REVISIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
CURRENT_REVISION = "2026-07-28"


@pytest.mark.parametrize(
    ("revision", "agreed"),
    [*((r, r) for r in HANDSHAKE_REVISIONS), (CURRENT_REVISION, HANDSHAKE_REVISIONS[-1])],
)
def test_every_handshake_revision_is_negotiated_as_asked_and_served(raw_server: RawServer, revision: str, agreed: str) -> None:
    """2026-07-28 has no handshake: asked for in `initialize`, the newest revision that has one is agreed."""
    init = raw_server.request({**INIT, "params": {**INIT["params"], "protocolVersion": revision}})
    assert init["result"]["protocolVersion"] == agreed, init
    raw_server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    listing = raw_server.request({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert [t["name"] for t in listing["result"]["tools"]] == ["browser-shell"], listing
    refused = raw_server.request({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "browser-shell", "arguments": {"session_id": "rev", "argv": ["eval", "1"]}}})
    assert refused["result"]["structuredContent"]["exit_code"] == 126, refused


def test_the_current_revision_is_discovered_and_served_without_a_handshake(raw_server: RawServer) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": CURRENT_REVISION,
        "io.modelcontextprotocol/clientInfo": {"name": "e2e-modern", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    found = raw_server.request({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}})
    assert found["result"]["supportedVersions"] == [*HANDSHAKE_REVISIONS, CURRENT_REVISION], found
    listing = raw_server.request({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}})
    assert [t["name"] for t in listing["result"]["tools"]] == ["browser-shell"], listing
    call = raw_server.request({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "_meta": meta, "name": "browser-shell", "arguments": {"session_id": "rev", "argv": ["eval", "1"]}}})
    assert call["result"]["structuredContent"]["exit_code"] == 126, call
    # A revision this server does not speak is refused, naming the ones it does.
    future = {**meta, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    refused = raw_server.request({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": future}})
    assert refused["error"]["code"] == -32022 and CURRENT_REVISION in json.dumps(refused["error"]), refused


@pytest.mark.parametrize("mode", ["auto", CURRENT_REVISION, "legacy"])
def test_the_official_client_negotiates_the_newest_revision_it_can(server_config, mode: str) -> None:
    """mcp 2.x: `auto` discovers first and adopts 2026-07-28; `legacy` shakes hands at 2025-11-25.
    Either way the audit record names the client."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    cfg = server_config(tag="bsv")
    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()

    async def go() -> tuple[str, dict[str, Any]]:
        params = StdioServerParameters(command=str(cfg.server_bin), args=cfg.args(), env=cfg.env())
        with open(cfg.stderr_log, "a") as errlog, anyio.fail_after(60):
            async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
                tool = (await client.list_tools()).tools[0]
                await client.call_tool("browser-shell", {"session_id": "v1", "argv": ["eval", "1"]})
                return client.session.protocol_version, tool.model_dump(by_alias=True, exclude_none=True)

    version, tool = anyio.run(go)
    assert version == ("2025-11-25" if mode == "legacy" else CURRENT_REVISION), version
    assert tool["annotations"] == {
        "title": "Browser shell", "readOnlyHint": False, "destructiveHint": True, "openWorldHint": True,
    }, tool["annotations"]
    assert tool["inputSchema"]["properties"]["argv"]["items"] == {
        "anyOf": [{"type": "string", "maxLength": 4096}, {"type": "number"}, {"type": "boolean"}]
    }
    denied = [json.loads(line) for line in cfg.audit_log.read_text().splitlines()]
    denied = [r for r in denied if r["phase"] == "denied"]
    assert denied and denied[-1]["client"].startswith("mcp/"), denied
