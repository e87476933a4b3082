"""Fixtures for the browser-shell end-to-end suite.

Layout
------
* `chromium` (session): a headless Chromium we start ourselves, DevTools on 127.0.0.1.
* `web` (session): a tiny ThreadingHTTPServer on 127.0.0.1 serving /form, /submit, /next, /slow.
* `start_server` (function): factory that spawns `browser-shell serve ...` over stdio with the
  official `mcp` client and returns a `BlockingServer`: a synchronous facade whose MCP session lives
  in an anyio event loop on a helper thread (anyio blocking portal). Tests stay plain sync
  functions; async code (concurrency, cancellation) runs through `server.run(async_fn, ...)`.
* `call(session, sid, argv, timeout_sec=None)`: the async helper every tool call goes through. It
  checks the reply envelope (structuredContent == json.loads(content[0].text), required keys,
  echoed session id) and returns `(is_error, structured_dict)`.

On a failing test the tail of every browser-shell stderr log involved is attached to the report.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import harness

REPLY_KEYS = ("session_id", "exit_code", "stdout", "stderr")

# Every browser-shell stderr log opened during the current test (and long-lived ones).
_LOGS_THIS_TEST: list[Path] = []
_LONG_LIVED_LOGS: list[Path] = []


def log(msg: str) -> None:
    print(f"[e2e] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- reporting hooks


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _LOGS_THIS_TEST.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        seen: set[Path] = set()
        for path in [*_LOGS_THIS_TEST, *_LONG_LIVED_LOGS]:
            if path in seen:
                continue
            seen.add(path)
            report.sections.append((f"browser-shell stderr tail: {path}", harness.tail(path)))


# --------------------------------------------------------------------------- binaries


@dataclass(frozen=True)
class Binaries:
    server: Path
    agent_browser: Path


@pytest.fixture(scope="session")
def agent_browser_bin() -> Path:
    return _executable(
        harness.resolve_agent_browser(),
        "agent-browser binary",
        "set BROWSER_SHELL_AGENT_BROWSER, or install the pin in deploy/agent-browser with `npm ci`",
    )


@pytest.fixture(scope="session")
def binaries(agent_browser_bin: Path) -> Binaries:
    server = _executable(
        harness.resolve_server_bin(), "browser-shell server binary", "set BROWSER_SHELL_BIN or run `cargo build` first"
    )
    return Binaries(server=server, agent_browser=agent_browser_bin)


def _executable(path: Path, what: str, hint: str) -> Path:
    """Fail the whole run up front (not as 200 confusing errors) when a binary is missing."""
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"{what} not found/executable at {path} ({hint})", pytrace=False)
    return path


# --------------------------------------------------------------------------- loopback fixtures


@pytest.fixture(scope="session")
def e2e_workdir() -> Iterator[Path]:
    # Short path under /tmp: agent-browser's unix socket path must stay <= 103 bytes.
    path = Path(tempfile.mkdtemp(prefix="bse2e", dir="/tmp"))
    yield path
    if os.environ.get("BROWSER_SHELL_E2E_KEEP"):
        log(f"keeping work dir {path}")
    else:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def scratch() -> Iterator[Any]:
    """Factory: scratch(prefix, under="/tmp") -> a new directory, removed at teardown (kept with
    BROWSER_SHELL_E2E_KEEP). Audit logs and keys need one under /var/tmp: the confined agent-browser
    may write all of /tmp, and the server refuses evidence there."""
    made: list[Path] = []

    def _make(prefix: str, under: str = "/tmp") -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=under))
        made.append(path)
        return path

    yield _make
    for path in made:
        if os.environ.get("BROWSER_SHELL_E2E_KEEP"):
            log(f"keeping scratch dir {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def chromium(e2e_workdir: Path) -> Iterator[harness.Chromium]:
    with harness.run_chromium(e2e_workdir) as browser:
        log(f"chromium pid={browser.pid} cdp=127.0.0.1:{browser.port} log={browser.log_path}")
        try:
            yield browser
        finally:
            # agent-browser daemons outlive their CLI (and, by design, a stopped server: a new one
            # adopts them); at the end of the run none of the suite's may be left behind.
            for pid in harness.daemons_under(SERVER_BASES):
                with contextlib.suppress(ProcessLookupError):  # exited since the scan
                    os.kill(pid, signal.SIGKILL)
                    log(f"stopped leftover agent-browser daemon pid={pid}")


@pytest.fixture(scope="session")
def web() -> Iterator[harness.WebServer]:
    with harness.run_web_server() as srv:
        log(f"web server on 127.0.0.1:{srv.port}")
        yield srv


# --------------------------------------------------------------------------- the server


@dataclass
class ServerConfig:
    server_bin: Path
    agent_browser: Path
    cdp_port: int
    base: Path
    # Outside every writable root of the confinement (not /tmp): the server refuses an audit log
    # the confined agent-browser could edit.
    evidence: Path
    env_extra: dict[str, str] = field(default_factory=dict)
    extra_read_exec: list[str] = field(default_factory=list)
    audit_log_path: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    # The URL policy written for this server; None: no file (the built-in default policy).
    # Tests serve pages on 127.0.0.1, which the default refuses as loopback.
    policy_json: dict | None = field(default_factory=lambda: {"open": {"allow_private_cidrs": ["127.0.0.1/32"]}})

    @property
    def state_dir(self) -> Path:
        return self.base / "state"

    @property
    def output_dir(self) -> Path:
        return self.base / "out"

    @property
    def audit_log(self) -> Path:
        return self.audit_log_path or self.evidence / "audit.jsonl"

    @property
    def policy(self) -> Path:
        return self.base / "policy.json"

    def agent_browser_env(self) -> dict[str, str]:
        """The environment browser-shell gives agent-browser, for tests that run agent-browser by
        hand on the same state (e.g. to plant an unconfined daemon on its socket dir)."""
        return {
            "HOME": str(self.state_dir / "home"),
            "PATH": "/usr/bin:/bin",
            "AGENT_BROWSER_CONFIG": str(self.state_dir / "agent-browser.config.json"),
            "AGENT_BROWSER_SOCKET_DIR": str(self.state_dir / "sock"),
            "AGENT_BROWSER_NO_VERSION_CHECK": "1",
            "AGENT_BROWSER_IDLE_TIMEOUT_MS": "60000",
        }

    def write_policy(self) -> None:
        if self.policy_json is not None:
            self.policy.write_text(json.dumps(self.policy_json))

    @property
    def stderr_log(self) -> Path:
        return self.base / "server.stderr.log"

    def args(self) -> list[str]:
        return [
            "serve",
            "--agent-browser",
            str(self.agent_browser),
            "--cdp-port",
            str(self.cdp_port),
            "--state-dir",
            str(self.state_dir),
            "--output-dir",
            str(self.output_dir),
            "--audit-log",
            str(self.audit_log),
            "--policy",
            str(self.policy),
            *[arg for path in self.extra_read_exec for arg in ("--extra-read-exec", path)],
            *self.extra_args,
        ]

    def argv(self) -> list[str]:
        return [str(self.server_bin), *self.args()]

    def env(self) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "RUST_LOG": "info",
        }
        env.update(self.env_extra)
        return env


# Every server base dir the suite created, for the end-of-run daemon sweep.
SERVER_BASES: list[Path] = []


def new_server_config(
    binaries: Binaries,
    cdp_port: int,
    agent_browser: Path | None = None,
    tag: str = "bs",
    extra_read_exec: list[str] | None = None,
) -> ServerConfig:
    base = Path(tempfile.mkdtemp(prefix=tag, dir="/tmp"))
    SERVER_BASES.append(base)
    evidence = Path(tempfile.mkdtemp(prefix=f"{tag}-audit-", dir="/var/tmp"))
    return ServerConfig(
        server_bin=binaries.server,
        agent_browser=agent_browser or binaries.agent_browser,
        cdp_port=cdp_port,
        base=base,
        evidence=evidence,
        extra_read_exec=list(extra_read_exec or []),
    )


async def call(
    session: ClientSession,
    sid: str,
    argv: Sequence[Any],
    timeout_sec: int | None = None,
    *,
    read_timeout: float | None = None,
) -> tuple[bool, dict[str, Any]]:
    """One `browser-shell` tool call; returns (is_error, structuredContent).

    Asserts the reply envelope: structuredContent is an object carrying the contract keys, the
    echoed session id is ours, and content[0].text is the same object serialised as JSON.
    """
    arguments: dict[str, Any] = {"session_id": sid, "argv": list(argv)}
    if timeout_sec is not None:
        arguments["timeout_sec"] = timeout_sec
    return await call_raw(session, arguments, read_timeout=read_timeout, expect_sid=sid)


async def call_raw(
    session: ClientSession,
    arguments: Any,
    *,
    read_timeout: float | None = None,
    expect_sid: str | None = None,
    tool: str = "browser-shell",
) -> tuple[bool, dict[str, Any]]:
    result = await session.call_tool(tool, arguments, read_timeout_seconds=read_timeout)
    return check_envelope(result, expect_sid)


def check_envelope(result: Any, expect_sid: str | None) -> tuple[bool, dict[str, Any]]:
    structured = result.structured_content
    assert isinstance(structured, dict), f"structuredContent is not an object: {result!r}"
    missing = [k for k in REPLY_KEYS if k not in structured]
    assert not missing, f"structuredContent lacks {missing}: {structured!r}"
    assert isinstance(structured["exit_code"], int), structured
    assert isinstance(structured["stdout"], str), structured
    assert isinstance(structured["stderr"], str), structured
    assert result.content, f"reply has no content blocks: {result!r}"
    first = result.content[0]
    assert getattr(first, "type", None) == "text", f"content[0] is not text: {first!r}"
    try:
        as_json = json.loads(first.text)
    except ValueError as exc:
        raise AssertionError(f"content[0].text is not JSON ({exc}): {first.text!r}") from None
    assert as_json == structured, (
        f"content[0].text and structuredContent differ:\n text={as_json!r}\n structured={structured!r}"
    )
    if expect_sid is not None:
        assert structured["session_id"] == expect_sid, (
            f"reply carries session_id {structured['session_id']!r}, expected {expect_sid!r}"
        )
    return bool(result.is_error), structured


def describe(structured: Mapping[str, Any]) -> str:
    return json.dumps(structured, indent=1)[:3000]


@asynccontextmanager
async def open_session(cfg: ServerConfig, faults: list[str] | None = None):
    """stdio_client + ClientSession + initialize. Transport faults (e.g. a stdout line that is not
    JSON-RPC) are appended to `faults` instead of being silently dropped."""
    cfg.base.mkdir(parents=True, exist_ok=True)
    cfg.write_policy()
    params = StdioServerParameters(command=str(cfg.server_bin), args=cfg.args(), env=cfg.env())

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception) and faults is not None:
            faults.append(f"{type(message).__name__}: {message}")

    with open(cfg.stderr_log, "a", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                with anyio.fail_after(30):
                    await session.initialize()
                yield session


def find_server_pid(cfg: ServerConfig) -> int | None:
    """The server process: a child of ours running cfg.server_bin with our unique --state-dir."""
    me = os.getpid()
    for pid, argv in harness.proc_cmdlines().items():
        if str(cfg.server_bin) not in argv[:2] or str(cfg.state_dir) not in argv:
            continue
        if harness.parent_pid(pid) == me:
            return pid
    return None


class BlockingServer:
    """Synchronous facade over one MCP session with one browser-shell process."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self.portal: BlockingPortal | None = None
        self._session_cm: AbstractContextManager[ClientSession] | None = None
        self.session: ClientSession | None = None
        self.pid: int | None = None
        # Transport-level faults seen by the client: non-JSON-RPC lines on the server's stdout.
        self.faults: list[str] = []

    def start(self) -> BlockingServer:
        _LOGS_THIS_TEST.append(self.cfg.stderr_log)
        self._portal_cm = start_blocking_portal()
        self.portal = self._portal_cm.__enter__()
        try:
            self._session_cm = self.portal.wrap_async_context_manager(open_session(self.cfg, self.faults))
            self.session = self._session_cm.__enter__()
        except BaseException as exc:
            self._portal_cm.__exit__(None, None, None)
            raise RuntimeError(
                f"could not start/initialize browser-shell: {exc!r}\n"
                f"argv={self.cfg.argv()}\n--- stderr tail ---\n{harness.tail(self.cfg.stderr_log)}"
            ) from exc
        self.pid = find_server_pid(self.cfg)
        log(f"browser-shell pid={self.pid} base={self.cfg.base}")
        return self

    def stop(self) -> None:
        try:
            if self._session_cm is not None:
                self._session_cm.__exit__(None, None, None)
        finally:
            self._session_cm = None
            self.session = None
            if self._portal_cm is not None:
                self._portal_cm.__exit__(None, None, None)
            self._portal_cm = None
            self.portal = None

    # -- calls -----------------------------------------------------------------

    def run(self, fn, *args: Any) -> Any:
        """Run `await fn(session, *args)` on the session's event loop and return its result."""
        assert self.portal is not None and self.session is not None, "server not started"
        return self.portal.call(fn, self.session, *args)

    def call(
        self, sid: str, argv: Sequence[Any], timeout_sec: int | None = None, *, deadline: float = 150
    ) -> tuple[bool, dict[str, Any]]:
        async def _go(session: ClientSession) -> tuple[bool, dict[str, Any]]:
            with anyio.fail_after(deadline):
                return await call(session, sid, argv, timeout_sec)

        return self.run(_go)

    def call_raw(self, arguments: Any, *, tool: str = "browser-shell", deadline: float = 60) -> tuple[bool, dict[str, Any]]:
        async def _go(session: ClientSession) -> tuple[bool, dict[str, Any]]:
            with anyio.fail_after(deadline):
                return await call_raw(session, arguments, tool=tool)

        return self.run(_go)

    def ok(self, sid: str, argv: Sequence[Any], timeout_sec: int | None = None) -> dict[str, Any]:
        """A call that must succeed (isError false, exit 0); returns stdout parsed as JSON."""
        is_error, reply = self.call(sid, argv, timeout_sec)
        assert not is_error and reply["exit_code"] == 0, (
            f"call {list(argv)!r} in session {sid!r} failed:\n{describe(reply)}"
        )
        try:
            return json.loads(reply["stdout"])
        except ValueError as exc:
            raise AssertionError(
                f"stdout of {list(argv)!r} is not JSON ({exc}): {reply['stdout']!r}"
            ) from None

    def alive(self) -> bool:
        return self.pid is not None and not harness.is_zombie(self.pid)

    def stderr_tail(self) -> str:
        return harness.tail(self.cfg.stderr_log)


def _leftover_processes(cfg: ServerConfig) -> dict[int, list[str]]:
    """Processes (other than ours) that still reference this server instance's private dirs."""
    needle = str(cfg.base)
    hits: dict[int, list[str]] = {}
    me = os.getpid()
    for pid, argv in harness.proc_cmdlines().items():
        if pid == me:
            continue
        if any(needle in a for a in argv):
            hits[pid] = argv
            continue
        env = harness.proc_environ(pid)
        if any(needle in v for v in env.values()):
            hits[pid] = argv
    return hits


def cleanup_server(cfg: ServerConfig) -> None:
    leftovers = _leftover_processes(cfg)
    if leftovers:
        # Only processes provably spawned for this test's server instance (they carry its
        # private temp dir in argv/environment) are signalled, one PID at a time.
        log(f"processes left behind by browser-shell ({cfg.base}) after shutdown: {leftovers}")
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
        for pid in _leftover_processes(cfg):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if os.environ.get("BROWSER_SHELL_E2E_KEEP"):
        log(f"keeping server dir {cfg.base}")
    else:
        shutil.rmtree(cfg.base, ignore_errors=True)
        shutil.rmtree(cfg.evidence, ignore_errors=True)


@pytest.fixture
def server_config(binaries: Binaries, chromium: harness.Chromium) -> Iterator[Any]:
    """Factory: server_config(tag=..., agent_browser=...) -> a ServerConfig for a server the test
    starts by hand. At teardown its dirs are removed, and any process left behind is stopped."""
    made: list[ServerConfig] = []

    def _make(**kwargs: Any) -> ServerConfig:
        cfg = new_server_config(binaries, chromium.port, **kwargs)
        made.append(cfg)
        return cfg

    yield _make
    for cfg in made:
        cleanup_server(cfg)


@pytest.fixture
def start_server(binaries: Binaries, chromium: harness.Chromium) -> Iterator[Any]:
    """Factory: start_server(agent_browser=None) -> started BlockingServer (stopped at teardown)."""
    started: list[BlockingServer] = []

    def _start(
        agent_browser: Path | None = None,
        extra_read_exec: list[str] | None = None,
        audit_log: Path | None = None,
        extra_args: list[str] | None = None,
        **overrides: Any,
    ) -> BlockingServer:
        cfg = new_server_config(binaries, chromium.port, agent_browser, extra_read_exec=extra_read_exec)
        cfg.audit_log_path = audit_log
        cfg.extra_args = list(extra_args or [])
        for key, value in overrides.items():
            setattr(cfg, key, value)
        srv = BlockingServer(cfg)
        started.append(srv)
        return srv.start()

    yield _start
    for srv in reversed(started):
        try:
            srv.stop()
        finally:
            cleanup_server(srv.cfg)
    faults = [f for srv in started for f in srv.faults]
    assert not faults, f"browser-shell wrote stdout that is not valid JSON-RPC: {faults}"


@pytest.fixture
def server(start_server: Any) -> BlockingServer:
    return start_server()


# --------------------------------------------------------------------------- canary agent-browser


@dataclass
class Canary:
    script: Path
    marker: Path

    def lines(self) -> list[str]:
        try:
            return self.marker.read_text().splitlines()
        except FileNotFoundError:
            return []

    def settle_after_allowed_call(self, before: list[str], within: float = 10.0) -> list[str]:
        """An allowed call execs the canary once; a moment after its reply, browser-shell spawns the
        session's standby for its next call (src/standby.rs), which execs it once more. Wait for
        exactly those two, so a later "nothing was spawned" comparison cannot catch that standby."""
        end = time.monotonic() + within
        while len(self.lines()) < len(before) + 2 and time.monotonic() < end:
            time.sleep(0.02)
        time.sleep(0.1)  # nothing more may follow
        after = self.lines()
        assert len(after) == len(before) + 2, f"expected the call's exec and its standby's, got {after[len(before):]}"
        return after


def make_canary(directory: Path) -> Canary:
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / "marker"
    script = directory / "agent-browser"
    script.write_text(f'#!/bin/sh\necho "$$ $*" >> {marker}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return Canary(script=script, marker=marker)


@pytest.fixture(scope="module")
def canary_server(binaries: Binaries, chromium: harness.Chromium) -> Iterator[tuple[BlockingServer, Canary]]:
    """A browser-shell whose --agent-browser is a shell script that only records each exec.

    The positive control (an allowed call DOES leave a line in the marker) is asserted here, so
    every test using this fixture knows the detector works.
    """
    canary_dir = Path(tempfile.mkdtemp(prefix="bscan", dir="/tmp"))
    canary = make_canary(canary_dir)
    # The canary is a /bin/sh script: under confinement its interpreter must be executable too.
    cfg = new_server_config(
        binaries, chromium.port, agent_browser=canary.script, tag="bsc", extra_read_exec=["/usr"]
    )
    srv = BlockingServer(cfg)
    _LONG_LIVED_LOGS.append(cfg.stderr_log)
    try:
        srv.start()
        before = canary.lines()
        is_error, reply = srv.call("canary", ["get", "url"], 10)
        after = canary.settle_after_allowed_call(before)
        assert len(after) > len(before), (
            "positive control failed: an allowed call through the canary server did not exec "
            f"the --agent-browser script (marker unchanged).\nreply={describe(reply)}\n"
            f"--- server stderr ---\n{srv.stderr_tail()}"
        )
        log(f"canary positive control ok: is_error={is_error} reply={reply} marker+={after[len(before):]}")
        yield srv, canary
    finally:
        try:
            srv.stop()
        finally:
            _LONG_LIVED_LOGS.remove(cfg.stderr_log)
            cleanup_server(cfg)
            shutil.rmtree(canary_dir, ignore_errors=True)
    assert not srv.faults, f"browser-shell wrote stdout that is not valid JSON-RPC: {srv.faults}"
