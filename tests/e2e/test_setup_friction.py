"""Newcomer friction with the local stack (issue 18), run for real through deploy/local/*.

1. A checkout under /tmp starts the stack: its run dir (audit log, launcher, configs) defaults to a
   per-checkout dir outside /tmp, and browser-shell and agent-browser run from copies there (the
   server refuses binaries the confined child could replace); an explicit STACK_RUN_DIR under /tmp
   is refused with the exact command to run instead.
2. `down` finds a stack started with a custom STACK_RUN_DIR without being told, and with several
   it fails loudly (non-zero, naming STACK_RUN_DIR) instead of saying "nothing recorded".
3. A broken policy file is refused before anything starts, naming the user's file and the error.
4. The gateway's 401 names the header it wants; `deploy/local/vnc-url` prints a ticketed noVNC
   URL the gateway accepts.

Everything runs as subprocesses of the stack scripts, from a copy of this checkout where the test
needs one (a checkout under /tmp; and `down` without STACK_RUN_DIR only ever runs in that copy, so
it cannot see, let alone stop, a stack someone else started from this checkout). The registry the
scripts keep lives in a private XDG_STATE_HOME. Every address is on loopback.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from stack import PORT_VARS, free_ports

pytestmark = pytest.mark.stack

REPO = Path(__file__).resolve().parents[2]
ARCH = {"x86_64": "x64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
UP_TIMEOUT = 420
TOOLS_LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


# =========================================================================== helpers


def script_env(xdg: Path, server_bin: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without any stack setting, on free ports, with a private registry."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in PORT_VARS and not k.startswith("STACK_") and k not in ("DISPLAY", "BROWSER_SHELL_LOCAL_DEV", "BROWSER_SHELL_POLICY_FILE")
    }
    env.update(zip(PORT_VARS, map(str, free_ports(len(PORT_VARS))), strict=True))
    env["XDG_STATE_HOME"] = str(xdg)
    env["BROWSER_SHELL_BIN"] = str(server_bin)
    env.update(extra)
    return env


def run(
    script: Path, env: dict[str, str], timeout: float = 120, args: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A stack script, from / (not from the checkout: the scripts must not depend on the cwd)."""
    return subprocess.run(
        [str(script), *(args or [])], env=env, cwd="/", stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )


def out(r: subprocess.CompletedProcess[str]) -> str:
    return f"exit {r.returncode}\n--- stdout ---\n{r.stdout[-4000:]}\n--- stderr ---\n{r.stderr[-8000:]}"


def request(port: int, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    finally:
        conn.close()


def websocket_status(port: int, path: str) -> int:
    """The HTTP status of a WebSocket handshake on `path` (101 when upgraded), as noVNC opens it."""
    key = base64.b64encode(secrets.token_bytes(16)).decode()
    head = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(head.encode())
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split()[1]) if data else 0


def proc_stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()
    except OSError:
        return None


def start_time(pid: int) -> str:
    stat = proc_stat(pid)
    assert stat is not None, pid
    return stat[19]


def recorded(run_dir: Path) -> dict[str, int]:
    """name -> pid (= process group) from run_dir/pids."""
    return {line.split()[0]: int(line.split()[1]) for line in (run_dir / "pids").read_text().splitlines() if line.strip()}


def stack_processes(run_dir: Path, groups: set[int], markers: list[str]) -> dict[int, str]:
    """Live processes of a stack: in one of its process groups, or naming one of `markers` (its run
    dir, its state dir's socket dir) in their command line or environment."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        stat = proc_stat(pid)
        if stat is None or stat[0] == "Z":
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")
        except OSError:
            environ = ""
        if int(stat[2]) in groups or any(m in cmdline or m in environ for m in markers):
            found[pid] = cmdline[:300]
    return found


def markers_of(run_dir: Path) -> list[str]:
    markers = [str(run_dir)]
    state = (run_dir / "state-dir").read_text().strip() if (run_dir / "state-dir").exists() else ""
    if state:
        markers.append(f"AGENT_BROWSER_SOCKET_DIR={state}/sock")
    return markers


def wait_gone(run_dir: Path, groups: set[int], markers: list[str], timeout: float = 10) -> dict[int, str]:
    end = time.monotonic() + timeout
    while True:
        left = stack_processes(run_dir, groups, markers)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.2)


def remove_state(run_dir: Path) -> None:
    """The stack's state and output dirs (under /tmp): recorded by up, else up's default."""
    state = (run_dir / "state-dir").read_text().strip() if (run_dir / "state-dir").exists() else ""
    state = state or f"/tmp/bs-{hashlib.sha256(str(run_dir).encode()).hexdigest()[:10]}"
    if state.startswith("/tmp/bs-"):
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(state + "-out", ignore_errors=True)


def copy_checkout(dest: Path) -> None:
    """This checkout's working tree (what is being tested, uncommitted changes included) at dest,
    with the installed tools linked in: the pinned agent-browser and deploy/local/.tools (nginx,
    the hub's venv) are not in git, and the copy must not download them (loopback only here)."""
    ignore = shutil.ignore_patterns(".git", "target", ".venv", "node_modules", ".tools", ".run", "__pycache__")
    shutil.copytree(REPO, dest, symlinks=True, ignore=ignore, dirs_exist_ok=True)
    for rel in ("deploy/agent-browser/node_modules", "deploy/local/.tools"):
        src = REPO / rel
        if not src.is_dir():
            pytest.fail(f"{src} is missing: run deploy/local/install-deps and deploy/local/install-stack-deps first", pytrace=False)
        (dest / rel).symlink_to(src, target_is_directory=True)


# =========================================================================== fixtures


@pytest.fixture(scope="module")
def xdg() -> Iterator[Path]:
    """A private XDG_STATE_HOME (outside /tmp): the scripts' registry and /tmp checkouts' run dirs."""
    path = Path(tempfile.mkdtemp(prefix="bsf-xdg-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def checkout_under_tmp() -> Iterator[Path]:
    """A copy of this checkout under /tmp, as `git clone ... /tmp/x` would make it."""
    dest = Path(tempfile.mkdtemp(prefix="bs-friction-", dir="/tmp"))
    try:
        copy_checkout(dest)
        yield dest
    finally:
        shutil.rmtree(dest, ignore_errors=True)


@pytest.fixture
def tmp_checkout() -> Iterator[Path]:
    """A fresh copy per test: the stack the module keeps running (tmp_stack) has its own, so a
    `down` without STACK_RUN_DIR here sees only what this test started."""
    with checkout_under_tmp() as dest:
        yield dest


@dataclass
class TmpStack:
    checkout: Path
    run_dir: Path  # where the run dir must be: outside /tmp, per checkout
    env: dict[str, str]
    up: subprocess.CompletedProcess[str]

    @property
    def port(self) -> int:
        return int(self.env["PUBLIC_PORT"])

    def require_up(self) -> None:
        if self.up.returncode != 0:
            pytest.fail(f"deploy/local/up in a checkout under /tmp failed:\n{out(self.up)}", pytrace=False)

    @property
    def api_key(self) -> str:
        return (self.run_dir / "api-key").read_text().strip()


@pytest.fixture(scope="module")
def tmp_stack(xdg: Path, server_bin: Path) -> Iterator[TmpStack]:
    """deploy/local/up of a checkout under /tmp with every default (no STACK_RUN_DIR); at teardown
    deploy/local/down, also without STACK_RUN_DIR, must leave no process of the stack behind."""
    with checkout_under_tmp() as tmp_checkout:
        yield from _tmp_stack(tmp_checkout, xdg, server_bin)


def _tmp_stack(tmp_checkout: Path, xdg: Path, server_bin: Path) -> Iterator[TmpStack]:
    # The binary a clone under /tmp would build lies under /tmp too (up builds it when
    # BROWSER_SHELL_BIN is unset, which takes minutes: the one under test stands in for it).
    built = tmp_checkout / "target" / "release" / "browser-shell"
    built.parent.mkdir(parents=True)
    shutil.copy2(server_bin, built)
    env = script_env(xdg, built)
    expected = xdg / "browser-shell" / f"stack-{hashlib.sha256(str(tmp_checkout).encode()).hexdigest()[:12]}"
    up = run(tmp_checkout / "deploy" / "local" / "up", env, timeout=UP_TIMEOUT)
    stack = TmpStack(tmp_checkout, expected, env, up)
    groups = set(recorded(expected).values()) if (expected / "pids").exists() else set()
    markers = markers_of(expected) if expected.exists() else [str(tmp_checkout)]
    try:
        yield stack
        if up.returncode == 0:
            down = run(tmp_checkout / "deploy" / "local" / "down", env)
            assert down.returncode == 0, out(down)
            left = wait_gone(expected, groups, markers + [str(tmp_checkout)])
            assert not left, f"deploy/local/down (no STACK_RUN_DIR) left processes of the /tmp checkout's stack: {left}\n{out(down)}"
    finally:
        # Whatever is left, by its run dir (the scripts' own way), then the files.
        if expected.exists():
            run(tmp_checkout / "deploy" / "local" / "down", {**env, "STACK_RUN_DIR": str(expected)})
            remove_state(expected)
            shutil.rmtree(expected, ignore_errors=True)


# =========================================================================== 1. a checkout under /tmp


def test_a_checkout_under_tmp_starts_with_a_run_dir_outside_tmp(tmp_stack: TmpStack):
    tmp_stack.require_up()
    run_dir = tmp_stack.run_dir
    assert not str(run_dir).startswith(("/tmp/", "/dev/shm/")), run_dir
    # The stack's files are in the per-checkout run dir, and up said so.
    for name in ("pids", "api-key", "browser-shell", "mcp-hub.json", "stack.env"):
        assert (run_dir / name).exists(), f"{run_dir / name} is missing\n{out(tmp_stack.up)}"
    assert f"Audit log:              {run_dir}/audit.jsonl" in tmp_stack.up.stderr, out(tmp_stack.up)
    launcher = (run_dir / "browser-shell").read_text()
    assert f'--audit-log "{run_dir}/audit.jsonl"' in launcher, launcher
    # browser-shell refuses binaries the confined child could replace (it may write /tmp): both
    # programs run from copies in the run dir, agent-browser's alone in its directory.
    assert f'exec "{run_dir}/bin/browser-shell" serve' in launcher, launcher
    assert f'--agent-browser "{run_dir}/agent-browser/agent-browser-linux-musl-' in launcher, launcher
    assert [p.name for p in (run_dir / "agent-browser").iterdir()] == [f"agent-browser-linux-musl-{ARCH}"]
    assert "NOTE: this checkout" in tmp_stack.up.stderr and "under /tmp" in tmp_stack.up.stderr, out(tmp_stack.up)
    # It works: the one tool through the authenticated gateway.
    status, _, body = request(tmp_stack.port, "POST", "/mcp", {**MCP_HEADERS, "X-AIO-API-Key": tmp_stack.api_key}, TOOLS_LIST)
    assert status == 200, (status, body[:300])
    assert [t["name"] for t in json.loads(body)["result"]["tools"]] == ["browser-shell"]
    # And browser-shell accepted the audit log there (it refuses one the confined child may write).
    assert (run_dir / "audit.jsonl").exists()


def test_a_run_dir_under_tmp_is_refused_with_the_exact_command(tmp_checkout: Path, xdg: Path, server_bin: Path):
    wanted = Path(tempfile.mktemp(prefix="bsf-run-", dir="/tmp"))
    env = script_env(xdg, server_bin, STACK_RUN_DIR=str(wanted))
    r = run(tmp_checkout / "deploy" / "local" / "up", env)
    assert r.returncode != 0, out(r)
    default = xdg / "browser-shell" / f"stack-{hashlib.sha256(str(tmp_checkout).encode()).hexdigest()[:12]}"
    assert f"STACK_RUN_DIR={default} {tmp_checkout}/deploy/local/up" in r.stderr, out(r)
    assert "[up] started" not in r.stderr and not wanted.exists(), out(r)


def test_a_checkout_under_tmp_without_a_usable_home_is_told_the_exact_command(tmp_checkout: Path, xdg: Path, server_bin: Path):
    env = script_env(xdg, server_bin, HOME="/tmp")
    del env["XDG_STATE_HOME"]
    r = run(tmp_checkout / "deploy" / "local" / "up", env)
    assert r.returncode != 0, out(r)
    match = re.search(rf"STACK_RUN_DIR=(\S+) {re.escape(str(tmp_checkout))}/deploy/local/up", r.stderr)
    assert match and not match.group(1).startswith("/tmp/"), out(r)
    assert "[up] started" not in r.stderr, out(r)


# =========================================================================== 2. down finds the stack


def test_down_without_stack_run_dir_stops_a_stack_started_with_one(tmp_checkout: Path, xdg: Path, server_bin: Path):
    run_dir = Path(tempfile.mkdtemp(prefix="bsf-run-", dir="/var/tmp"))
    env = script_env(xdg, server_bin, STACK_RUN_DIR=str(run_dir))
    bare = {k: v for k, v in env.items() if k != "STACK_RUN_DIR"}
    down_script = tmp_checkout / "deploy" / "local" / "down"
    try:
        up = run(tmp_checkout / "deploy" / "local" / "up", env, timeout=UP_TIMEOUT)
        assert up.returncode == 0, out(up)
        groups = set(recorded(run_dir).values())
        markers = markers_of(run_dir)
        # Positive control: the detector sees the running stack (Xvfb, Chromium, ... by group).
        alive = stack_processes(run_dir, groups, markers)
        assert len(alive) >= len(groups), alive

        down = run(down_script, bare)
        assert down.returncode == 0, out(down)
        left = wait_gone(run_dir, groups, markers)
        assert not left, f"down without STACK_RUN_DIR left the stack running: {left}\n{out(down)}"
        assert not (run_dir / "pids").exists()

        again = run(down_script, env)
        assert again.returncode == 0 and "nothing recorded" in again.stderr, out(again)
        # up printed the exact command for this run dir.
        assert f"STACK_RUN_DIR={run_dir} {tmp_checkout}/deploy/local/down" in up.stderr, out(up)
    finally:
        run(down_script, env)
        remove_state(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)


def _fake_stack(xdg: Path, checkout: Path) -> tuple[Path, subprocess.Popen]:
    """A run dir whose pids file records one harmless process group (a sleep), registered the way
    up registers a stack (see deploy/local/stack-lib.sh)."""
    run_dir = Path(tempfile.mkdtemp(prefix="bsf-fake-", dir="/var/tmp"))
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL)
    (run_dir / "pids").write_text(f"sleeper {proc.pid} {start_time(proc.pid)}\n")
    registry = xdg / "browser-shell" / "stacks"
    registry.mkdir(parents=True, exist_ok=True)
    (registry / hashlib.sha256(str(run_dir).encode()).hexdigest()[:12]).write_text(f"run={run_dir}\ncheckout={checkout}\n")
    return run_dir, proc


def _alive(proc: subprocess.Popen) -> bool:
    if proc.poll() is not None:
        return False
    stat = proc_stat(proc.pid)
    return stat is not None and stat[0] != "Z"


def test_down_with_several_stacks_and_no_stack_run_dir_fails_loudly(tmp_checkout: Path, xdg: Path, server_bin: Path):
    env = script_env(xdg, server_bin)
    down_script = tmp_checkout / "deploy" / "local" / "down"
    (a, pa), (b, pb) = _fake_stack(xdg, tmp_checkout), _fake_stack(xdg, tmp_checkout)
    try:
        r = run(down_script, env)
        assert r.returncode != 0, out(r)
        for d in (a, b):
            assert f"STACK_RUN_DIR={d} {tmp_checkout}/deploy/local/down" in r.stderr, out(r)
        assert _alive(pa) and _alive(pb), "down guessed and stopped a stack"

        # Told which one: exactly that one stops.
        r = run(down_script, {**env, "STACK_RUN_DIR": str(a)})
        assert r.returncode == 0, out(r)
        pa.wait(timeout=10)
        assert _alive(pb)

        # A STACK_RUN_DIR with nothing in it while another stack runs: loud, and names the other.
        empty = Path(tempfile.mkdtemp(prefix="bsf-empty-", dir="/var/tmp"))
        r = run(down_script, {**env, "STACK_RUN_DIR": str(empty)})
        shutil.rmtree(empty, ignore_errors=True)
        assert r.returncode != 0 and f"STACK_RUN_DIR={b}" in r.stderr, out(r)
        assert _alive(pb)

        # One left: down without STACK_RUN_DIR finds and stops it.
        r = run(down_script, env)
        assert r.returncode == 0, out(r)
        pb.wait(timeout=10)
    finally:
        for proc in (pa, pb):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for d in (a, b):
            shutil.rmtree(d, ignore_errors=True)


# =========================================================================== 3. a broken policy file


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ('{"open": {"allow_private_cidrs": ["127.0.0.1/32"]}\n', r"(?i)(expecting|EOF while parsing).*line \d+ column \d+"),
        ('{"open": {"allow_private_cidrs": ["127.0.0.1/32"]}, "bogus_key": 1}\n', r"unknown field `bogus_key`"),
    ],
    ids=["invalid-json", "unknown-key"],
)
def test_a_broken_policy_is_refused_before_anything_starts(xdg: Path, server_bin: Path, content: str, error: str):
    work = Path(tempfile.mkdtemp(prefix="bsf-policy-", dir="/var/tmp"))
    policy = work / "my-policy.json"
    policy.write_text(content)
    run_dir = work / "run"
    env = script_env(xdg, server_bin, STACK_RUN_DIR=str(run_dir), BROWSER_SHELL_POLICY_FILE=str(policy))
    try:
        r = run(REPO / "deploy" / "local" / "up", env, timeout=UP_TIMEOUT)
        assert r.returncode != 0, out(r)
        assert f"BROWSER_SHELL_POLICY_FILE={policy}" in r.stderr, out(r)  # the user's file, not a copy
        assert re.search(error, r.stderr), out(r)
        assert "[up] started" not in r.stderr, out(r)
        assert not (run_dir / "pids").exists() and not (run_dir / "policy.json").exists(), out(r)
        assert not stack_processes(run_dir, set(), [str(run_dir)]), "a process of the stack was started"
    finally:
        if (run_dir / "pids").exists():
            run(REPO / "deploy" / "local" / "down", env)
        remove_state(run_dir)
        shutil.rmtree(work, ignore_errors=True)


# =========================================================================== 4. the 401 and the VNC view


def test_the_gateway_401_names_the_header_it_wants(tmp_stack: TmpStack):
    tmp_stack.require_up()
    for method, path, body in (("POST", "/tickets", b""), ("GET", "/websockify", b"")):
        status, headers, text = request(tmp_stack.port, method, path, MCP_HEADERS, body)
        assert status == 401, (method, path, status)
        assert b"X-AIO-API-Key:" in text and b"Authorization: Bearer" in text, text
        assert b"vnc-url" in text and b"/tickets" in text, text
        assert headers.get("content-type", "").startswith("text/plain"), headers
    # /mcp says the same as a JSON-RPC error MCP clients show (tests/e2e/test_stack_clients.py).
    for method, body in (("POST", TOOLS_LIST), ("GET", b"")):
        status, headers, text = request(tmp_stack.port, method, "/mcp", MCP_HEADERS, body)
        assert status == 403 and headers.get("content-type") == "application/json", (method, status, headers)
        assert "X-AIO-API-Key: <key>" in json.loads(text)["error"]["message"], text
    # The refused request is logged under its own method and path, not the 401 page's.
    log = (tmp_stack.run_dir / "logs" / "nginx.log").read_text()
    assert re.search(r'"POST /tickets HTTP/1\.1" 401 ', log), log[-2000:]
    assert re.search(r'"POST /mcp HTTP/1\.1" 403 ', log), log[-2000:]
    assert "_browser_shell_401" not in log, log[-2000:]
    # The body's own location is not a door: asked for directly it is a 404.
    assert request(tmp_stack.port, "GET", "/_browser_shell_401")[0] == 404
    # With the key: not a 401 (positive control of the check above).
    status, _, _ = request(tmp_stack.port, "POST", "/mcp", {**MCP_HEADERS, "X-AIO-API-Key": tmp_stack.api_key}, TOOLS_LIST)
    assert status == 200


def test_vnc_url_prints_a_ticketed_url_the_gateway_accepts(tmp_stack: TmpStack):
    tmp_stack.require_up()
    assert f"{tmp_stack.checkout}/deploy/local/vnc-url" in tmp_stack.up.stderr, "up's output names vnc-url"
    r = run(tmp_stack.checkout / "deploy" / "local" / "vnc-url", tmp_stack.env)
    assert r.returncode == 0, out(r)
    (url,) = r.stdout.split()
    parts = urllib.parse.urlsplit(url)
    assert (parts.scheme, parts.hostname, parts.port, parts.path) == ("http", "127.0.0.1", tmp_stack.port, "/vnc/vnc.html"), url
    query = urllib.parse.parse_qs(parts.query)
    assert query["autoconnect"] == ["1"], url
    (ws_path,) = query["path"]
    assert ws_path.startswith("websockify?ticket="), url
    # The VNC password rides after '#', which the browser sends nowhere: the view-only one by default,
    # the one that may click (approval dialogs) with --control.
    run_dir = tmp_stack.run_dir
    assert parts.fragment == "password=" + (run_dir / "vnc-view-password").read_text().strip(), url
    control = run(tmp_stack.checkout / "deploy" / "local" / "vnc-url", tmp_stack.env, args=["--control"])
    assert control.returncode == 0, out(control)
    assert control.stdout.strip().endswith("#password=" + (run_dir / "vnc-password").read_text().strip())
    # The page noVNC is, as the browser asks for it (the query goes to nginx too).
    status, _, page = request(tmp_stack.port, "GET", f"{parts.path}?{parts.query}")
    assert status == 200 and b"noVNC" in page, status
    # The WebSocket noVNC then opens: upgraded with the ticket, once.
    assert websocket_status(tmp_stack.port, "/" + ws_path) == 101
    assert websocket_status(tmp_stack.port, "/" + ws_path) == 401, "a ticket works once"
    # Without a ticket, what noVNC reports as "Failed to connect": refused by the gateway.
    assert websocket_status(tmp_stack.port, "/websockify") in (401, 403)
    # A second run prints a new ticket that works too.
    again = run(tmp_stack.checkout / "deploy" / "local" / "vnc-url", tmp_stack.env)
    assert again.returncode == 0 and again.stdout.split() != [url], out(again)
    ws_again = urllib.parse.parse_qs(urllib.parse.urlsplit(again.stdout.split()[0]).query)["path"][0]
    assert websocket_status(tmp_stack.port, "/" + ws_again) == 101
